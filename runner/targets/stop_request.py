"""Stopping an application's job at a micro-batch boundary, through the state store.

The runner writes ``control/<name>/stop.json`` (a request id and the job's version); the
job stops its queries when no micro-batch is in flight and answers with
``control/<name>/stopped.json`` carrying the same id. A job that does not stop within
the timeout is killed, and its latest checkpoint is what the savepoint holds.
"""

from __future__ import annotations

import json
import time
import uuid
from datetime import UTC, datetime
from typing import Protocol

from runner.core import layout
from runner.core.bucket import Bucket
from runner.targets.base import RunningJob

POLL_SECONDS = 0.2
KILL_WAIT_SECONDS = 30.0


class _Stoppable(Protocol):
    def find(self, team: str, name: str) -> RunningJob | None: ...

    def stop(self, job: RunningJob, *, force: bool) -> None: ...


def clear(bucket: Bucket, name: str) -> None:
    """Forget an answered (or abandoned) stop request, so the next run of the job is not stopped by it."""
    bucket.delete(layout.stop_request(name))
    bucket.delete(layout.stop_acknowledged(name))


def request_stop(bucket: Bucket, target: _Stoppable, job: RunningJob, timeout: float) -> bool:
    """Ask ``job`` to stop after its current micro-batch; kill it after ``timeout``. True if it stopped itself."""
    identity = job.identity
    request_id = uuid.uuid4().hex[:12]
    bucket.write(
        layout.stop_request(identity.name),
        json.dumps(
            {"id": request_id, "version": identity.version, "requested-at": datetime.now(UTC).isoformat()}
        ).encode(),
    )
    deadline = time.monotonic() + timeout
    acknowledged = False
    while time.monotonic() < deadline:
        ack = bucket.read(layout.stop_acknowledged(identity.name))
        acknowledged = ack is not None and json.loads(ack.text).get("id") == request_id
        if target.find(identity.team, identity.name) is None:
            break
        time.sleep(POLL_SECONDS)
    graceful = acknowledged
    if target.find(identity.team, identity.name) is not None:
        target.stop(job, force=True)
        kill_deadline = time.monotonic() + KILL_WAIT_SECONDS
        while target.find(identity.team, identity.name) is not None and time.monotonic() < kill_deadline:
            time.sleep(POLL_SECONDS)
        graceful = False
    clear(bucket, identity.name)
    return graceful
