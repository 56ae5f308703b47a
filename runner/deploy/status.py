"""What ``sql-runner status`` shows of a deployed job: its record, its target and its last progress."""

from __future__ import annotations

import json
from typing import Any

from runner.core import layout
from runner.core.catalog import Catalog
from runner.state import records, savepoints
from runner.state.store import Store
from runner.targets.modes import Targets


def job_status(store: Store, targets: Targets, team: str, name: str) -> dict[str, Any]:
    """One deployed job's state: running, stopped, failed, not running or removed, with its progress."""
    record, _ = records.read_deployed(store.manifests, name)
    assert record is not None, f"{name} is listed as deployed"
    job = targets.find(team, name)
    blob = store.manifests.read(layout.status(name))
    published = json.loads(blob.text) if blob else {}
    progress = published.get("progress") or {} if published.get("version") == record.version else {}
    this_version = published.get("version") == record.version
    if record.removed:
        state = "removed" + (" (still running)" if job else "")
    elif job is not None:
        # a session query between restarts is still found, but failing
        state = "failing" if this_version and published.get("state") == "failing" else "running"
    elif this_version and published.get("state") in ("failed", "stopped"):
        state = published["state"] + (
            " (parked)" if published.get("parked") else " (restarts used up)" if published.get("gave-up") else ""
        )
    else:
        state = "not running"
    why = None
    if state.startswith("failed") or state == "failing":
        refused = published.get("state-refused")
        why = f"Spark refused the restored state: {refused}" if refused else published.get("error")
    latest = savepoints.savepoints(store, name, record.version)
    target = Catalog(record.tables).lookup_name(record.manifest.target_table)
    rate = progress.get("input-rows-per-second")
    return {
        "name": name,
        "version": record.version,
        "target": record.target,
        "state": state,
        "restarts": published.get("restarts", 0) if this_version else 0,
        "last progress": progress.get("timestamp"),
        "input rows/s": None if rate is None else round(rate, 1),
        "batch ms": progress.get("batch-duration-ms"),
        "watermark": progress.get("watermark"),
        "latest savepoint": latest[-1].key.rstrip("/").rsplit("/", 1)[-1] if latest else None,
        "output": target.delivery if target is not None else None,
        "job": job.job_id if job else None,
        "detail": job.detail if job else None,
        "why": why,
    }
