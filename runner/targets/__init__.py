"""Where jobs run: local processes, a Spark standalone cluster, or YARN (PRODUCT.md §5)."""

from __future__ import annotations

from runner.targets.base import JobIdentity, RunningJob, Target
from runner.targets.local import LocalTarget
from runner.targets.standalone import StandaloneTarget
from runner.targets.yarn import YarnTarget

__all__ = ["JobIdentity", "LocalTarget", "RunningJob", "StandaloneTarget", "Target", "YarnTarget"]
