"""Preparing a local run: the deployed manifest with its meta, and the checkpoint to use.

A run of an unchanged query resumes the newest checkpoint of its version, so rerunning
after more input processes exactly the new input. A changed query (its SQL or code, or
its target) gets the next version and a fresh checkpoint. The full deploy decision
(savepoints, state-compatible changes) belongs to ``deploy``.
"""

from __future__ import annotations

import os
import secrets
import tempfile
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from runner.layout import StateLayout
from runner.manifest import Manifest, Meta, load_manifest


@dataclass(frozen=True)
class PreparedRun:
    manifest: Manifest  # merged, with meta
    checkpoint: Path
    dead_letter: Path
    resumed: bool  # continuing an earlier run's checkpoint
    new_version: bool  # the query changed since the deployed one


def new_run_id(now: datetime) -> str:
    return f"run-{now.strftime('%Y%m%dT%H%M%SZ')}-{secrets.token_hex(3)}"


def _same_query(a: Manifest, b: Manifest) -> bool:
    return (a.sql, a.code, a.target_table) == (b.sql, b.code, b.target_table)


def latest_run(layout: StateLayout, name: str, version: int) -> Path | None:
    """Newest run folder of a version that Spark has written to."""
    folder = layout.version_checkpoints(name, version)
    runs = sorted(p for p in folder.glob("run-*") if (p / "metadata").exists()) if folder.is_dir() else []
    return runs[-1] if runs else None


def prepare(layout: StateLayout, manifest: Manifest, *, now: datetime | None = None,
            fresh: bool = False) -> PreparedRun:
    """Decide version and checkpoint for ``manifest`` and record it as deployed."""
    now = now or datetime.now(UTC)
    deployed_path = layout.deployed_manifest(manifest.name)
    previous = load_manifest(deployed_path, allow_meta=True) if deployed_path.exists() else None
    new_version = previous is None or previous.meta is None or not _same_query(previous, manifest)
    if previous is not None and previous.meta is not None and not new_version:
        meta = previous.meta
    else:
        meta = Meta(
            query_id=previous.meta.query_id if previous and previous.meta else str(uuid.uuid4()),
            query_version=previous.meta.query_version + 1 if previous and previous.meta else 1,
            query_create_timestamp=now.replace(microsecond=0),
        )
    deployed = manifest.model_copy(update={"meta": meta})
    resume = None if (fresh or new_version) else latest_run(layout, manifest.name, meta.query_version)
    checkpoint = resume or layout.checkpoint(manifest.name, meta.query_version, new_run_id(now))
    write_atomically(deployed_path, deployed.to_yaml())
    return PreparedRun(deployed, checkpoint, layout.dead_letter(manifest.name), resume is not None, new_version)


def write_atomically(path: Path, text: str) -> None:
    """Write via a temporary file and rename, so readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
