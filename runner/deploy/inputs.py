"""What a deploy decision is made from: the desired manifest checked against its tables, and
what the store and the target say about the deployed job.

- :class:`Preparer` loads a desired manifest, lets Spark analyse it (the same streaming
  checks as ``validate``) and compare it with the deployed query;
- :func:`observe` reads the deployed record, the job's published status, its savepoints
  and checkpoints, and asks the target whether the job runs.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from runner.authoring.project import Project
from runner.core import layout, logs, placeholders
from runner.core.catalog import Catalog
from runner.core.engine_record import ENGINE_FILE, layout_refusal
from runner.core.errors import Problem, ProblemCollector, UserError
from runner.core.manifest import Manifest
from runner.core.placeholders import Sources, Values
from runner.core.protocol.deployed import DeploymentRecord
from runner.core.protocol.jobspec import JobSpec, Judging
from runner.core.protocol.launch import JudgeRequest
from runner.core.protocol.status import JobState, read_status
from runner.core.querydiff import QueryDiff, same_query
from runner.core.starts import SourceTable, Starts
from runner.core.tables import TableDef
from runner.deploy.launches import Launched, Launcher
from runner.deploy.plan import Action, Deployed, DesiredQuery, Observed, latest_state
from runner.state import records, savepoints
from runner.state.store import Store
from runner.targets.base import RunningJob
from runner.targets.modes import Targets
from runner.targets.session import SessionTarget, SessionUnavailable

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Prepared:
    """One desired manifest, checked against the tables and compared with what is deployed."""

    manifest: Manifest
    file: str
    tables: tuple[TableDef, ...]  # read and written
    sources: tuple[SourceTable, ...]
    diff: QueryDiff | None
    launched: Launched | None = field(default=None, compare=False)  # its job, which judged it, waiting
    judged_by: str | None = field(default=None, compare=False)  # elsewhere than here or its job: who, for history

    @property
    def desired(self) -> DesiredQuery:
        return DesiredQuery(self.manifest, self.sources, self.diff)


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
class Inputs:
    """What one decision is made from: the deployed record (and its etag), the running job, the state found."""

    record: DeploymentRecord | None
    etag: str | None
    running: RunningJob | None
    observed: Observed

    @property
    def deployed(self) -> Deployed | None:
        record = self.record
        return Deployed(record.manifest, record.sources, record.removed, record.continued_from) if record else None

    def decision(self, action: Action, prepared: Prepared | None) -> Decision:
        return Decision(action.name, action, prepared, self.record, self.etag, self.running, self.observed)


def job_spec(
    store: Store,
    manifest: Manifest,
    tables: tuple[TableDef, ...],
    checkpoint_key: str,
    run_id: str,
    starts: Starts,
    *,
    once: bool = False,
    placeholders: Sources | None = None,
) -> JobSpec:
    """What a job of ``manifest`` (with its meta) is handed."""
    return JobSpec(
        manifest=manifest,
        catalog=Catalog(tables),
        checkpoint=store.checkpoints.uri(checkpoint_key),
        dead_letter=store.checkpoints.uri(layout.dead_letter(manifest.name)),
        store=store.describe(),
        once=once,
        run_id=run_id,
        starts=starts,
        placeholders=placeholders or Sources(),
        launch_id=uuid.uuid4().hex[:12],
    )


READERS = 16  # deployed records read at once


class Preparer:
    """Loads and analyses desired manifests on a SparkSession it is given (created on first use)."""

    def __init__(
        self,
        project: Project,
        store: Store,
        env: Mapping[str, str],
        spark: Callable[[], Any],
        clock: Callable[[], datetime],
        launcher: Launcher | None = None,
        session: SessionTarget | None = None,
    ):
        self.project = project
        self.store = store
        self.env = env
        self.spark = spark
        self.clock = clock
        self.launcher = launcher  # where jobs judging their own manifests are launched (else Spark here judges)
        self.session = session  # the team's session, asked to judge first when it runs (else Spark here judges)
        # deployed records read ahead for prepare_all (read again under the lease before anything is done)
        self.deployed: dict[str, tuple[DeploymentRecord | None, Any]] = {}

    def prepare(self, path: Path) -> Prepared:
        """Load and analyse one desired manifest; UserError if it is not deployable.

        Spark judges it (``runner/analysis/judge.py``) unless it is the deployed query over the
        same tables."""
        loaded = self._load(path)
        return loaded if isinstance(loaded, Prepared) else self._judge_here(loaded)

    def _load(self, path: Path) -> Prepared | ToJudge:
        """The manifest, prepared already when it is the deployed query over the same tables (Spark judged
        them then, and would again); what Spark must judge otherwise."""
        project = self.project
        file = project.display(path)
        manifest = project.load_manifest(path)
        record, _ = self.deployed.get(manifest.name) or records.read_deployed(self.store.manifests, manifest.name)
        unchanged = self._unchanged_tables(record, manifest)
        if record is None or unchanged is None:
            return ToJudge(manifest, file, record)
        problems = placeholders.job_problems(manifest.spark_properties, file, unchanged, self.env)
        if problems:
            raise UserError(problems)
        return Prepared(manifest, file, unchanged, record.sources, QueryDiff(changed=False, state_compatible=True))

    def _judge_here(self, item: ToJudge) -> Prepared:
        """Judged by the team's session when one runs and it was asked to, else on this process's Spark (the
        analysis modules import PySpark: only now)."""
        if self.session is not None:
            judged = self._judged_by_session(item, self.session)
            if judged is not None:
                return judged
        from runner.analysis.judge import judge

        judging = Judging.against(item.file, item.record)
        judged = judge(
            self.spark(),
            item.manifest,
            self.project.catalog,
            self.env,
            file=judging.file,
            deployed=judging.deployed,
            deployed_tables=judging.deployed_tables,
        )
        return Prepared(item.manifest, item.file, judged.tables, judged.sources, judged.diff)

    def _judged_by_its_job(self, item: ToJudge, launched: Launched) -> Prepared:
        """Judged by its launched job's driver; UserError with the problems it found."""
        assert self.launcher is not None
        verdict = self.launcher.verdict(launched)
        if verdict.failure is not None:
            raise UserError.of(
                "JUDGING_FAILED",
                name=item.manifest.name,
                why=f"failed ({verdict.failure})",
                log=launched.started.log or "above",
            )
        if verdict.problems:
            raise UserError(verdict.problems)
        return Prepared(item.manifest, item.file, verdict.tables, verdict.sources, verdict.diff, launched)

    def _judged_by_session(self, item: ToJudge, session: SessionTarget) -> Prepared | None:
        """Judged on the team's running session's warm Spark; None when it cannot be asked (no session runs, its
        endpoint is not reached, it does not judge: not asked again by this deploy) or its analysis failed (not
        the manifest's fault); UserError with the problems it found."""
        judging = Judging.against(item.file, item.record)
        sources = self.env.sources if isinstance(self.env, Values) else Sources()
        request = JudgeRequest(
            manifest=item.manifest, tables=self.project.catalog.tables, judging=judging, placeholders=sources
        )
        began = time.monotonic()
        label = logs.job(item.manifest.name)
        try:
            verdict = session.judge(request)
        except SessionUnavailable as why:
            log.info(f"judging on a Spark of its own: {why}", extra=label)
            self.session = None
            return None
        if verdict.failure is not None:
            said = f"the team's session could not judge it ({verdict.failure})"
            log.info(f"{said}: judging on a Spark of its own", extra=label)
            return None
        if verdict.problems:
            raise UserError(verdict.problems)
        took = time.monotonic() - began
        log.info(f"judged by the team's session in {took:.1f} s ({verdict.seconds:.1f} s of analysis)", extra=label)
        by = f"the team's session ({verdict.launch_id}, {verdict.seconds:.1f} s of analysis)"
        return Prepared(item.manifest, item.file, verdict.tables, verdict.sources, verdict.diff, judged_by=by)

    def _unchanged_tables(self, record: DeploymentRecord | None, manifest: Manifest) -> tuple[TableDef, ...] | None:
        """The current definitions of the deployed query's tables when the desired SQL query is the deployed one
        over tables declared exactly as then (and no table since shares one's name, which could make an
        unqualified name ambiguous); None when anything differs, or for a ``code`` snippet (it may use any
        table, so only Spark can say)."""
        if record is None or manifest.sql is None or not same_query(record.manifest, manifest):
            return None
        catalog = self.project.catalog
        current = []
        for table in record.tables:
            found = catalog.lookup(table.key)
            namesakes = [t for t in catalog.tables if t.key[-1] == table.key[-1]]
            if found is None or len(namesakes) != 1 or found.definition() != table.definition():
                return None
            current.append(found)
        return tuple(current)

    def _read_ahead(self, paths: list[Path]) -> None:
        """Read the deployed records of many manifests at once (named as their files are; a manifest
        named otherwise is refused when prepared, or read then)."""
        names = sorted({_manifest_name(path) for path in paths})
        if len(names) < 2:
            return
        with ThreadPoolExecutor(READERS) as pool:
            found = pool.map(lambda name: records.read_deployed(self.store.manifests, name), names)
            self.deployed = dict(zip(names, found, strict=True))

    def prepare_all(self, paths: list[Path] | None) -> dict[str, Prepared]:
        """The desired manifests (``paths``, or every manifest of the project), all checked before any is used.

        With a launcher, the manifests Spark must judge have their jobs launched at once, each judging
        its own; if any manifest is refused, every launched job is sent away and nothing is deployed."""
        chosen = paths if paths is not None else self.project.manifest_paths()
        collector = ProblemCollector()
        for path in chosen:
            if not path.exists():
                collector.add(Problem.of("FILE_NOT_FOUND", file=str(path), kind="manifest"))
        collector.raise_if_any()
        self._read_ahead(chosen)
        loaded: list[Prepared | ToJudge] = []
        for path in chosen:
            try:
                loaded.append(self._load(path))
            except UserError as error:
                collector.capture(error)
        launcher = self.launcher
        launches: dict[str, Launched] = {}
        if launcher is not None and not collector.problems:  # with problems already, one Spark here judges the rest
            among = sum(isinstance(item, ToJudge) for item in loaded)
            for item in loaded:
                name = item.manifest.name
                if isinstance(item, ToJudge) and name not in launches and launcher.can_judge(item.manifest):
                    launches[name] = launcher.launch(
                        item.manifest, item.file, self.project.catalog, item.record, among=among
                    )
        prepared: dict[str, Prepared] = {}
        for item in loaded:
            try:
                if isinstance(item, Prepared):
                    done = item
                elif item.manifest.name in launches and launches[item.manifest.name].verdict is None:
                    done = self._judged_by_its_job(item, launches[item.manifest.name])
                else:  # its target's jobs cannot judge (or a namesake's job judges its own): Spark here judges
                    done = self._judge_here(item)
            except UserError as error:
                collector.capture(error)
                continue
            if done.manifest.name in prepared:
                collector.add(
                    Problem.of(
                        "MANIFEST_DUPLICATE_NAME",
                        file=done.file,
                        field="name",
                        name=done.manifest.name,
                        other=prepared[done.manifest.name].file,
                    )
                )
            prepared[done.manifest.name] = done
        if collector.problems and launcher is not None:
            launcher.send_all_away("the deploy was refused: " + "; ".join(p.render() for p in collector.problems))
        collector.raise_if_any()
        return prepared


@dataclass(frozen=True)
class ToJudge:
    """A desired manifest Spark must judge: new, or changed from ``record``."""

    manifest: Manifest
    file: str
    record: DeploymentRecord | None


def _manifest_name(path: Path) -> str:
    return path.name.rsplit(".", 1)[0]


def observe(
    store: Store, targets: Targets, team: str, name: str, known: tuple[DeploymentRecord | None, Any] | None = None
) -> Inputs:
    """What the plan decides on for ``name``, read from the store and the target (``known``: its deployed
    record and blob, read a moment ago for the same plan)."""
    record, blob = known if known is not None else records.read_deployed(store.manifests, name)
    running = targets.find(team, name)
    running_version = running.identity.version if running else None
    if record is None:
        return Inputs(None, None, running, Observed(running=running is not None, running_version=running_version))
    version = record.version
    # What the job last said matters only when it is not running.
    status = read_status(store.manifests, name) if running is None else None
    said = status if status is not None and status.of_run(version, record.run_id) else None
    # What a restore would choose from; a running job is stopped with a savepoint of its own instead.
    checkpoints = tuple(savepoints.checkpoints(store, name, version)) if running is None else ()
    ever_ran = bool(checkpoints) or (said is not None and said.state in (JobState.RUNNING, JobState.STOPPED))
    observed = Observed(
        running=running is not None,
        running_version=running_version,
        savepoints=tuple(savepoints.savepoints(store, name, version)) if running is None else (),
        checkpoints=checkpoints,
        ever_ran=ever_ran,
        refused=said.state_refused if said is not None and said.state == JobState.FAILED else None,
        ended=gone.how if running is None and (gone := targets.ended(team, name)) and not gone.clean else None,
    )
    observed = replace(observed, unreadable=unreadable_state(store, record, running, observed))
    return Inputs(record, blob.etag if blob else None, running, observed)


def unreadable_state(
    store: Store, record: DeploymentRecord, running: RunningJob | None, observed: Observed
) -> str | None:
    """Why this release cannot read the state a restore of ``record``'s version would start from, as that state
    records it (``runner/core/engine_record.py``): the running run's checkpoint (its stop savepoint copies it),
    or the newest savepoint or checkpoint of a job that is not running. None: it can, or there is none, or it
    cannot be told here: then the job refuses such state as it starts, and the next plan starts a new version."""
    if running is not None:
        if running.identity.version != record.version or not record.run_id:
            return None  # another version runs (its state is not the deployed version's), or no run is recorded
        bucket, key = store.checkpoints, layout.checkpoint(record.name, record.version, record.run_id)
    elif (latest := latest_state(observed)) is not None:
        bucket, key = (store.savepoints if latest.kind == "savepoint" else store.checkpoints), latest.key
    else:
        return None
    recorded = bucket.read(f"{key}{ENGINE_FILE}")
    return layout_refusal(recorded.data.decode("utf-8", "replace").strip()) if recorded is not None else None
