"""The session's request handler: the requests that reach it through the state store.

- ``control/<name>/stop.json`` for a query it hosts: stop it (between micro-batches, or at once when
  forced), acknowledge through the same stop responder as an application job (``JobControl.answer_stop``),
  and hold it stopped until its manifest changes;
- ``control/<name>/start.json``: start the job spec (a deploy whose target is the session) and answer
  with ``started.json``;
- ``session/stop.json`` for this run: the session is to stop.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from runner.core import layout, logs
from runner.core.errors import UserError
from runner.core.identity import JobIdentity
from runner.core.protocol.control import (
    StartAnswer,
    StopRequest,
    read_session_stop,
    take_start_request,
    write_start_answer,
)
from runner.core.protocol.jobspec import JobSpec
from runner.session.host import QueryHost
from runner.session.reconciler import Reconciler
from runner.targets.base import Launch

log = logging.getLogger(__name__)


class RequestHandler:
    def __init__(
        self,
        host: QueryHost,
        reconciler: Reconciler,
        *,
        team: str,
        run_id: str,
        env: Mapping[str, str],
        stop_timeout: float,
    ):
        self.host = host
        self.reconciler = reconciler
        self.bucket = reconciler.bucket
        self.team = team
        self.run_id = run_id
        self.env = env
        self.stop_timeout = stop_timeout

    def answer(self) -> None:
        """Answer every pending stop or start request for a query of this session."""
        for key in self.bucket.keys(layout.CONTROL_PREFIX):
            name = key.removeprefix(layout.CONTROL_PREFIX).split("/", 1)[0]
            if key == layout.stop_request(name):
                self._answer_stop(name)
            elif key == layout.start_request(name):
                self._answer_start(name)

    def session_stop_requested(self) -> bool:
        request = read_session_stop(self.bucket)
        return request is not None and request.meant_for(self.run_id)

    def _answer_stop(self, name: str) -> None:
        hosted = self.host.hosted.get(name)
        if hosted is None or not hosted.active:
            return  # not ours: an application-mode job answers its own requests
        job = self.host.find(self.team, name)
        assert job is not None

        def stop(request: StopRequest) -> None:
            if request.force:
                self.host.stop(job, force=True)
            else:
                self.host.stop_gracefully(job, timeout=self.stop_timeout)

        if hosted.control.answer_stop(stop) is None:
            return
        self.reconciler.hold(name)
        log.info("stopped on request; held until its manifest changes", extra=logs.job(name))

    def _answer_start(self, name: str) -> None:
        request = take_start_request(self.bucket, name)
        if request is None:
            return
        try:
            spec = JobSpec.decode(request.spec)
            identity = JobIdentity(team=self.team, name=name, version=spec.manifest.version, run_id=spec.run_id)
            job = self.host.submit(Launch(identity, spec, [], self.env))
            answer = StartAnswer(id=request.id, job=job.job_id, detail=job.detail)
            self.reconciler.release(name)
        except UserError as error:
            answer = StartAnswer(id=request.id, error=error.problems[0].render())
        except Exception as error:  # noqa: BLE001 - answered, so the requester is not left waiting
            answer = StartAnswer(id=request.id, error=f"{type(error).__name__}: {error}")
        write_start_answer(self.bucket, name, answer)
