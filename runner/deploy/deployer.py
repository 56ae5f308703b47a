"""Carrying deploy decisions out: gather inputs, ``plan``, then act on the store and the target.

For each manifest, under its lease (``runner/state/lease.py``):

1. read the deployed record, find the running job on the target, list savepoints and
   checkpoints, and let Spark compare the deployed and desired queries;
2. ``plan_one`` decides (pure);
3. act: stop with a savepoint, write the deployed record (a conditional write on the
   version read in step 1), work out where sources continue, start the job;
4. record the decision, its reasons, outcome and timings in ``history/<name>/``.

The deployed record is written before the job starts, so a runner that dies in between
leaves a version that never started, which the next deploy starts as planned.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from runner.authoring.project import Project
from runner.core import history, layout
from runner.core.bucket import PreconditionFailed
from runner.core.catalog import Catalog
from runner.core.errors import Problem, ProblemCollector, UserError
from runner.core.jobspec import JobSpec
from runner.core.manifest import Manifest, Meta
from runner.core.querydiff import QueryDiff
from runner.core.starts import Source, Starts
from runner.core.stateref import StateRef
from runner.core.tables import TableDef
from runner.deploy import submit
from runner.deploy.plan import Action, Deployed, Desired, Observed, plan, plan_one
from runner.state import continuation, records, savepoints
from runner.state.lease import lease
from runner.state.records import DeploymentRecord
from runner.state.store import Store
from runner.targets.base import JobIdentity, RunningJob, Target

Log = Callable[[str], None]


@dataclass
class Settings:
    store: Store
    target: Target
    team: str = "local"
    env: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    stop_timeout: float = 90.0  # seconds to wait for a stop at a batch boundary before killing
    spark_submit: str | None = None  # default: the installed pyspark's
    once: bool = False  # jobs process the input available now, then stop (``run --once``)


@dataclass(frozen=True)
class Prepared:
    """One desired manifest, checked against the tables and compared with what is deployed."""

    manifest: Manifest
    file: str
    tables: tuple[TableDef, ...]  # read and written
    sources: tuple[Source, ...]
    diff: QueryDiff | None


@dataclass
class Decision:
    name: str
    action: Action
    prepared: Prepared | None
    record: DeploymentRecord | None
    etag: str | None
    running: RunningJob | None
    observed: Observed


@dataclass(frozen=True)
class _Inputs:
    """What one decision is made from: the deployed record (and its etag), the running job, the state found."""

    record: DeploymentRecord | None
    etag: str | None
    running: RunningJob | None
    observed: Observed

    def decision(self, action: Action, prepared: Prepared | None) -> Decision:
        return Decision(action.name, action, prepared, self.record, self.etag, self.running, self.observed)


class Deployer:
    def __init__(
        self, project: Project | None, settings: Settings, log: Log, clock: Callable[[], datetime] | None = None
    ):
        self.project = project  # the desired manifests; not needed to stop or savepoint a deployed job
        self.settings = settings
        self.store = settings.store
        self.target = settings.target
        self.log = log
        self.clock = clock or (lambda: datetime.now(UTC))
        self._spark = None

    # ---- inputs -------------------------------------------------------------------------

    def spark(self):  # a SparkSession, created on first use
        if self._spark is None:
            from runner.analysis.session import local_session

            self.log("starting local Spark to analyse the queries (no data is read)")
            self._spark = local_session("sql-runner-plan")
        return self._spark

    def prepare(self, path: Path) -> Prepared:
        """Load and analyse one desired manifest; UserError if it is not deployable."""
        from runner.analysis.query_diff import diff_queries
        from runner.analysis.validate import analyse

        project = self.project
        assert project is not None, "preparing manifests needs the project"
        file = project.display(path)
        manifest = project.load_manifest(path)
        analysed = analyse(self.spark(), manifest, project.catalog, self.settings.env, file=file)
        tables = analysed.tables
        self._check_spec_size(manifest, tables)
        sources = tuple(Source(t.name, t.connector) for t in analysed.reads)
        record, _ = records.read_deployed(self.store.manifests, manifest.name)
        diff = None
        if record is not None:
            if self._same_text(record, manifest, tables):
                diff = QueryDiff(changed=False, state_compatible=True)
            else:
                diff = diff_queries(
                    self.spark(), record.manifest, list(record.tables), manifest, project.catalog, self.settings.env
                )
        return Prepared(manifest, file, tables, sources, diff)

    def _check_spec_size(self, manifest: Manifest, tables: tuple[TableDef, ...]) -> None:
        """A job spec too large for spark-submit's command line is refused now, before anything is stopped."""
        meta = Meta(query_id=str(uuid.uuid4()), query_version=1, query_create_timestamp=self.clock())
        run_id = savepoints.new_run_id(self.clock())
        checkpoint_key = layout.checkpoint(manifest.name, 1, run_id)
        self._job_spec(manifest.model_copy(update={"meta": meta}), tables, checkpoint_key, run_id, {}).to_json()

    def _job_spec(
        self, manifest: Manifest, tables: tuple[TableDef, ...], checkpoint_key: str, run_id: str, starts: Starts
    ) -> JobSpec:
        """What a job of ``manifest`` is handed (``manifest`` with its meta)."""
        return JobSpec(
            manifest,
            Catalog(tables),
            self.store.checkpoints.uri(checkpoint_key),
            self.store.checkpoints.uri(layout.dead_letter(manifest.name)),
            store=self.store.describe(),
            once=self.settings.once,
            run_id=run_id,
            starts=starts,
        )

    @staticmethod
    def _same_text(record: DeploymentRecord, manifest: Manifest, tables: tuple[TableDef, ...]) -> bool:
        old = record.manifest
        return (old.sql, old.code, old.target_table) == (manifest.sql, manifest.code, manifest.target_table) and sorted(
            json.dumps(t.definition(), sort_keys=True) for t in record.tables
        ) == sorted(json.dumps(t.definition(), sort_keys=True) for t in tables)

    def observe(self, name: str, record: DeploymentRecord | None) -> tuple[Observed, RunningJob | None]:
        running = self.target.find(self.settings.team, name)
        if record is None:
            return Observed(
                running=running is not None, running_version=running.identity.version if running else None
            ), running
        version = record.version
        status_blob = self.store.manifests.read(layout.status(name))
        status = json.loads(status_blob.text) if status_blob else {}
        checkpoints = tuple(savepoints.checkpoints(self.store, name, version))
        this_run = status.get("version") == version and status.get("run-id") == record.run_id
        ever_ran = bool(checkpoints) or (this_run and status.get("state") in ("running", "stopped"))
        return Observed(
            running=running is not None,
            running_version=running.identity.version if running else None,
            savepoints=tuple(savepoints.savepoints(self.store, name, version)),
            checkpoints=checkpoints,
            ever_ran=ever_ran,
            refused=status.get("state-refused") if this_run and status.get("state") == "failed" else None,
        ), running

    def prepare_all(self, paths: list[Path] | None) -> dict[str, Prepared]:
        """The desired manifests (``paths``, or every manifest of the project), all checked before any is used."""
        assert self.project is not None, "preparing manifests needs the project"
        chosen = paths if paths is not None else self.project.manifest_paths()
        collector = ProblemCollector()
        for path in chosen:
            if not path.exists():
                collector.add(Problem.of("FILE_NOT_FOUND", file=str(path), kind="manifest"))
        collector.raise_if_any()
        prepared: dict[str, Prepared] = {}
        for path in chosen:
            try:
                item = self.prepare(path)
            except UserError as error:
                collector.capture(error)
                continue
            if item.manifest.name in prepared:
                collector.add(
                    Problem.of(
                        "MANIFEST_DUPLICATE_NAME",
                        file=item.file,
                        field="name",
                        name=item.manifest.name,
                        other=prepared[item.manifest.name].file,
                    )
                )
            prepared[item.manifest.name] = item
        collector.raise_if_any()
        return prepared

    def _inputs(self, name: str) -> _Inputs:
        """What the plan decides on for ``name``, read from the store and the target."""
        record, blob = records.read_deployed(self.store.manifests, name)
        observed, running = self.observe(name, record)
        return _Inputs(record, blob.etag if blob else None, running, observed)

    def decide(self, name: str, prepared: Prepared | None) -> Decision:
        """The decision for one manifest (``prepared`` None: its manifest is gone)."""
        inputs = self._inputs(name)
        action = plan_one(name, _desired(prepared), _deployed(inputs.record), inputs.observed)
        return inputs.decision(action, prepared)

    def decide_all(self, prepared: dict[str, Prepared], *, whole_project: bool) -> list[Decision]:
        """Decisions for the prepared manifests, in name order; ``whole_project``: every deployed job too
        (one whose manifest is gone is removed)."""
        names = set(prepared) | (set(records.deployed_names(self.store.manifests)) if whole_project else set())
        inputs = {name: self._inputs(name) for name in names}
        desired = {name: _desired(item) for name, item in prepared.items()}
        deployed = {name: _deployed(item.record) for name, item in inputs.items() if item.record is not None}
        actions = plan(desired, deployed, {name: item.observed for name, item in inputs.items()})
        return [inputs[action.name].decision(action, prepared.get(action.name)) for action in actions]

    # ---- acting -------------------------------------------------------------------------

    def carry_out(self, decision: Decision, *, purpose: str = "deploy", redecide: bool = True) -> dict[str, Any]:
        """Act on one decision under the manifest's lease; returns the history record written."""
        started = time.monotonic()
        name = decision.name
        with lease(self.store.manifests, name, purpose=purpose, now=self.clock()):
            if redecide:  # what was read before the lease may have changed
                decision = self.decide(name, decision.prepared)
            else:
                _, blob = records.read_deployed(self.store.manifests, name)
                decision.etag = blob.etag if blob else None
            outcome: dict[str, Any] = {"result": "ok"}
            try:
                self._act(decision, outcome)
            except Exception as error:
                outcome["result"] = "failed"
                outcome["error"] = (
                    error.problems[0].render() if isinstance(error, UserError) else f"{type(error).__name__}: {error}"
                )
                self._history(decision, outcome, started)
                raise
            return self._history(decision, outcome, started)

    def _history(self, decision: Decision, outcome: dict[str, Any], started: float) -> dict[str, Any]:
        action = decision.action
        inputs = {
            "desired": decision.prepared.file if decision.prepared else None,
            "deployed-version": decision.record.version if decision.record else None,
            "running": decision.running.job_id if decision.running else None,
            "running-version": decision.observed.running_version,
            "savepoints": [r.key for r in decision.observed.savepoints],
            "checkpoints": [r.key for r in decision.observed.checkpoints],
        }
        sources = [{"table": s.table, "how": s.how, "detail": s.detail} for s in action.sources]
        return self._record(
            decision.name,
            action.kind,
            action.summary,
            list(action.reasons),
            action.version,
            inputs,
            outcome,
            started,
            sources,
        )

    def _record(
        self,
        name: str,
        decision: str,
        summary: str,
        reasons: list[str],
        version: int | None,
        inputs: dict[str, Any],
        outcome: dict[str, Any],
        started: float,
        sources: list[dict[str, str]] | None = None,
    ) -> dict[str, Any]:
        """Write ``history/<name>/<timestamp>.json`` and return it."""
        record = {
            "name": name,
            "at": self.clock().isoformat(),
            "team": self.settings.team,
            "target": self.target.kind,
            "inputs": inputs,
            "decision": decision,
            "summary": summary,
            "reasons": reasons,
            "version": version,
            "sources": sources or [],
            "outcome": outcome,
            "seconds": round(time.monotonic() - started, 3),
        }
        history.write_history(self.store.manifests, name, record, self.clock())
        return record

    def _running(self, name: str) -> tuple[DeploymentRecord, RunningJob]:
        record, _ = records.read_deployed(self.store.manifests, name)
        if record is None:
            raise UserError.of("NOT_DEPLOYED", name=name)
        job = self.target.find(self.settings.team, name)
        if job is None:
            raise UserError.of("NOT_RUNNING", name=name)
        return record, job

    def stop(self, name: str, *, savepoint: bool) -> dict[str, Any]:
        """``sql-runner stop``: stop at a batch boundary (with a savepoint unless told not to); recorded."""
        started = time.monotonic()
        with lease(self.store.manifests, name, purpose="stop", now=self.clock()):
            record, job = self._running(name)
            outcome: dict[str, Any] = {"result": "ok"}
            if savepoint:
                taken = self.stop_with_savepoint(record, job, reason="sql-runner stop")
                outcome["savepoint"] = _taken(taken)
            else:
                outcome["graceful"] = self.stop_job(record, job)
            return self._record(
                name,
                "stop",
                "stop" + (" with savepoint" if savepoint else ""),
                ["requested by sql-runner stop"],
                record.version,
                {"running": job.job_id, "deployed-version": record.version},
                outcome,
                started,
            )

    def savepoint(self, name: str) -> dict[str, Any]:
        """``sql-runner savepoint``: stop at a batch boundary, snapshot, restart from the snapshot."""
        record, job = self._running(name)
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
            ("savepoint requested: stop, snapshot, restart from it",),
            version=record.version,
            stop=True,
            restore_from=StateRef("stop-savepoint", record.version),
        )
        decision = Decision(name, action, prepared, record, None, job, Observed(running=True))
        return self.carry_out(decision, purpose="savepoint", redecide=False)

    def _act(self, decision: Decision, outcome: dict[str, Any]) -> None:
        action = decision.action
        if action.kind == "error":
            raise UserError.of(
                "NO_STATE_TO_RESTORE",
                name=decision.name,
                reasons="; ".join(action.reasons),
                deployed=layout.deployed(decision.name),
            )
        if action.kind == "nothing":
            return
        if action.kind == "update":
            self._update(decision, outcome)
            return
        taken = None
        if action.stop:
            assert decision.record is not None and decision.running is not None
            taken = self.stop_with_savepoint(decision.record, decision.running, reason=action.summary)
            outcome["savepoint"] = _taken(taken)
        if action.kind == "remove":
            assert decision.record is not None
            self._write_record(decision, replace(decision.record, removed=True, deployed_at=self.clock()))
            return
        self._start(decision, taken.ref if taken else None, outcome)

    def _update(self, decision: Decision, outcome: dict[str, Any]) -> None:
        """Record fields the running job does not use (retention, on-query-change); no restart."""
        record, prepared = decision.record, decision.prepared
        assert record is not None and prepared is not None
        manifest = prepared.manifest.model_copy(update={"meta": record.manifest.meta})
        self._write_record(decision, replace(record, manifest=manifest, deployed_at=self.clock()))
        self._apply_retention(manifest, layout.checkpoint(decision.name, record.version, record.run_id), outcome)

    def _apply_retention(self, manifest: Manifest, in_use: str, outcome: dict[str, Any]) -> None:
        """Delete the savepoints and run folders of ``manifest``'s version beyond its retention."""
        deleted = savepoints.apply_retention(
            self.store,
            manifest.name,
            manifest.version,
            keep_savepoints=manifest.retention.savepoints,
            keep_runs=manifest.retention.runs,
            in_use=in_use,
        )
        if deleted:
            outcome["retention-deleted"] = deleted

    def _resolve(self, ref: StateRef | None, taken: StateRef | None) -> StateRef | None:
        if ref is not None and ref.kind == "stop-savepoint":
            return taken
        return ref

    def _start(self, decision: Decision, taken: StateRef | None, outcome: dict[str, Any]) -> None:
        action = decision.action
        prepared = decision.prepared
        assert prepared is not None and action.version is not None
        now = self.clock()
        name = decision.name
        version = action.version
        previous = decision.record.manifest.meta if decision.record else None
        if previous is not None and previous.query_version == version:
            meta = previous
        else:
            meta = Meta(
                query_id=previous.query_id if previous else str(uuid.uuid4()),
                query_version=version,
                query_create_timestamp=now.replace(microsecond=0),
            )
        manifest = prepared.manifest.model_copy(update={"meta": meta})
        run_id = savepoints.new_run_id(now)
        starts: Starts = {}
        continued_from = None
        if action.kind == "restore":
            ref = self._resolve(action.restore_from, taken)
            assert ref is not None
            if ref.kind == "savepoint":
                checkpoint_key = savepoints.restore(self.store, ref, name, version, run_id)
                outcome["restored-from"] = ref.key
            else:
                run_id = ref.key.rstrip("/").rsplit("/", 1)[-1]
                checkpoint_key = ref.key
                outcome["resumed-checkpoint"] = ref.key
            continued_from = decision.record.continued_from if decision.record else None
        else:
            checkpoint_key = layout.checkpoint(name, version, run_id)
            continued_from = self._resolve(action.continue_from, taken)
            if continued_from is not None:
                bucket = self.store.savepoints if continued_from.kind == "savepoint" else self.store.checkpoints
                reads = [t for t in prepared.tables if Source(t.name, t.connector) in prepared.sources]
                plan = continuation.plan_starts(
                    self.store.checkpoints, bucket, continued_from.key, reads, name, version, self.settings.env
                )
                starts = plan.starts
                outcome["continuation"] = plan.notes
                for note in plan.notes:
                    self.log(f"[{name} v{version}] {note}")
        record = DeploymentRecord(
            manifest,
            prepared.tables,
            prepared.sources,
            run_id,
            self.target.kind,
            now,
            removed=False,
            continued_from=continued_from,
        )
        self._write_record(decision, record)
        self._clear_stop_request(name)
        identity = JobIdentity(self.settings.team, name, version, run_id)
        spec = self._job_spec(manifest, prepared.tables, checkpoint_key, run_id, starts)
        args = submit.command(
            spec,
            master=self.target.master(),
            env=self.settings.env,
            file=prepared.file,
            app_name=identity.app_name,
            options=self.target.submit_options(identity),
            spark_submit=self.settings.spark_submit,
            local_python=self.target.kind != "yarn",
        )
        self.log(
            f"[{name} v{version}] submitting to {self.target.kind} ({self.target.master()}), "
            f"checkpoint {checkpoint_key}"
        )
        job = self.target.submit(identity, args, submit.environment(self.settings.env))
        outcome.update({"job": job.job_id, "run-id": run_id, "checkpoint": checkpoint_key})
        self._apply_retention(manifest, checkpoint_key, outcome)

    def _write_record(self, decision: Decision, record: DeploymentRecord) -> None:
        data = record.to_yaml().encode()
        key = layout.deployed(decision.name)
        try:
            if decision.etag is None:
                self.store.manifests.write(key, data, if_absent=True)
            else:
                self.store.manifests.write(key, data, if_etag=decision.etag)
        except PreconditionFailed:
            raise UserError.of("DEPLOYED_STATE_CHANGED", name=decision.name) from None

    def _clear_stop_request(self, name: str) -> None:
        self.store.manifests.delete(layout.stop_request(name))
        self.store.manifests.delete(layout.stop_acknowledged(name))

    def stop_job(self, record: DeploymentRecord, job: RunningJob) -> bool:
        """Ask the job to stop at a batch boundary; kill it after the timeout. True if it stopped itself."""
        name = record.name
        request_id = uuid.uuid4().hex[:12]
        self.store.manifests.write(
            layout.stop_request(name),
            json.dumps(
                {"id": request_id, "version": job.identity.version, "requested-at": self.clock().isoformat()}
            ).encode(),
        )
        self.log(
            f"[{name} v{job.identity.version}] asked {job.job_id} to stop after its current micro-batch "
            f"(waiting up to {self.settings.stop_timeout:.0f}s)"
        )
        deadline = time.monotonic() + self.settings.stop_timeout
        acknowledged = False
        while time.monotonic() < deadline:
            ack = self.store.manifests.read(layout.stop_acknowledged(name))
            acknowledged = ack is not None and json.loads(ack.text).get("id") == request_id
            if self.target.find(self.settings.team, name) is None:
                break
            time.sleep(0.3)
        graceful = acknowledged
        if self.target.find(self.settings.team, name) is not None:
            self.log(
                f"[{name}] no stop within {self.settings.stop_timeout:.0f}s: killing {job.job_id}; "
                "the savepoint is its latest checkpoint"
            )
            self.target.stop(job, force=True)
            kill_deadline = time.monotonic() + 30
            while self.target.find(self.settings.team, name) is not None and time.monotonic() < kill_deadline:
                time.sleep(0.2)
            graceful = False
        self._clear_stop_request(name)
        return graceful

    def stop_with_savepoint(self, record: DeploymentRecord, job: RunningJob, *, reason: str) -> savepoints.Taken:
        graceful = self.stop_job(record, job)
        checkpoint_key = layout.checkpoint(record.name, record.version, record.run_id)
        taken = savepoints.take(
            self.store, record.name, record.version, checkpoint_key, now=self.clock(), graceful=graceful, reason=reason
        )
        how = "stopped at a batch boundary" if graceful else "killed (savepoint = latest checkpoint)"
        self.log(
            f"[{record.name} v{record.version}] {how}; savepoint {taken.ref.key} ({taken.files} files, "
            f"last committed batch {taken.last_batch})"
        )
        return taken


def _taken(taken: savepoints.Taken) -> dict[str, Any]:
    return {
        "key": taken.ref.key,
        "graceful": taken.graceful,
        "files": taken.files,
        "last-committed-batch": taken.last_batch,
    }


def _desired(prepared: Prepared | None) -> Desired | None:
    return Desired(prepared.manifest, prepared.sources, prepared.diff) if prepared else None


def _deployed(record: DeploymentRecord | None) -> Deployed | None:
    return Deployed(record.manifest, record.sources, record.removed, record.continued_from) if record else None
