"""Deploying: gather the inputs, decide, and carry the decision out, one manifest at a time.

For each manifest, under its lease (``runner/state/lease.py``):

1. read the deployed record, find the running job, list savepoints and checkpoints, and
   let Spark compare the deployed and desired queries (``runner/deploy/inputs.py``);
2. ``plan_one`` decides (pure, ``runner/deploy/plan.py``);
3. ``steps`` lists what the decision takes, in a safe order (pure, ``runner/deploy/steps.py``);
4. the executor carries the steps out against the target and the store
   (``runner/deploy/executor.py``);
5. the decision, its reasons, outcome and timings go to ``history/<name>/``.

``sql-runner deploy`` and the session application (``runner/session/``) both deploy
through this class; they differ only in the target a job starts on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from runner.authoring.project import Project
from runner.core import layout, logs
from runner.core.errors import UserError
from runner.core.protocol.deployed import DeploymentRecord
from runner.core.protocol.history import HistoryEntry, Outcome, Result, write_history
from runner.core.protocol.planned import PlannedAction
from runner.core.reasons import Reason
from runner.core.stateref import StateRef
from runner.deploy.executor import Executor, taken_summary
from runner.deploy.inputs import Decision, Inputs, Prepared, Preparer, observe, unreadable_state
from runner.deploy.launches import Launcher
from runner.deploy.plan import Action, Observed, plan, plan_one
from runner.deploy.settings import Settings
from runner.deploy.steps import steps
from runner.state import records
from runner.state.lease import lease
from runner.targets.base import RunningJob
from runner.targets.session import SessionTarget

log = logging.getLogger(__name__)

__all__ = ["Decision", "Deployer", "Prepared", "Settings"]

OBSERVERS = 16  # manifests observed at once when deciding many


class Deployer:
    def __init__(
        self,
        project: Project | None,
        settings: Settings,
        clock: Callable[[], datetime] | None = None,
        spark: Callable[[], Any] | None = None,
        lease_holder: str | None = None,
        dead_holder: Callable[[str], bool] | None = None,
        lease_wait: float = 0.0,
        requested_by: str | None = None,
        judge_in_jobs: bool = False,
        command: str = "deploy",
    ):
        self.command = command  # what the deployer works for, in what a job sent away is told
        self.requested_by = requested_by  # who asked, recorded with every decision (a console token's name)
        self.project = project  # the desired manifests; not needed to stop or savepoint a deployed job
        self.settings = settings
        self.store = settings.store
        self.targets = settings.targets
        self.clock = clock or (lambda: datetime.now(UTC))
        self._spark_factory = spark
        self._spark = None
        # a new or changed manifest is judged by its own job's driver, launched at once, where its target allows
        self.launcher = Launcher(settings) if judge_in_jobs else None
        self.executor = Executor(settings, self.clock, self.launcher)
        self.lease_holder = lease_holder  # who this deployer's leases name (default: host and process)
        self.dead_holder = dead_holder  # which other holders are known to be gone (their leases are taken over)
        self.lease_wait = lease_wait  # seconds to wait for a lease another runner holds (0: stand down at once)
        self._read_ahead: dict[str, Any] = {}  # deployed records prepare_all read, for the plan that follows

    def __enter__(self) -> Deployer:
        """Deciding may start what must not outlive the command: jobs launched to judge their manifests
        (only inside this block) and a local Spark to analyse queries. Both end with the block."""
        if self.launcher is not None:
            self.launcher.open = True
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.send_all_away(f"the {self.command} ended before its decision started it")
        finally:
            if self.launcher is not None:
                self.launcher.open = False
            self.release_spark()

    def _lease(self, name: str, purpose: str):
        return lease(
            self.store.manifests,
            name,
            purpose=purpose,
            now=self.clock(),
            holder=self.lease_holder,
            dead=self.dead_holder,
            wait=self.lease_wait,
        )

    # ---- inputs -------------------------------------------------------------------------

    def spark(self):  # the SparkSession queries are analysed on, created on first use
        if self._spark is None:
            if self._spark_factory is not None:
                self._spark = self._spark_factory()
            else:
                from runner.analysis.session import local_session

                log.info("starting local Spark to analyse the queries (no data is read)")
                self._spark = local_session("sql-runner-plan")
        return self._spark

    def release_spark(self) -> None:
        """End the local Spark this deployer started to analyse queries (a session's own is never ended): at
        the end of the ``with`` block, or sooner once the decisions are made."""
        if self._spark is not None and self._spark_factory is None:
            from runner.analysis.session import close_local_session

            close_local_session(self._spark)
            self._spark = None

    def preparer(self, project: Project | None = None) -> Preparer:
        """Prepares manifests of ``project`` (default: the deployer's own)."""
        project = project or self.project
        assert project is not None, "preparing manifests needs the project"
        return Preparer(
            project, self.store, self.settings.values, self.spark, self.clock, self.launcher, self._judging_session()
        )

    def _judging_session(self) -> SessionTarget | None:
        """The team's session, asked to judge new and changed manifests on its warm Spark rather than a Spark
        started here, when the jobs run on YARN (their drivers, like the session's, resolve placeholders on the
        cluster) and this deployer was given no Spark of its own (the session's own deployer is)."""
        session = self.settings.targets.session
        if self._spark_factory is not None or self.settings.targets.application.kind != "yarn":
            return None
        return session if isinstance(session, SessionTarget) else None

    def prepare(self, path: Path, project: Project | None = None) -> Prepared:
        """Load and analyse one desired manifest of ``project`` (default: the deployer's own); UserError if it
        is not deployable."""
        return self.preparer(project).prepare(path)

    def prepare_all(self, paths: list[Path] | None) -> dict[str, Prepared]:
        """The desired manifests (``paths``, or every manifest of the project), all checked before any is used."""
        preparer = self.preparer()
        prepared = preparer.prepare_all(paths)
        self._read_ahead = dict(preparer.deployed)  # decide_all uses each once; carrying out reads afresh
        return prepared

    def inputs(self, name: str) -> Inputs:
        return observe(self.store, self.targets, self.settings.team, name, self._read_ahead.pop(name, None))

    def decide(self, name: str, prepared: Prepared | None) -> Decision:
        """The decision for one manifest (``prepared`` None: its manifest is gone)."""
        inputs = self.inputs(name)
        action = plan_one(name, prepared.desired if prepared else None, inputs.deployed, inputs.observed)
        return inputs.decision(action, prepared)

    def decide_all(
        self,
        prepared: dict[str, Prepared],
        *,
        whole_project: bool,
        mode: str | None = None,
        other_mode: Collection[str] = (),
    ) -> list[Decision]:
        """Decisions for the prepared manifests, in name order; ``whole_project``: every deployed job too
        (one whose manifest is gone is removed). ``mode``: only that mode's jobs; the manifests named in
        ``other_mode`` belong to the other mode's deploy, and a deployed job without a manifest is
        removed only if it runs in ``mode``."""
        names = set(prepared) | (set(records.deployed_names(self.store.manifests)) if whole_project else set())
        wanted = sorted(names - set(other_mode))
        # reading each job's record, target and state is waiting on the store (S3): many at once
        with ThreadPoolExecutor(OBSERVERS) as pool:
            inputs = dict(zip(wanted, pool.map(self.inputs, wanted), strict=True))
        self._read_ahead = {}  # from now on (carrying out, under each lease) records are read afresh
        if mode is not None:
            inputs = {
                name: item
                for name, item in inputs.items()
                if name in prepared or item.record is None or _mode_of(item.record.target) == mode
            }
        desired = {name: item.desired for name, item in prepared.items()}
        deployed = {name: item.deployed for name, item in inputs.items() if item.deployed is not None}
        actions = plan(desired, deployed, {name: item.observed for name, item in inputs.items()})
        return [inputs[action.name].decision(action, prepared.get(action.name)) for action in actions]

    # ---- acting -------------------------------------------------------------------------

    def carry_out(
        self,
        decision: Decision,
        *,
        purpose: str = "deploy",
        redecide: bool = True,
        superseded: Callable[[], str | None] | None = None,
    ) -> HistoryEntry:
        """Act on one decision under the manifest's lease; returns the history entry written.

        ``superseded``: asked once the lease is held; a reason means what was about to be deployed
        is no longer wanted (a newer version of the manifest was pushed), and nothing is done."""
        try:
            return self._carry_out(decision, purpose=purpose, redecide=redecide, superseded=superseded)
        finally:
            launched = decision.prepared.launched if decision.prepared is not None else None
            if launched is not None and self.launcher is not None:
                self.launcher.send_away(launched, "the decision did not start it")

    def send_all_away(self, reason: str) -> None:
        """Every job launched to judge its manifest and not started by a decision exits, having done nothing."""
        if self.launcher is not None:
            self.launcher.send_all_away(reason)

    def _carry_out(
        self,
        decision: Decision,
        *,
        purpose: str,
        redecide: bool,
        superseded: Callable[[], str | None] | None,
    ) -> HistoryEntry:
        started = time.monotonic()
        name = decision.name
        with self._lease(name, purpose):
            reason = superseded() if superseded is not None else None
            if reason is not None:
                log.info(f"standing down: {reason}", extra=logs.job(name))
                return self.record(
                    name,
                    decision="superseded",
                    summary="nothing: a newer version of the manifest was pushed",
                    reasons=[Reason.of("SUPERSEDED", detail=reason)],
                    version=decision.action.version,
                    inputs={"desired": decision.prepared.file if decision.prepared else None},
                    outcome=Outcome(),
                    started=started,
                    target=self._target_kind(decision),
                )
            if redecide:  # what was read before the lease may have changed
                decision = self.decide(name, decision.prepared)
            else:
                _, blob = records.read_deployed(self.store.manifests, name)
                decision.etag = blob.etag if blob else None
            outcome = Outcome()
            try:
                self.executor.carry_out(decision, steps(decision.action), outcome)
            except Exception as error:
                outcome.result = Result.FAILED
                outcome.error = (
                    error.problems[0].render() if isinstance(error, UserError) else f"{type(error).__name__}: {error}"
                )
                self._history(decision, outcome, started)
                raise
            return self._history(decision, outcome, started)

    def _history(self, decision: Decision, outcome: Outcome, started: float) -> HistoryEntry:
        inputs = {
            "desired": decision.prepared.file if decision.prepared else None,
            "deployed-version": decision.record.version if decision.record else None,
            "running": decision.running.job_id if decision.running else None,
            "running-version": decision.observed.running_version,
            "savepoints": [r.key for r in decision.observed.savepoints],
            "checkpoints": [r.key for r in decision.observed.checkpoints],
        }
        if decision.prepared is not None and decision.prepared.launched is not None:
            inputs["judged-by"] = decision.prepared.launched.describe()
        elif decision.prepared is not None and decision.prepared.judged_by is not None:
            inputs["judged-by"] = decision.prepared.judged_by
        return self._write(
            decision.action.planned(),
            inputs=inputs,
            outcome=outcome,
            started=started,
            target=self._target_kind(decision),
        )

    def _target_kind(self, decision: Decision) -> str:
        """Where the decision's job runs (or ran): the desired mode's target, else where it was found."""
        if decision.prepared is not None:
            try:
                return self.targets.pick(decision.prepared.manifest).kind
            except UserError:
                return self.targets.application.kind
        if decision.running is not None:
            return decision.running.target
        return decision.record.target if decision.record else self.targets.application.kind

    def record(
        self,
        name: str,
        *,
        decision: str,
        summary: str,
        reasons: list[Reason],
        version: int | None,
        inputs: dict[str, Any],
        outcome: Outcome,
        started: float,
        target: str,
    ) -> HistoryEntry:
        """Write ``history/<name>/<timestamp>.json`` of something done or that happened outside a plan (a stop,
        an event of the session's) and return it (``started``: time.monotonic() when it was taken up, so the
        entry says how long carrying it out took)."""
        what = PlannedAction(name=name, decision=decision, summary=summary, version=version, reasons=reasons)
        return self._write(what, inputs=inputs, outcome=outcome, started=started, target=target)

    def _write(
        self, what: PlannedAction, *, inputs: dict[str, Any], outcome: Outcome, started: float, target: str
    ) -> HistoryEntry:
        """Record ``what`` was decided or happened, with what it was decided on and its outcome."""
        now = self.clock()
        entry = HistoryEntry(
            **dict(what),
            at=now.isoformat(),
            team=self.settings.team,
            target=target,
            inputs=inputs,
            outcome=outcome,
            seconds=round(time.monotonic() - started, 3),
            requested_by=self.requested_by,
        )
        write_history(self.store.manifests, entry, now)
        return entry

    def _running(self, name: str) -> tuple[DeploymentRecord, RunningJob]:
        record, _ = records.read_deployed(self.store.manifests, name)
        if record is None:
            raise UserError.of("NOT_DEPLOYED", name=name)
        job = self.targets.find(self.settings.team, name)
        if job is None:
            raise UserError.of("NOT_RUNNING", name=name)
        return record, job

    def stop(self, name: str, *, savepoint: bool) -> HistoryEntry:
        """``sql-runner stop``: stop at a batch boundary (with a savepoint unless told not to); recorded."""
        started = time.monotonic()
        with self._lease(name, "stop"):
            record, job = self._running(name)
            outcome = Outcome()
            if savepoint:
                taken = self.executor.stop_with_savepoint(record, job, reason="sql-runner stop")
                outcome.savepoint = taken_summary(taken)
            else:
                outcome.graceful = self.executor.stop_job(record, job)
            return self.record(
                name,
                decision="stop",
                summary="stop" + (" with savepoint" if savepoint else ""),
                reasons=[Reason.of("STOP_REQUESTED")],
                version=record.version,
                inputs={"running": job.job_id, "deployed-version": record.version},
                outcome=outcome,
                started=started,
                target=job.target,
            )

    def savepoint(self, name: str) -> HistoryEntry:
        """``sql-runner savepoint``: stop at a batch boundary, snapshot, restart from the snapshot; refused, with
        nothing done, for a job whose state this release would not restore (the restart would refuse it)."""
        record, job = self._running(name)
        unreadable = unreadable_state(self.store, record, job, Observed(running=True))
        if unreadable is not None:
            raise UserError.of("SAVEPOINT_STATE_UNREADABLE", name=name, version=record.version, why=unreadable)
        prepared = Prepared(
            record.manifest.model_copy(update={"meta": None}),
            layout.deployed(name),
            record.tables,
            record.sources,
            None,
        )
        action = Action(
            name,
            "restore",
            (Reason.of("SAVEPOINT_REQUESTED"),),
            version=record.version,
            stop=True,
            restore_from=StateRef(kind="stop-savepoint", version=record.version),
        )
        decision = Decision(name, action, prepared, record, None, job, Observed(running=True))
        return self.carry_out(decision, purpose="savepoint", redecide=False)


def _mode_of(target: str) -> str:
    """The mode a job deployed on ``target`` runs in."""
    return "session" if target == layout.SESSION_TARGET else "application"
