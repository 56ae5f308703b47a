"""What ``sql-runner status`` shows of a deployed job: its record, its target and its last progress."""

from __future__ import annotations

import json
from typing import Any

from runner.core import layout
from runner.state import records, savepoints
from runner.state.store import Store
from runner.targets.base import Target


def job_status(store: Store, target: Target, team: str, name: str) -> dict[str, Any]:
    """One deployed job's state: running, stopped, failed, not running or removed, with its progress."""
    record, _ = records.read_deployed(store.manifests, name)
    assert record is not None, f"{name} is listed as deployed"
    job = target.find(team, name)
    blob = store.manifests.read(layout.status(name))
    published = json.loads(blob.text) if blob else {}
    progress = published.get("progress") or {} if published.get("version") == record.version else {}
    if record.removed:
        state = "removed" + (" (still running)" if job else "")
    elif job is not None:
        state = "running"
    elif published.get("version") == record.version and published.get("state") in ("failed", "stopped"):
        state = published["state"]
    else:
        state = "not running"
    why = None
    if state == "failed":
        refused = published.get("state-refused")
        why = f"Spark refused the restored state: {refused}" if refused else published.get("error")
    latest = savepoints.savepoints(store, name, record.version)
    rate = progress.get("input-rows-per-second")
    return {
        "name": name,
        "version": record.version,
        "target": record.target,
        "state": state,
        "last progress": progress.get("timestamp"),
        "input rows/s": None if rate is None else round(rate, 1),
        "batch ms": progress.get("batch-duration-ms"),
        "watermark": progress.get("watermark"),
        "latest savepoint": latest[-1].key.rstrip("/").rsplit("/", 1)[-1] if latest else None,
        "job": job.job_id if job else None,
        "detail": job.detail if job else None,
        "why": why,
    }
