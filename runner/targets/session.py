"""The team's session application, seen from outside it (the CLI, a deploy on EMR).

The session runs as one application on the application target (``jobs/_session.json``
locally, YARN tags on EMR) and publishes its health to ``session/health.json``. Each
query it hosts publishes ``status/<name>.json`` with ``mode: session`` and the session's
run id, so a query counts as running only while *that* session run is alive.

Talking to the session goes through the state store, like talking to any job:

- start a job spec: ``control/<name>/start.json``; the session answers ``started.json``
  (the spec carries placeholders, never their values: the session resolves them from
  its own environment);
- stop a query between micro-batches: the usual ``control/<name>/stop.json`` protocol.

Live previews go to the session's control endpoint (``runner/session/endpoint.py``) with
the token the session published in the state store.
"""

from __future__ import annotations

import contextlib
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from http import HTTPStatus
from typing import Any

from runner.core import layout
from runner.core.bucket import Bucket
from runner.core.errors import UserError
from runner.core.identity import JobIdentity
from runner.core.protocol.control import (
    StartRequest,
    StopRequest,
    take_start_answer,
    write_start_request,
    write_stop_request,
)
from runner.core.protocol.document import Document
from runner.core.protocol.launch import JudgeRequest, Verdict
from runner.core.protocol.preview import PreviewAnswer, PreviewChunk, PreviewRefusal, PreviewRequest
from runner.core.protocol.session import SessionHealth, SessionState, read_control, read_health
from runner.core.protocol.status import JobState, read_status
from runner.core.restarts import RestartStrategy
from runner.targets.base import Attempt, Launch, RunningJob, Target
from runner.targets.stop_request import request_stop

ANSWER_TIMEOUT = 120.0
POLL_SECONDS = 0.2
HEALTH_SECONDS = 1.0
JUDGE_TRIES = 3  # a busy session is asked this many times, a second more apart each time
CONNECT_SECONDS = 5.0  # to reach the session's control endpoint at all
JUDGE_SECONDS = 120.0  # a judgement on the session's Spark: an analysis of a query and the deployed one


class _Busy(Exception):
    """The session's preview and judging slots are all taken (429)."""


def _preview_refused(_status: int, reason: str, run: str) -> Exception:
    return UserError.of("SESSION_PREVIEW_FAILED", run=run, reason=reason)


def _judge_refused(status: int, reason: str, run: str) -> Exception:
    if status == HTTPStatus.TOO_MANY_REQUESTS:
        return _Busy(reason)
    return SessionUnavailable(f"session {run} did not judge (HTTP {status}): {reason}")


class SessionUnavailable(Exception):
    """No running session can answer (the reason says why); the caller may fall back to local Spark."""


class SessionTarget:
    kind = layout.SESSION_TARGET
    judges = False  # the session judges on its own Spark

    def __init__(self, records: Bucket, application: Target, team: str):
        self.records = records  # the manifests bucket
        self.application = application  # where the session application itself runs
        self.team = team
        self._alive: tuple[float, RunningJob | None] | None = None
        self._health: tuple[float, SessionHealth | None] | None = None

    # ---- the session application ----------------------------------------------------------

    def application_job(self) -> RunningJob | None:
        """The running session application, if any (checked at most once a second)."""
        now = time.monotonic()
        if self._alive is None or now - self._alive[0] > HEALTH_SECONDS:
            self._alive = (now, self.application.find(self.team, layout.SESSION_JOB))
        return self._alive[1]

    def attempt(self) -> Attempt | None:
        """Which attempt of the session's application runs (on YARN), and why the one before it ended."""
        job = self.application_job()
        return job.attempt if job is not None else None

    def recent_health(self) -> SessionHealth | None:
        """``health()``, read at most once a second: finding many jobs (a plan of hundreds of manifests) asks
        for it once per job, and whether a session runs does not change between two of them."""
        now = time.monotonic()
        if self._health is None or now - self._health[0] > HEALTH_SECONDS:
            self._health = (now, self.health())
        return self._health[1]

    def health(self) -> SessionHealth | None:
        """What the running session last published about itself; None when no session runs."""
        job = self.application_job()
        if job is None:
            return None
        health = read_health(self.records)
        if health is None or health.run_id != job.identity.run_id:
            return SessionHealth(state=SessionState.STARTING, run_id=job.identity.run_id, team=self.team)
        return health

    def preview(self, request: PreviewRequest) -> PreviewAnswer:
        """A live preview answered by the running session's control endpoint.

        SessionUnavailable when no session runs or its endpoint cannot be reached; UserError when
        the session refuses the query (the problems it found)."""
        with self._ask(
            "/preview", request.model_copy(update={"stream": False}), request.timeout, refused=_preview_refused
        ) as response:
            return PreviewAnswer.decode(response.read())

    def preview_stream(self, request: PreviewRequest) -> Iterator[PreviewChunk]:
        """The same, as the session sends it: the columns, then rows as each micro-batch brings them, then
        the end (the console shows rows as they arrive)."""
        with self._ask(
            "/preview", request.model_copy(update={"stream": True}), request.timeout, refused=_preview_refused
        ) as response:
            for line in response:
                if line.strip():
                    yield PreviewChunk.decode(line)

    def judge(self, request: JudgeRequest) -> Verdict:
        """A manifest judged by the running session on its warm Spark (``POST /judge``): its verdict. Asked again
        after a second while the session is busy (its preview and judging slots taken). SessionUnavailable when
        no session runs, its endpoint cannot be reached, refuses (a session of an earlier release has no
        ``/judge``) or answers with something else than a verdict: the caller judges elsewhere."""
        for attempt in range(1, JUDGE_TRIES + 1):
            try:
                with self._ask("/judge", request, JUDGE_SECONDS, refused=_judge_refused) as response:
                    return Verdict.decode(response.read())
            except _Busy:
                if attempt == JUDGE_TRIES:
                    raise SessionUnavailable(f"the session stayed busy for {JUDGE_TRIES} tries") from None
                time.sleep(attempt)
            except (ValueError, OSError) as error:  # not a verdict (a proxy's page), or the answer cut short
                raise SessionUnavailable(f"the session's answer was not a verdict: {error}") from None
        raise AssertionError("unreachable")

    @contextlib.contextmanager
    def _ask(
        self, path: str, request: Document, timeout: float, *, refused: Callable[[int, str, str], Exception]
    ) -> Iterator[Any]:
        """POST ``request`` to the running session's control endpoint; ``refused(status, reason, run)`` is what an
        error answer raises."""
        health = self.health()
        if health is None or health.state != SessionState.RUNNING:
            raise SessionUnavailable(f"no session of team {self.team} is running")
        control = read_control(self.records)
        if control is None or control.run_id != health.run_id:
            raise SessionUnavailable(f"session {health.run_id} has published no control endpoint")
        address = urllib.parse.urlsplit(control.url)
        unreachable = f"the session's control endpoint {control.url} cannot be reached"
        try:  # a node that is gone (an attempt's, before the next one publishes) is not waited on for minutes
            socket.create_connection((address.hostname, address.port or 80), CONNECT_SECONDS).close()
        except OSError as error:
            raise SessionUnavailable(f"{unreachable}: {error}") from None
        sent = urllib.request.Request(
            f"{control.url}{path}",
            data=request.encode(),
            headers={"Authorization": f"Bearer {control.token}", "Content-Type": "application/json"},
            method="POST",
        )
        try:
            response = urllib.request.urlopen(sent, timeout=timeout + 90.0)  # noqa: S310 - its URL
        except urllib.error.HTTPError as error:
            body = error.read()
            try:
                refusal = PreviewRefusal.decode(body)
                reason = "\n".join(refusal.problems or [refusal.error])
            except ValueError:  # not the endpoint's answer (a proxy's page, say)
                reason = f"HTTP {error.code}"
            raise refused(error.code, reason, control.run_id) from None
        except (urllib.error.URLError, OSError) as error:
            raise SessionUnavailable(f"{unreachable}: {error}") from None
        with response:
            yield response

    # ---- the target interface -------------------------------------------------------------

    def master(self) -> str:
        return "session"

    def submit_options(self, identity: JobIdentity, restart: RestartStrategy | None = None) -> list[str]:
        return []

    def submit(self, launch: Launch) -> RunningJob:
        """Hand the job spec to the session and wait for its answer."""
        name = launch.identity.name
        assert launch.spec is not None, "a session query has a job spec"
        health = self.health()
        if health is None:
            raise UserError.of("SESSION_NOT_RUNNING", name=name, team=self.team)
        request = StartRequest(spec=launch.spec.encode(line=True).decode())
        write_start_request(self.records, name, request)
        deadline = time.monotonic() + ANSWER_TIMEOUT
        while time.monotonic() < deadline:
            answer = take_start_answer(self.records, name, request)
            if answer is not None:
                if answer.error or answer.job is None:
                    raise UserError.of("SESSION_START_FAILED", name=name, reason=answer.error or "no job started")
                return RunningJob(launch.identity, self.kind, answer.job, answer.detail)
            if self.application_job() is None:
                break
            time.sleep(POLL_SECONDS)
        self.records.delete(layout.start_request(name))
        raise UserError.of("SESSION_NO_ANSWER", name=name, seconds=f"{ANSWER_TIMEOUT:.0f}")

    def find(self, team: str, name: str) -> RunningJob | None:
        health = self.recent_health() if team == self.team else None
        if health is None:
            return None
        status = read_status(self.records, name)
        if status is None or status.mode != "session" or status.session_run != health.run_id:
            return None
        if status.state not in (JobState.RUNNING, JobState.FAILING):
            return None
        identity = JobIdentity(team=team, name=name, version=status.version, run_id=status.run_id)
        return RunningJob(
            identity, self.kind, f"{name}@session-{health.run_id}", f"{status.state} in the team's session"
        )

    def stop(self, job: RunningJob, *, force: bool) -> None:
        """Ask the session to stop the query now (``force``) or between micro-batches."""
        write_stop_request(self.records, job.identity.name, StopRequest(version=job.identity.version, force=force))

    def stop_gracefully(self, job: RunningJob, timeout: float) -> bool:
        return request_stop(self.records, self, job, timeout)
