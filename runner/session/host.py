"""The session target: jobs run as streaming queries inside this (the session's) Spark application.

Each hosted job gets its own ``SparkSession.newSession()`` (its own SQL settings and
table views, one shared SparkContext) and its own FAIR scheduler pool, so one heavy
query does not hold up the others' batches. It writes its status and history exactly as
an application-mode job does (``jobs/control.py``), with ``mode: session``.

Isolation (the session supervises, the deployer never sees a crash):

- each query has the restart state machine of application jobs
  (``runner/core/restart_machine.py``), which says where it stands in its status: a query
  that fails at run time is restarted from its checkpoint after a backoff (1 s, 2 s, 4 s
  ... up to a minute: ``Protection.restart_strategy``), shown as ``failing`` with its error;
- after ``max_failures`` consecutive failures the machine gives up: the query is parked as
  ``failed`` and stays so until its manifest changes (the session loop decides that). A
  manifest that sets its own ``restart-strategy`` is restarted and parked by that instead,
  as it would be in application mode;
- a micro-batch whose tasks run longer than ``batch_timeout`` is cancelled and counts as a
  failure, so a ``code`` snippet or UDF that blocks cannot hold a query (and its
  executor slots) forever;
- building a query (which runs a ``code`` snippet on the driver) happens on a worker
  thread with ``build_timeout``: a snippet that never returns fails the start and
  parks the query instead of blocking the session; the stuck thread is counted in the
  session's health.
- Spark refusing the restored state is not retried: it is published as a refusal, and
  the loop plans the next version.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from enum import StrEnum

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from jobs import runtime
from jobs.build import build_job
from jobs.control import JobControl, failure_reason, refused_restore, stop_between_batches
from runner.core import layout, logs
from runner.core.bounded import TimedOut, within
from runner.core.errors import UserError
from runner.core.identity import JobIdentity
from runner.core.placeholders import resolved_properties
from runner.core.protocol.jobspec import JobSpec
from runner.core.protocol.session import QueryCounts
from runner.core.protocol.session_config import Protection
from runner.core.protocol.status import JobState
from runner.core.reasons import Reason
from runner.core.restart_machine import RestartMachine, Transition, Turn
from runner.core.restarts import RestartStrategy
from runner.targets.base import Launch, RunningJob

log = logging.getLogger(__name__)

# A batch's tasks are looked at once it has been in flight this long (most batches end sooner, at no cost).
BUSY_AFTER = 1.0


class EventKind(StrEnum):
    """What the host did on its own (the history entry's decision)."""

    FAILING = "failing"  # failed at run time: restarting after a backoff
    PARKED = "parked"  # failed too often: stopped until its manifest changes
    REFUSED = "refused"  # Spark refused its restored state
    RECOVERED = "recovered"  # a micro-batch completed after failures


@dataclass(frozen=True)
class Event:
    """Something the host did on its own, for the job's history: restarted, parked, refused."""

    name: str
    version: int
    kind: EventKind
    summary: str
    reasons: tuple[Reason, ...]
    at: float  # time.monotonic() when the host began to handle it: its history entry's seconds count from here


@dataclass
class Hosted:
    launch: Launch
    control: JobControl  # its restart state machine (control.machine) says where it stands
    session: SparkSession | None = None
    queries: list[StreamingQuery] = field(default_factory=list)
    batch_seen: tuple[int | None, float] | None = None  # (batch id, since) while a batch is in flight
    batch_busy: float = 0.0  # seconds that batch has had tasks running (waiting for cores does not count)
    batch_polled: float = 0.0
    # Held while the job is started, stopped or supervised: the control loop and the
    # supervisor thread never act on one job at once.
    lock: threading.RLock = field(default_factory=threading.RLock)
    # Each start is an attempt; a build that outlives its timeout belongs to an attempt no longer current, and
    # the queries it starts are stopped instead of attached (they would run unsupervised, or twice).
    attempt: int = 0
    attached: int = 0  # the attempt whose queries are the job's
    attach_lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def identity(self) -> JobIdentity:
        return self.launch.identity

    @property
    def spec(self) -> JobSpec:
        assert self.launch.spec is not None, "a hosted query has a job spec"
        return self.launch.spec

    @property
    def machine(self) -> RestartMachine:
        return self.control.machine

    @property
    def state(self) -> JobState | None:
        """None while it starts."""
        return self.control.machine.state

    @property
    def active(self) -> bool:
        return self.state in (JobState.RUNNING, JobState.FAILING)


class QueryHost:
    """The session's own target: start, find and stop queries in this application."""

    kind = layout.SESSION_TARGET

    def __init__(self, spark: SparkSession, session_run: str, protection: Protection):
        self.spark = spark
        self.session_run = session_run
        self.protection = protection
        self.hosted: dict[str, Hosted] = {}
        self.stuck_builds = 0
        self._lock = threading.RLock()

    # ---- the target interface -----------------------------------------------------------

    def master(self) -> str:
        return f"session {self.session_run}"

    def submit_options(self, identity: JobIdentity, restart: RestartStrategy | None = None) -> list[str]:
        return []

    def restart_machine(self, spec: JobSpec) -> RestartMachine:
        """A hosted query's restart state machine: by its manifest's ``restart-strategy`` if it sets one, as in
        application mode; else by the session's protection, whose failures count only while they follow each
        other (``Protection.restart_strategy``)."""
        own = spec.manifest.restart_strategy
        return RestartMachine(own or self.protection.restart_strategy, forget_on_recovery=own is None)

    def submit(self, launch: Launch) -> RunningJob:
        """Start the launch's job as queries in this application; UserError if it cannot be built."""
        name = launch.identity.name
        assert launch.spec is not None, "a session query has a job spec"
        with self._lock:
            old = self.hosted.get(name)
            if old is not None and old.active:
                self._stop_queries(old, force=True)
            control = JobControl(launch.spec, self.restart_machine(launch.spec), session_run=self.session_run)
            hosted = Hosted(launch, control)
            self.hosted[name] = hosted
        with hosted.lock:
            error = self._start_with_timeout(hosted)
            if error is not None:
                self._fail_to_start(hosted, error)
                raise error
            return self._running(hosted)

    def find(self, team: str, name: str) -> RunningJob | None:
        hosted = self.hosted.get(name)
        if hosted is None or not hosted.active or hosted.identity.team != team:
            return None
        return self._running(hosted)

    def stop(self, job: RunningJob, *, force: bool) -> None:
        hosted = self.hosted.get(job.identity.name)
        if hosted is not None:
            with hosted.lock:
                self._stop_queries(hosted, force=force)
                hosted.machine.stopped("stopped by the runner")

    def stop_gracefully(self, job: RunningJob, timeout: float) -> bool:
        """Stop the job's queries between micro-batches (cancelled after ``timeout``)."""
        hosted = self.hosted.get(job.identity.name)
        if hosted is None:
            return True
        with hosted.lock:
            graceful = self._stop_queries(hosted, force=False, timeout=timeout)
            hosted.machine.stopped("stop requested")
            return graceful

    # ---- supervision ---------------------------------------------------------------------

    def supervise(self) -> list[Event]:
        """Publish progress, notice failed queries, restart those whose backoff is over, cancel
        overlong batches. A job being started or stopped meanwhile is looked at next time."""
        events: list[Event] = []
        for hosted in list(self.hosted.values()):
            if not hosted.lock.acquire(blocking=False):
                continue
            try:
                events.extend(self._supervise(hosted, time.monotonic()))
            finally:
                hosted.lock.release()
        events.extend(self._cut_off_overlong_batch(time.monotonic()))
        return events

    def _cut_off_overlong_batch(self, now: float) -> list[Event]:
        """Cancel the micro-batch whose tasks have run longest, if that is past the batch timeout.

        Only time with tasks running counts: code that never returns holds its executor
        slots, and the other queries' batches meanwhile wait for cores without being stuck.
        One batch is cut off per round."""
        overlong = [
            h
            for h in list(self.hosted.values())
            if h.state == JobState.RUNNING and h.batch_seen is not None and h.batch_busy > self.protection.batch_timeout
        ]
        if not overlong:
            return []
        culprit = max(overlong, key=lambda h: h.batch_busy)
        if not culprit.lock.acquire(blocking=False):
            return []
        try:
            message = (
                f"a micro-batch's tasks ran longer than {self.protection.batch_timeout:.0f}s (batch timeout): cancelled"
            )
            return self._on_failure(culprit, message, now)
        finally:
            culprit.lock.release()

    def _supervise(self, hosted: Hosted, now: float) -> list[Event]:
        machine = hosted.machine
        if machine.state == JobState.RUNNING:
            failure = self._failure(hosted, now)
            if failure is not None:
                return self._on_failure(hosted, failure, now)
            if hosted.control.publish_progress(hosted.queries):
                recovered = machine.progressed()
                if recovered is not None:
                    return [self._recovered(hosted, recovered, now)]
        elif machine.due():
            restart = machine.restarting()
            log.info(f"restart {restart.standing.restarts} from its checkpoint", extra=logs.label(hosted.spec.label))
            error = self._start_with_timeout(hosted)
            if error is not None:
                return self._on_failure(hosted, str(error), now)
        return []

    def counts(self) -> QueryCounts:
        states = [h.state for h in list(self.hosted.values())]  # the loop thread may add jobs meanwhile
        return QueryCounts(
            running=states.count(JobState.RUNNING),
            failing=states.count(JobState.FAILING),
            parked=states.count(JobState.FAILED),
            stuck_builds=self.stuck_builds,
        )

    def _running_tasks(self, hosted: Hosted) -> int:
        """Tasks running now for the job's queries (a streaming query's jobs carry its run id as job group)."""
        tracker = self.spark.sparkContext.statusTracker()
        running = 0
        try:
            for query in hosted.queries:
                for job_id in tracker.getJobIdsForGroup(str(query.runId)):
                    job = tracker.getJobInfo(job_id)
                    if job is None or job.status != "RUNNING":
                        continue
                    for stage_id in job.stageIds:
                        stage = tracker.getStageInfo(stage_id)
                        running += stage.numActiveTasks if stage is not None else 0
        except Exception:  # noqa: BLE001 - cannot tell: treat the batch as running (the timeout applies)
            return 1
        return running

    def _failure(self, hosted: Hosted, now: float) -> str | None:
        """Why a running job failed (a query ended with an error), or None; notes when its batch began."""
        for query in hosted.queries:
            try:
                if not query.isActive:
                    error = query.exception()
                    failed = runtime.lookup_failure(query)  # stopped by its lookup tables, not by Spark
                    return f"{error}" if error is not None else failed or f"query {query.name} stopped"
                status = query.status
                last = query.lastProgress
            except Exception as error:  # noqa: BLE001 - a query Spark cannot report on has failed
                return f"{type(error).__name__}: {error}"
            if query is hosted.queries[0]:
                batch = last.get("batchId") if last else None
                if status.get("isTriggerActive"):  # timed here, cut off by _cut_off_overlong_batch
                    if hosted.batch_seen is None or hosted.batch_seen[0] != batch:
                        hosted.batch_seen, hosted.batch_busy = (batch, now), 0.0
                    elif now - hosted.batch_seen[1] > BUSY_AFTER and self._running_tasks(hosted) > 0:
                        hosted.batch_busy += now - hosted.batch_polled
                    hosted.batch_polled = now
                else:
                    hosted.batch_seen = None
        return None

    def _on_failure(self, hosted: Hosted, error: str, now: float) -> list[Event]:
        label, spec = hosted.spec.label, hosted.spec
        self._stop_queries(hosted, force=True)
        refusal = refused_restore(Exception(error))
        if refusal is not None:
            hosted.control.refused(refusal)
            log.info(f"Spark refused the restored state: {refusal}", extra=logs.label(label))
            return [
                Event(
                    spec.manifest.name,
                    spec.manifest.version,
                    EventKind.REFUSED,
                    "Spark refused the restored state",
                    (Reason.of("SPARK_REFUSED_STATE", refusal=refusal),),
                    now,
                )
            ]
        judged = hosted.machine.failed(failure_reason(error))
        reason = judged.standing.error or ""
        if judged.turn == Turn.GAVE_UP:
            log.info(f"failed {judged.counted} times: parked until its manifest changes", extra=logs.label(label))
            return [
                Event(
                    spec.manifest.name,
                    spec.manifest.version,
                    EventKind.PARKED,
                    f"parked after {judged.counted} failures; it stays stopped until its manifest changes",
                    (Reason.of("QUERY_FAILED", error=reason),),
                    now,
                )
            ]
        delay, allowed = judged.delay or 0.0, "unlimited" if judged.limit is None else str(judged.limit + 1)
        log.info(f"failed ({judged.counted}/{allowed}): {reason}; restarting in {delay:.0f}s", extra=logs.label(label))
        return [
            Event(
                spec.manifest.name,
                spec.manifest.version,
                EventKind.FAILING,
                f"failed at run time ({judged.counted} of {allowed} before it is parked): restart from its "
                f"checkpoint in {delay:.0f}s",
                (Reason.of("QUERY_FAILED", error=reason),),
                now,
            )
        ]

    def _recovered(self, hosted: Hosted, recovered: Transition, now: float) -> Event:
        spec = hosted.spec
        return Event(
            spec.manifest.name,
            spec.manifest.version,
            EventKind.RECOVERED,
            f"running again after {recovered.recovered_from} failure(s): a micro-batch completed",
            (),
            now,
        )

    # ---- starting and stopping -------------------------------------------------------------

    def _start_with_timeout(self, hosted: Hosted) -> UserError | None:
        """Build and start the job's queries on a worker thread; its error, or a timeout, or None."""
        name = hosted.identity.name
        with hosted.attach_lock:
            hosted.attempt += 1
            mine = hosted.attempt
        try:
            within(self.protection.build_timeout, lambda: self._start(hosted, mine), f"sql-runner-build-{name}")
        except TimedOut:
            with hosted.attach_lock:
                if hosted.attached == mine:  # it was done as the time ran out
                    return None
                hosted.attempt += 1  # whatever this build starts later is not the job's
            return self.build_timed_out(name)
        except UserError as error:
            return error
        except Exception as error:  # noqa: BLE001 - the start failed: the caller records why
            return UserError.of("SESSION_QUERY_START_FAILED", name=name, reason=f"{type(error).__name__}: {error}")
        return None

    def build_timed_out(self, name: str) -> UserError:
        """Count a build that never returned (its thread stays stuck) and say so."""
        self.stuck_builds += 1
        return UserError.of("SESSION_QUERY_BUILD_TIMEOUT", name=name, seconds=f"{self.protection.build_timeout:.0f}")

    def _start(self, hosted: Hosted, attempt: int) -> None:
        spec = hosted.spec
        session = self.spark.newSession()
        for key, value in resolved_properties(spec.manifest.spark_properties, hosted.launch.env).items():
            session.conf.set(key, value)
        # Pools are thread-local properties inherited by the query's stream thread.
        self.spark.sparkContext.setLocalProperty("spark.scheduler.pool", spec.manifest.name)
        try:
            built = build_job(session, spec.manifest, spec.catalog, hosted.launch.env, live=True, starts=spec.starts)
            queries = runtime.start(session, built, spec, hosted.launch.env)
        finally:
            self.spark.sparkContext.setLocalProperty("spark.scheduler.pool", None)
        with hosted.attach_lock:
            late = hosted.attempt != attempt
            if not late:
                hosted.session, hosted.queries, hosted.batch_seen = session, queries, None
                hosted.attached = attempt
                hosted.machine.started()
        if late:
            runtime.stop_all(queries)
            log.info(
                "a build that outlived its timeout finished: its queries were stopped, not run",
                extra=logs.label(spec.label),
            )

    def _fail_to_start(self, hosted: Hosted, error: UserError) -> None:
        """A job that cannot be built is parked at once: building it again fails the same way."""
        self._stop_queries(hosted, force=True)
        hosted.machine.give_up(error.problems[0].render())

    def _stop_queries(self, hosted: Hosted, *, force: bool, timeout: float = 120.0) -> bool:
        """Stop the job's queries (between batches unless ``force``); True if none had to be cancelled."""
        queries = hosted.queries
        graceful = True
        if not force:
            graceful = stop_between_batches(queries, timeout)
        else:
            runtime.stop_all(queries)
            graceful = False
        hosted.control.publish_progress(queries)  # a stopped query still shows where it got to
        hosted.queries = []
        hosted.control.close()
        return graceful

    def _running(self, hosted: Hosted) -> RunningJob:
        identity = hosted.identity
        return RunningJob(
            identity,
            self.kind,
            f"{identity.name}@session-{self.session_run}",
            f"{hosted.state or 'starting'} in session {self.session_run}",
        )
