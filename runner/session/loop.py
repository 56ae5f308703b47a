"""The session's control loop: the reconciler, the request handler and the health publisher, in turn.

Every ``poll`` seconds the loop thread:

1. reconciles the hosted queries with the desired manifests (``reconciler.py``);
2. answers requests through the store: start a job spec, stop a query, stop the session
   (``requests.py``);
3. takes what the supervisor reported (a parked query is held, a refused restore planned again).

A supervisor thread meanwhile supervises the queries (``QueryHost.supervise``: progress,
restarts with backoff, parking), records what the host did in each job's history and
publishes the session's health (``health.py``), so a long reconcile (a session starting
fifty queries) never holds them up. The loop thread is the only one that changes the
reconciler's state; the supervisor hands it events through a queue.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from runner.authoring.project import Project
from runner.core import layout
from runner.core.bounded import TimedOut, within
from runner.core.errors import UserError
from runner.core.manifest import Manifest
from runner.core.protocol.control import SessionStopped, read_session_stop, write_session_stopped
from runner.core.protocol.history import Outcome, Result
from runner.core.protocol.session import SessionState
from runner.core.reasons import Reason
from runner.deploy.deployer import Deployer
from runner.deploy.executor import taken_summary
from runner.deploy.inputs import Prepared
from runner.session.health import HealthPublisher
from runner.session.host import Event, EventKind, QueryHost
from runner.session.reconciler import Reconciler
from runner.session.requests import RequestHandler
from runner.state import records
from runner.state.desired import Desired

log = logging.getLogger(__name__)


class Session:
    def __init__(
        self,
        deployer: Deployer,
        host: QueryHost,
        desired: Desired,
        *,
        team: str,
        run_id: str,
        poll: float,
        env: Mapping[str, str],
    ):
        self.deployer = deployer
        self.host = host
        self.bucket = deployer.store.manifests
        self.team = team
        self.run_id = run_id
        self.poll = poll
        self.reconciler = Reconciler(deployer, desired, target_kind=host.kind, prepare=self._prepare, check=self._check)
        self.requests = RequestHandler(
            host,
            self.reconciler,
            team=team,
            run_id=run_id,
            env=env,
            stop_timeout=deployer.settings.stop_timeout,
        )
        self.health = HealthPublisher(self.bucket, host, self.reconciler, team=team, run_id=run_id)
        self.events: queue.Queue[Event] = queue.Queue()  # from the supervisor thread to the loop

    # ---- the loop ------------------------------------------------------------------------

    def run(self, should_stop: Callable[[], bool]) -> None:
        """Reconcile until asked to stop (the session stop request, or ``should_stop``)."""
        self.health.publish(SessionState.RUNNING, force=True)
        done = threading.Event()
        supervisor = threading.Thread(target=self._supervise, args=(done,), name="sql-runner-supervisor", daemon=True)
        supervisor.start()
        while not should_stop():
            started = time.monotonic()
            try:
                if self.requests.session_stop_requested():
                    break
                self.round()
            except Exception as error:  # noqa: BLE001 - one bad round must not end the session
                log.warning(f"session round failed: {type(error).__name__}: {error}")
            time.sleep(max(0.0, self.poll - (time.monotonic() - started)))
        done.set()
        supervisor.join()
        self.shutdown()

    def round(self) -> None:
        """One pass: desired changes, requests, and what the supervisor reported."""
        self.reconciler.round()
        self.requests.answer()
        while not self.events.empty():
            self._on_event(self.events.get())

    def _supervise(self, done: threading.Event) -> None:
        """The supervisor thread: the host's supervision and the session's health, every poll."""
        while not done.wait(self.poll):
            try:
                for event in self.host.supervise():
                    self._record_event(event)
                    self.events.put(event)
                self.health.publish(SessionState.RUNNING)
            except Exception as error:  # noqa: BLE001 - supervision carries on
                log.warning(f"supervision failed: {type(error).__name__}: {error}")

    # ---- what the reconciler asks of the session -------------------------------------------

    def _prepare(self, project: Project, path: Path) -> Prepared:
        """Check the manifest (analysing its query runs its code snippet) within the build timeout, so a
        snippet that never returns is reported instead of holding up every other change."""
        try:
            return within(
                self.host.protection.build_timeout,
                lambda: self.deployer.prepare(path, project),
                f"sql-runner-prepare-{path.stem}",
            )
        except TimedOut:
            raise self.host.build_timed_out(path.stem) from None

    def _check(self, manifest: Manifest, file: str) -> None:
        """A session query can set only SQL properties: the rest belong to the whole application."""
        for key in manifest.spark_properties:
            if not key.startswith("spark.sql.") or not self.host.spark.conf.isModifiable(key):
                raise UserError.of("SESSION_PROPERTY_NOT_PER_QUERY", file=file, field=f"sparkProperties.{key}", key=key)

    # ---- what the host did on its own ------------------------------------------------------

    def _record_event(self, event: Event) -> None:
        """What the host did on its own, in the job's history."""
        self.deployer.record(
            event.name,
            decision=event.kind,
            summary=event.summary,
            reasons=list(event.reasons),
            version=event.version,
            inputs={"session-run": self.run_id},
            outcome=Outcome(result=Result.OK if event.kind == EventKind.RECOVERED else Result.FAILED),
            started=event.at,
            target=self.host.kind,
        )

    def _on_event(self, event: Event) -> None:
        """A parked job is held until its manifest changes; a refused restore is planned again at once."""
        if event.kind == EventKind.PARKED:
            self.reconciler.hold(event.name)
        if event.kind == EventKind.REFUSED:
            self.reconciler.plan_again(event.name)

    # ---- stopping the session --------------------------------------------------------------

    def shutdown(self) -> None:
        """Stop every query between micro-batches with a savepoint, then say the session stopped."""
        self.health.publish(SessionState.STOPPING, force=True)
        for name, hosted in sorted(self.host.hosted.items()):
            if not hosted.active:
                continue
            record, _ = records.read_deployed(self.bucket, name)
            job = self.host.find(self.team, name)
            if record is None or job is None:
                continue
            started = time.monotonic()
            try:
                taken = self.deployer.executor.stop_with_savepoint(record, job, reason="session stopped")
                outcome = Outcome(savepoint=taken_summary(taken))
            except Exception as error:  # noqa: BLE001 - keep stopping the others
                outcome = Outcome(result=Result.FAILED, error=f"{type(error).__name__}: {error}")
            self.deployer.record(
                name,
                decision="stop",
                summary="session stopped: stop with savepoint",
                reasons=[Reason.of("SESSION_STOPPED")],
                version=record.version,
                inputs={"session-run": self.run_id},
                outcome=outcome,
                started=started,
                target=self.host.kind,
            )
        request = read_session_stop(self.bucket)
        self.health.publish(SessionState.STOPPED, force=True)
        write_session_stopped(self.bucket, SessionStopped(id=request.id if request else None, run_id=self.run_id))
        self.bucket.delete(layout.SESSION_STOP)
