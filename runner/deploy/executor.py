"""Carrying the steps of a decision out against a target and a store.

Each step of ``runner/deploy/steps.py`` is one method here. What one step produces for
the next (the savepoint a stop took, the run folder a restore made, where the sources
continue) is kept in a :class:`Run`; what happened is written into ``outcome``, which
ends up in the decision's history record.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from runner.core import layout, logs
from runner.core.bucket import PreconditionFailed
from runner.core.errors import UserError
from runner.core.identity import JobIdentity
from runner.core.manifest import Manifest, Meta
from runner.core.protocol.control import clear_stop
from runner.core.protocol.deployed import DeploymentRecord
from runner.core.protocol.history import Outcome, SavepointTaken
from runner.core.protocol.jobspec import JobSpec
from runner.core.reasons import rendered
from runner.core.starts import SourceTable, Starts
from runner.core.stateref import StateRef
from runner.deploy import submit
from runner.deploy.inputs import Decision, job_spec
from runner.deploy.launches import Launcher
from runner.deploy.settings import Settings
from runner.deploy.steps import (
    ApplyRetention,
    FreshCheckpoint,
    MarkRemoved,
    RecordUpdate,
    Refuse,
    RestoreSavepoint,
    ResumeCheckpoint,
    StartJob,
    Step,
    StopWithSavepoint,
    WriteRecord,
)
from runner.state import continuation, savepoints
from runner.targets.base import Launch, RunningJob

log = logging.getLogger(__name__)


@dataclass
class Run:
    """What the steps of one decision hand each other."""

    decision: Decision
    outcome: Outcome
    taken: savepoints.Taken | None = None  # the savepoint the stop step took
    run_id: str = ""
    checkpoint_key: str = ""
    starts: Starts = field(default_factory=dict)
    continued_from: StateRef | None = None
    manifest: Manifest | None = None  # the desired manifest with the meta it runs with


class Executor:
    def __init__(self, settings: Settings, clock: Callable[[], datetime], launcher: Launcher | None = None):
        self.settings = settings
        self.launcher = launcher  # releases the jobs that judged their own manifests
        self.store = settings.store
        self.targets = settings.targets
        self.clock = clock

    def carry_out(self, decision: Decision, plan: tuple[Step, ...], outcome: Outcome) -> None:
        """Carry ``plan`` out, in order; a step that fails raises and leaves the later ones undone."""
        run = Run(decision, outcome)
        for step in plan:
            self._do(step, run)

    def _do(self, step: Step, run: Run) -> None:
        decision = run.decision
        if isinstance(step, Refuse):
            raise UserError.of(
                "NO_STATE_TO_RESTORE",
                name=decision.name,
                reasons="; ".join(rendered(step.reasons)),
                deployed=layout.deployed(decision.name),
            )
        if isinstance(step, StopWithSavepoint):
            assert decision.record is not None and decision.running is not None
            run.taken = self.stop_with_savepoint(decision.record, decision.running, reason=decision.action.summary)
            run.outcome.savepoint = taken_summary(run.taken)
        elif isinstance(step, MarkRemoved):
            assert decision.record is not None
            self._write_record(
                decision, decision.record.model_copy(update={"removed": True, "deployed_at": self.clock()})
            )
        elif isinstance(step, RecordUpdate):
            record, prepared = decision.record, decision.prepared
            assert record is not None and prepared is not None
            run.manifest = prepared.manifest.model_copy(update={"meta": record.manifest.meta})
            run.checkpoint_key = layout.checkpoint(decision.name, record.version, record.run_id)
            self._write_record(
                decision, record.model_copy(update={"manifest": run.manifest, "deployed_at": self.clock()})
            )
        elif isinstance(step, RestoreSavepoint | ResumeCheckpoint | FreshCheckpoint):
            self._state(step, run)
        elif isinstance(step, WriteRecord):
            self._write_run_record(run)
        elif isinstance(step, StartJob):
            self._start(run)
        elif isinstance(step, ApplyRetention):
            assert run.manifest is not None
            self._apply_retention(run.manifest, run.checkpoint_key, run.outcome)
        else:  # pragma: no cover - every step type is handled above
            raise AssertionError(f"unknown step {step!r}")

    # ---- state for the run about to start -------------------------------------------------

    def _resolve(self, ref: StateRef | None, run: Run) -> StateRef | None:
        """A ``stop-savepoint`` reference is the savepoint the stop step took."""
        if ref is not None and ref.kind == "stop-savepoint":
            assert run.taken is not None, "the stop step comes first"
            return run.taken.ref
        return ref

    def _state(self, step: RestoreSavepoint | ResumeCheckpoint | FreshCheckpoint, run: Run) -> None:
        decision = run.decision
        action, prepared, name = decision.action, decision.prepared, decision.name
        assert prepared is not None and action.version is not None
        version = action.version
        now = self.clock()
        run.manifest = prepared.manifest.model_copy(update={"meta": self._meta(decision, now)})
        run.run_id = savepoints.new_run_id(now)
        if isinstance(step, RestoreSavepoint):
            ref = self._resolve(step.ref, run)
            assert ref is not None
            run.checkpoint_key = savepoints.restore(self.store, ref, name, version, run.run_id)
            run.outcome.restored_from = ref.key
            run.continued_from = decision.record.continued_from if decision.record else None
        elif isinstance(step, ResumeCheckpoint):
            run.run_id = step.ref.key.rstrip("/").rsplit("/", 1)[-1]
            run.checkpoint_key = step.ref.key
            run.outcome.resumed_checkpoint = step.ref.key
            run.continued_from = decision.record.continued_from if decision.record else None
        else:
            run.checkpoint_key = layout.checkpoint(name, version, run.run_id)
            run.continued_from = self._resolve(step.continue_from, run)
            if run.continued_from is not None:
                self._continue(run, run.continued_from)

    def _meta(self, decision: Decision, now: datetime) -> Meta:
        """The running version keeps its meta; a new version gets a new one (same query id)."""
        version = decision.action.version
        assert version is not None
        previous = decision.record.manifest.meta if decision.record else None
        if previous is not None and previous.query_version == version:
            return previous
        return Meta(
            query_id=previous.query_id if previous else str(uuid.uuid4()),
            query_version=version,
            query_create_timestamp=now.replace(microsecond=0),
        )

    def _continue(self, run: Run, previous: StateRef) -> None:
        """Where each source of the new version starts: after what the previous version read."""
        decision = run.decision
        prepared = decision.prepared
        assert prepared is not None and decision.action.version is not None
        bucket = self.store.savepoints if previous.kind == "savepoint" else self.store.checkpoints
        reads = [t for t in prepared.tables if SourceTable(table=t.name, connector=t.connector) in prepared.sources]
        planned = continuation.plan_starts(
            self.store.checkpoints,
            bucket,
            previous.key,
            reads,
            decision.name,
            decision.action.version,
            self.settings.values,
        )
        run.starts = planned.starts
        run.outcome.continuation = list(planned.notes)
        for note in planned.notes:
            log.info(f"{note}", extra=logs.job(decision.name, decision.action.version))

    def _write_run_record(self, run: Run) -> None:
        decision = run.decision
        prepared = decision.prepared
        assert prepared is not None and run.manifest is not None
        record = DeploymentRecord(
            manifest=run.manifest,
            tables=prepared.tables,
            sources=prepared.sources,
            run_id=run.run_id,
            target=self.targets.pick(run.manifest).kind,
            deployed_at=self.clock(),
            continued_from=run.continued_from,
        )
        self._write_record(decision, record)

    def _start(self, run: Run) -> None:
        decision, manifest = run.decision, run.manifest
        prepared = decision.prepared
        assert prepared is not None and manifest is not None
        name, version = decision.name, manifest.version
        target = self.targets.pick(manifest)
        clear_stop(self.store.manifests, name)
        identity = JobIdentity(team=self.settings.team, name=name, version=version, run_id=run.run_id)
        spec = job_spec(
            self.store,
            manifest,
            prepared.tables,
            run.checkpoint_key,
            run.run_id,
            run.starts,
            once=self.settings.once,
            placeholders=self.settings.placeholders,
        )
        if prepared.launched is not None:  # its job judged the manifest and waits: released with this spec
            assert self.launcher is not None
            spec = spec.model_copy(update={"launch_id": prepared.launched.launch_id})
            log.info(
                f"releasing its job on {target.kind} ({target.master()}), checkpoint {run.checkpoint_key}",
                extra=logs.job(name, version),
            )
            launched_identity = identity.model_copy(update={"launch": prepared.launched.launch_id})
            job = self.launcher.release(prepared.launched, spec, self._store_spec(spec), launched_identity)
            run.outcome.job, run.outcome.run_id, run.outcome.checkpoint = job.job_id, run.run_id, run.checkpoint_key
            return
        log.info(
            f"starting on {target.kind} ({target.master()}), checkpoint {run.checkpoint_key}",
            extra=logs.job(name, version),
        )
        if target.kind == layout.SESSION_TARGET:  # a query in the session: it resolves placeholders itself
            launch = Launch(identity, spec, [], self.settings.values)
        else:
            args = submit.command(
                spec,
                self.store.manifests.uri(self._store_spec(spec)),
                master=target.master(),
                env=self.settings.env,
                app_name=identity.app_name,
                options=target.submit_options(identity, manifest.restart_strategy),
                spark_submit=self.settings.spark_submit,
                this_machine=target.kind != "yarn",
            )
            launch = Launch(identity, spec, args, submit.environment(self.settings.env))
        try:
            job = target.submit(launch)
        except UserError:
            self._unrecord(decision)
            raise
        run.outcome.job, run.outcome.run_id, run.outcome.checkpoint = job.job_id, run.run_id, run.checkpoint_key

    def _unrecord(self, decision: Decision) -> None:
        """The target refused the job outright (YARN: an unknown queue, a container larger than any node): the
        deployment is not recorded. A new job has no record; a job that ran has its previous record back, whose
        state (the savepoint a stop just took among it) the next deploy restores."""
        key = layout.deployed(decision.name)
        if decision.record is None:
            self.store.manifests.delete(key)
        else:
            self.store.manifests.write(key, decision.record.encode())
        log.info("the target refused the job: its deployment is not recorded", extra=logs.job(decision.name))

    def _store_spec(self, spec: JobSpec) -> str:
        """Write the run's spec where its driver reads it; earlier runs' specs of the job go."""
        name = spec.manifest.name
        key = layout.job_spec(name, spec.run_id)
        self.store.manifests.write(key, spec.encode(line=True))
        for old in self.store.manifests.keys(layout.job_specs(name)):
            if old != key:
                self.store.manifests.delete(old)
        return key

    def _apply_retention(self, manifest: Manifest, in_use: str, outcome: Outcome) -> None:
        """Delete the savepoints and run folders of ``manifest``'s version beyond its retention."""
        deleted = savepoints.apply_retention(
            self.store,
            manifest.name,
            manifest.version,
            keep_savepoints=manifest.retention.savepoints,
            keep_runs=manifest.retention.runs,
            in_use=in_use,
        )
        outcome.retention_deleted = deleted

    def _write_record(self, decision: Decision, record: DeploymentRecord) -> None:
        data = record.encode()
        key = layout.deployed(decision.name)
        try:
            if decision.etag is None:
                self.store.manifests.write(key, data, if_absent=True)
            else:
                self.store.manifests.write(key, data, if_etag=decision.etag)
        except PreconditionFailed:
            raise UserError.of("DEPLOYED_STATE_CHANGED", name=decision.name) from None

    # ---- stopping ---------------------------------------------------------------------------

    def stop_job(self, record: DeploymentRecord, job: RunningJob) -> bool:
        """Stop at a batch boundary; killed after the timeout. True if it stopped itself."""
        timeout = self.settings.stop_timeout
        log.info(
            f"asking {job.job_id} to stop after its current micro-batch "
            f"(waiting up to {timeout:.0f}s, then killing it)",
            extra=logs.job(record.name, job.identity.version),
        )
        return self.targets.of(job).stop_gracefully(job, timeout)

    def stop_with_savepoint(self, record: DeploymentRecord, job: RunningJob, *, reason: str) -> savepoints.Taken:
        graceful = self.stop_job(record, job)
        checkpoint_key = layout.checkpoint(record.name, record.version, record.run_id)
        taken = savepoints.take(
            self.store, record.name, record.version, checkpoint_key, now=self.clock(), graceful=graceful, reason=reason
        )
        how = "stopped at a batch boundary" if graceful else "killed (savepoint = latest checkpoint)"
        log.info(
            f"{how}; savepoint {taken.ref.key} ({taken.files} files, last committed batch {taken.last_batch})",
            extra=logs.job(record.name, record.version),
        )
        return taken


def taken_summary(taken: savepoints.Taken) -> SavepointTaken:
    """How a savepoint taken on stop is shown in the history entry."""
    return SavepointTaken(
        key=taken.ref.key, graceful=taken.graceful, files=taken.files, last_committed_batch=taken.last_batch
    )
