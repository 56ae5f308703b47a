"""Requests to a job or the session and their answers, through the state store.

- ``control/<name>/stop.json`` (``StopRequest``): stop at a micro-batch boundary, or at once (``force``);
  the runner writes it (``runner/targets``), the job's stop responder reads it and answers with
  ``control/<name>/stopped.json`` (``StopAck``, the same id).
- ``control/<name>/start.json`` (``StartRequest``): the session target asks the team's session to start a
  job spec; the session answers with ``control/<name>/started.json`` (``StartAnswer``).
- ``session/stop.json`` (``SessionStop``): stop the session (every query with a savepoint); it answers with
  ``session/stopped.json`` (``SessionStopped``).
"""

from __future__ import annotations

import uuid

from pydantic import Field

from runner.core import layout
from runner.core.bucket import Bucket
from runner.core.protocol.document import Document, now, read


def request_id() -> str:
    return uuid.uuid4().hex[:12]


class StopRequest(Document):
    id: str = Field(default_factory=request_id)
    version: int | None = None  # the version to stop; None: whichever runs
    force: bool = False  # stop now, not at a batch boundary (session queries)
    requested_at: str = Field(default_factory=now)

    def meant_for(self, version: int) -> bool:
        """Whether a job of ``version`` should act on this request (a request for another version is stale)."""
        return self.version in (None, version)


class StopAck(Document):
    id: str | None
    version: int
    run_id: str = ""
    stopped_at: str = Field(default_factory=now)


class StartRequest(Document):
    id: str = Field(default_factory=request_id)
    spec: str  # the job spec's JSON, placeholders unresolved


class StartAnswer(Document):
    id: str | None
    job: str | None = None  # the started job's id on its target
    detail: str = ""
    error: str | None = None


class SessionStop(Document):
    id: str = Field(default_factory=request_id)
    run_id: str | None = None  # the session run to stop; None: whichever runs

    def meant_for(self, run_id: str) -> bool:
        return self.run_id in (None, run_id)


class SessionStopped(Document):
    id: str | None
    run_id: str
    at: str = Field(default_factory=now)


def write_stop_request(bucket: Bucket, name: str, request: StopRequest) -> None:
    bucket.write(layout.stop_request(name), request.encode())


def read_stop_request(bucket: Bucket, name: str) -> StopRequest | None:
    return read(bucket, layout.stop_request(name), StopRequest)


def write_stop_ack(bucket: Bucket, name: str, ack: StopAck) -> None:
    bucket.write(layout.stop_acknowledged(name), ack.encode())


def read_stop_ack(bucket: Bucket, name: str) -> StopAck | None:
    return read(bucket, layout.stop_acknowledged(name), StopAck)


def clear_stop(bucket: Bucket, name: str) -> None:
    """Forget an answered (or abandoned) stop request, so the next run of the job is not stopped by it."""
    bucket.delete(layout.stop_request(name))
    bucket.delete(layout.stop_acknowledged(name))


def write_start_request(bucket: Bucket, name: str, request: StartRequest) -> None:
    bucket.delete(layout.start_answer(name))
    bucket.write(layout.start_request(name), request.encode())


def take_start_request(bucket: Bucket, name: str) -> StartRequest | None:
    """The pending start request, removed so that it is answered once."""
    request = read(bucket, layout.start_request(name), StartRequest)
    if request is not None:
        bucket.delete(layout.start_request(name))
    return request


def write_start_answer(bucket: Bucket, name: str, answer: StartAnswer) -> None:
    bucket.write(layout.start_answer(name), answer.encode())


def take_start_answer(bucket: Bucket, name: str, request: StartRequest) -> StartAnswer | None:
    """The answer to ``request``, removed once read; None while there is none (or only an older one)."""
    answer = read(bucket, layout.start_answer(name), StartAnswer)
    if answer is None or answer.id != request.id:
        return None
    bucket.delete(layout.start_answer(name))
    return answer


def write_session_stop(bucket: Bucket, request: SessionStop) -> None:
    bucket.write(layout.SESSION_STOP, request.encode())


def read_session_stop(bucket: Bucket) -> SessionStop | None:
    return read(bucket, layout.SESSION_STOP, SessionStop)


def write_session_stopped(bucket: Bucket, answer: SessionStopped) -> None:
    bucket.write(layout.SESSION_STOPPED, answer.encode())


def read_session_stopped(bucket: Bucket) -> SessionStopped | None:
    return read(bucket, layout.SESSION_STOPPED, SessionStopped)


class DeployError(Document):
    """``errors/<name>.json``: why a pushed manifest was not deployed (by the deploy Lambda or the session),
    for the author to read from the bucket; removed once the manifest deploys."""

    name: str
    at: str = Field(default_factory=now)
    problems: list[str]  # one line each, as ``validate`` prints them
    file: str | None = None  # the manifest's file (session) ...
    key: str | None = None  # ... or its S3 key and object version (deploy Lambda)
    version_id: str | None = None
    result: str = "not deployed"


def write_deploy_error(bucket: Bucket, error: DeployError) -> None:
    bucket.write(layout.deploy_error(error.name), error.encode())
