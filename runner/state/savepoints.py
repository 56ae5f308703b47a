"""Savepoints on Spark: consistent copies of a stopped query's checkpoint.

A savepoint is taken after the job stopped at a micro-batch boundary (or, failing that,
was killed: then it is the latest checkpoint, and says so). Every file of the run folder
is copied to ``savepoints/<name>/<version>/savepoint-<ts>-<id>/`` and a ``_SAVEPOINT.json``
marker is written last, so a half-copied savepoint is never listed. Restoring copies a
savepoint into a fresh run folder. Retention keeps the newest N savepoints and run
folders of each version.
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime

from runner.core import layout
from runner.core.bucket import Bucket
from runner.core.stateref import StateRef
from runner.state.store import Store

MARKER = "_SAVEPOINT.json"
_STAMP = "%Y%m%dT%H%M%SZ"
_RUN = re.compile(r"^run-(\d{8}T\d{6}Z)-[0-9a-f]+$")
_SAVEPOINT = re.compile(r"^savepoint-(\d{8}T\d{6}Z)-[0-9a-f]+$")


def new_run_id(now: datetime) -> str:
    return f"run-{now.astimezone(UTC).strftime(_STAMP)}-{secrets.token_hex(3)}"


def new_savepoint_id(now: datetime) -> str:
    return f"savepoint-{now.astimezone(UTC).strftime(_STAMP)}-{secrets.token_hex(3)}"


def _created(folder: str, pattern: re.Pattern[str]) -> datetime | None:
    match = pattern.match(folder)
    return datetime.strptime(match.group(1), _STAMP).replace(tzinfo=UTC) if match else None


def _children(keys: list[str], prefix: str) -> dict[str, list[str]]:
    """Keys under ``prefix`` grouped by their first path segment."""
    groups: dict[str, list[str]] = {}
    for key in keys:
        rest = key[len(prefix) :]
        if "/" in rest:
            groups.setdefault(rest.split("/", 1)[0], []).append(rest.split("/", 1)[1])
    return groups


def checkpoints(store: Store, name: str, version: int) -> list[StateRef]:
    """Run folders of a version that Spark has started writing (they hold ``metadata``), oldest first."""
    prefix = layout.version_checkpoints(name, version)
    runs = _children(store.checkpoints.keys(prefix), prefix)
    refs = [
        StateRef(kind="checkpoint", version=version, key=f"{prefix}{run}/", created=_created(run, _RUN))
        for run, files in runs.items()
        if "metadata" in files and _RUN.match(run)
    ]
    return sorted(refs, key=lambda r: (r.created or datetime.min.replace(tzinfo=UTC), r.key))


def savepoints(store: Store, name: str, version: int) -> list[StateRef]:
    """Complete savepoints of a version (their marker is written), oldest first."""
    prefix = layout.version_savepoints(name, version)
    found = _children(store.savepoints.keys(prefix), prefix)
    refs = [
        StateRef(kind="savepoint", version=version, key=f"{prefix}{folder}/", created=_created(folder, _SAVEPOINT))
        for folder, files in found.items()
        if MARKER in files and _SAVEPOINT.match(folder)
    ]
    return sorted(refs, key=lambda r: (r.created or datetime.min.replace(tzinfo=UTC), r.key))


@dataclass(frozen=True)
class Taken:
    ref: StateRef
    files: int
    graceful: bool
    last_batch: int | None


def last_committed_batch(bucket: Bucket, checkpoint_key: str) -> int | None:
    """The highest batch id in a query checkpoint's ``commits/`` log."""
    ids = [
        int(k.rsplit("/", 1)[-1]) for k in bucket.keys(f"{checkpoint_key}commits/") if k.rsplit("/", 1)[-1].isdigit()
    ]
    return max(ids) if ids else None


def take(
    store: Store, name: str, version: int, checkpoint_key: str, *, now: datetime, graceful: bool, reason: str
) -> Taken:
    """Copy a stopped run's checkpoint to a new savepoint; the marker goes last."""
    savepoint_id = new_savepoint_id(now)
    key = layout.savepoint(name, version, savepoint_id)
    files = store.checkpoints.copy_prefix(checkpoint_key, key, into=store.savepoints)
    batch = last_committed_batch(store.checkpoints, checkpoint_key)
    marker = {
        "name": name,
        "version": version,
        "checkpoint": checkpoint_key,
        "taken-at": now.isoformat(),
        "graceful": graceful,
        "reason": reason,
        "files": files,
        "last-committed-batch": batch,
    }
    store.savepoints.write(f"{key}{MARKER}", json.dumps(marker, indent=2).encode())
    return Taken(
        StateRef(kind="savepoint", version=version, key=key, created=_created(savepoint_id, _SAVEPOINT)),
        files,
        graceful,
        batch,
    )


def restore(store: Store, ref: StateRef, name: str, version: int, run_id: str) -> str:
    """Copy a savepoint into a fresh run folder of ``version``; returns the folder's key."""
    destination = layout.checkpoint(name, version, run_id)
    store.savepoints.copy_prefix(ref.key, destination, into=store.checkpoints)
    store.checkpoints.delete(f"{destination}{MARKER}")
    return destination


def apply_retention(
    store: Store, name: str, version: int, *, keep_savepoints: int, keep_runs: int, in_use: str | None
) -> list[str]:
    """Delete all but the newest savepoints and run folders of a version; never the run in use."""
    deleted: list[str] = []
    for ref in savepoints(store, name, version)[:-keep_savepoints]:
        store.savepoints.delete_prefix(ref.key)
        deleted.append(ref.key)
    runs = checkpoints(store, name, version)
    for ref in runs[:-keep_runs]:
        if in_use and ref.key == in_use:
            continue
        store.checkpoints.delete_prefix(ref.key)
        deleted.append(ref.key)
    return deleted
