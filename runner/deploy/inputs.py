"""What a deploy decision is made from: the desired manifest checked against its tables, and
what the store and the target say about the deployed job.

- :class:`Preparer` loads a desired manifest, lets Spark analyse it (the same streaming
  checks as ``validate``) and compare it with the deployed query;
- :func:`observe` reads the deployed record, the job's published status, its savepoints
  and checkpoints, and asks the target whether the job runs.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner.authoring.project import Project
from runner.core import layout, placeholders
from runner.core.catalog import Catalog
from runner.core.errors import Problem, ProblemCollector, UserError
from runner.core.manifest import Manifest
from runner.core.placeholders import Sources
from runner.core.protocol.deployed import DeploymentRecord
from runner.core.protocol.jobspec import JobSpec
from runner.core.protocol.status import JobState, read_status
from runner.core.querydiff import QueryDiff
from runner.core.starts import Source, Starts
from runner.core.tables import TableDef
from runner.deploy.plan import Action, Deployed, Desired, Observed
from runner.state import records, savepoints
from runner.state.store import Store
from runner.targets.base import RunningJob, Target

if TYPE_CHECKING:
    from jobs.build import BuiltJob


@dataclass(frozen=True)
class Prepared:
    """One desired manifest, checked against the tables and compared with what is deployed."""

    manifest: Manifest
    file: str
    tables: tuple[TableDef, ...]  # read and written
    sources: tuple[Source, ...]
    diff: QueryDiff | None

    @property
    def desired(self) -> Desired:
        return Desired(self.manifest, self.sources, self.diff)


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
        manifest,
        Catalog(tables),
        store.checkpoints.uri(checkpoint_key),
        store.checkpoints.uri(layout.dead_letter(manifest.name)),
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
    ):
        self.project = project
        self.store = store
        self.env = env
        self.spark = spark
        self.clock = clock
        # deployed records read ahead for prepare_all (read again under the lease before anything is done)
        self.deployed: dict[str, tuple[DeploymentRecord | None, Any]] = {}

    def prepare(self, path: Path) -> Prepared:
        """Load and analyse one desired manifest; UserError if it is not deployable.

        When the deployed query's text differs, the deployed query is analysed first and the
        desired one over the same frames, so that one analysis serves both the checks and the
        comparison."""
        project = self.project
        file = project.display(path)
        manifest = project.load_manifest(path)
        record, _ = self.deployed.get(manifest.name) or records.read_deployed(self.store.manifests, manifest.name)
        unchanged = self._unchanged_tables(record, manifest)
        if record is not None and unchanged is not None:
            # The query and every table it uses are as deployed: Spark judged them then, and would again.
            problems = placeholders.job_problems(manifest.spark_properties, file, unchanged, self.env)
            if problems:
                raise UserError(problems)
            return Prepared(manifest, file, unchanged, record.sources, QueryDiff(changed=False, state_compatible=True))
        # Only now the analysis modules (they import PySpark): an unchanged manifest needs none of it.
        from runner.analysis.query_diff import compare, diff_queries
        from runner.analysis.validate import analyse

        before = self._deployed_build(record, manifest)
        reuse = before.query if before is not None else None
        analysed = analyse(self.spark(), manifest, project.catalog, self.env, file=file, reuse=reuse)
        tables = analysed.tables
        sources = tuple(Source(t.name, t.connector, bool(t.changelog)) for t in analysed.reads)
        diff = None
        if record is not None:
            if same_text(record, manifest, tables):
                diff = QueryDiff(changed=False, state_compatible=True)
            elif before is not None:
                diff = compare(before, analysed.built, record.manifest, manifest, list(record.tables), project.catalog)
            else:
                diff = diff_queries(
                    self.spark(), record.manifest, list(record.tables), manifest, project.catalog, self.env
                )
        return Prepared(manifest, file, tables, sources, diff)

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

    def _deployed_build(self, record: DeploymentRecord | None, manifest: Manifest) -> BuiltJob | None:
        """The deployed query's analysis when the desired query's text or target differs from it; None
        otherwise, or when it does not build (the desired query is then checked first, as without this
        shortcut, and the comparison builds the deployed one again and reports what failed)."""
        from runner.analysis.query_diff import deployed_build

        if record is None or same_query(record.manifest, manifest):
            return None
        try:
            return deployed_build(self.spark(), record.manifest, list(record.tables), self.env)
        except Exception:  # noqa: BLE001 - reported by the comparison, after the desired query's own checks
            return None

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
        """The desired manifests (``paths``, or every manifest of the project), all checked before any is used."""
        chosen = paths if paths is not None else self.project.manifest_paths()
        collector = ProblemCollector()
        for path in chosen:
            if not path.exists():
                collector.add(Problem.of("FILE_NOT_FOUND", file=str(path), kind="manifest"))
        collector.raise_if_any()
        self._read_ahead(chosen)
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


def _manifest_name(path: Path) -> str:
    return path.name.rsplit(".", 1)[0]


def same_query(old: Manifest, new: Manifest) -> bool:
    """The two manifests hold the same query text and target table."""
    return (old.sql, old.code, old.target_table) == (new.sql, new.code, new.target_table)


def same_text(record: DeploymentRecord, manifest: Manifest, tables: tuple[TableDef, ...]) -> bool:
    """The deployed and desired queries are the same text over the same table definitions."""
    return same_query(record.manifest, manifest) and sorted(
        json.dumps(t.definition(), sort_keys=True) for t in record.tables
    ) == sorted(json.dumps(t.definition(), sort_keys=True) for t in tables)


def observe(
    store: Store, target: Target, team: str, name: str, known: tuple[DeploymentRecord | None, Any] | None = None
) -> Inputs:
    """What the plan decides on for ``name``, read from the store and the target (``known``: its deployed
    record and blob, read a moment ago for the same plan)."""
    record, blob = known if known is not None else records.read_deployed(store.manifests, name)
    running = target.find(team, name)
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
    )
    return Inputs(record, blob.etag if blob else None, running, observed)
