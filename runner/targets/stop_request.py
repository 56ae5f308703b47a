"""Stopping an application's job at a micro-batch boundary, through the state store.

The runner writes ``control/<name>/stop.json`` (a request id and the job's version); the
job stops its queries when no micro-batch is in flight and answers with
``control/<name>/stopped.json`` carrying the same id. A job that does not stop within
the timeout is killed, and its latest checkpoint is what the savepoint holds.
"""

from __future__ import annotations

import time
from typing import Protocol

from runner.core.bucket import Bucket
from runner.core.protocol.control import StopRequest, clear_stop, read_stop_ack, write_stop_request
from runner.targets.base import RunningJob

POLL_SECONDS = 0.2
KILL_WAIT_SECONDS = 30.0


class _Stoppable(Protocol):
    def find(self, team: str, name: str) -> RunningJob | None: ...

    def stop(self, job: RunningJob, *, force: bool) -> None: ...


def request_stop(bucket: Bucket, target: _Stoppable, job: RunningJob, timeout: float) -> bool:
    """Ask ``job`` to stop after its current micro-batch; kill it after ``timeout``. True if it stopped itself."""
    identity = job.identity
    request = StopRequest(version=identity.version)
    write_stop_request(bucket, identity.name, request)
    deadline = time.monotonic() + timeout
    acknowledged = False
    while time.monotonic() < deadline:
        ack = read_stop_ack(bucket, identity.name)
        acknowledged = ack is not None and ack.id == request.id
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
    clear_stop(bucket, identity.name)
    return graceful
