"""Where jobs run: local processes, a Spark standalone cluster, or YARN."""

from __future__ import annotations

from pathlib import Path

from runner.core.bucket import Bucket
from runner.core.errors import UserError
from runner.targets.base import Launch, RunningJob, Target
from runner.targets.local import LocalTarget
from runner.targets.standalone import StandaloneTarget
from runner.targets.yarn import YarnTarget

__all__ = [
    "Launch",
    "LocalTarget",
    "RunningJob",
    "StandaloneTarget",
    "Target",
    "YarnTarget",
    "open_target",
]


def open_target(
    kind: str,
    *,
    records: Bucket,
    log_dir: Path,
    master: str | None = None,
    master_web_ui: str | None = None,
    resource_manager: str | None = None,
) -> Target:
    """The target named ``kind``; ``records``: the bucket where local and standalone jobs are recorded."""
    if kind == "local":
        return LocalTarget(records, log_dir)
    if kind == "standalone":
        if not master:
            raise UserError.of("TARGET_NEEDS_MASTER")
        return StandaloneTarget(records, log_dir, master, master_web_ui)
    if kind == "yarn":
        if not resource_manager:
            raise UserError.of("TARGET_NEEDS_RESOURCE_MANAGER")
        return YarnTarget(resource_manager, records)
    raise UserError.of("UNKNOWN_TARGET", kind=kind, targets="local, standalone, yarn")
