"""``sql-runner validate``: manifests and DDL checked, then each query analysed on local Spark.

No data is read: every declared table is a stand-in stream of its declared shape, so
Spark resolves the query, its columns and types, the target's schema is checked against
the query's result, and Spark's streaming checks run on the plan with the output mode
the target's sink will use (``runner/analysis/streaming.py``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pyspark.sql import SparkSession

from jobs.build import BuiltJob, BuiltQuery, build_job
from jobs.changelog import incremental, stream
from jobs.connectors import spark_connector
from jobs.sinks import output_mode
from runner.analysis import streaming
from runner.analysis.session import local_session
from runner.authoring import yamlfile
from runner.authoring.project import Project, load_project
from runner.core import placeholders
from runner.core.catalog import Catalog
from runner.core.errors import Problem, ProblemCollector, UserError
from runner.core.manifest import Manifest, chosen_changelog_engine
from runner.core.tables import TableDef

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Analysed:
    """A manifest's query resolved against the declared tables."""

    reads: tuple[TableDef, ...]  # as streams
    target: TableDef
    built: BuiltJob = field(compare=False, repr=False)  # the plan analysed
    lookups: tuple[TableDef, ...] = ()  # joined as reference data (jobs/lookup/)
    recomputed: str | None = None  # a changelog query the incremental operators do not run: why

    @property
    def tables(self) -> tuple[TableDef, ...]:
        """Every table the job reads or writes."""
        return (*self.reads, *self.lookups, self.target)


@dataclass(frozen=True)
class Checked:
    path: Path
    manifest: Manifest
    analysed: Analysed


def analyse(
    spark: SparkSession,
    manifest: Manifest,
    catalog: Catalog,
    env: Mapping[str, str],
    *,
    file: str | None,
    lines: Mapping[str, int] | None = None,
    reuse: BuiltQuery | None = None,
) -> Analysed:
    """Resolve the query over empty frames of the declared tables and check what it needs to run.

    Raises UserError for anything that would stop the job: the query, the target's schema,
    a source or sink that cannot play its part, placeholders not set in ``env``.
    ``reuse``: the deployed query's analysis, whose frames serve the tables declared the
    same way, so this analysis can also be compared with it (``runner/analysis/query_diff.py``).
    """
    built = build_job(spark, manifest, catalog, env, live=False, file=file, lines=lines, reuse=reuse)
    query_field = "sql" if manifest.sql is not None else "code"
    line = (lines or {}).get(query_field)
    streaming.check(built.output, output_mode(built.target), file=file, field=query_field, line=line)
    streams = tuple(built.query.streams().values())
    lookups = tuple(t for t in built.query.sources.values() if t not in streams)
    analysed = Analysed(streams, built.target, built, lookups, _recomputed(spark, manifest, built))
    problems = placeholders.job_problems(manifest.spark_properties, file, analysed.tables, env)
    if problems:
        raise UserError(problems)
    spark_connector(built.target).check_sink(built.target, env)  # e.g. a database's table has what is written
    for table in lookups:  # e.g. a database's table has the columns declared
        spark_connector(table).check_lookup(table, env)
    return analysed


def _recomputed(spark: SparkSession, manifest: Manifest, built: BuiltJob) -> str | None:
    """Why a changelog query would run recomputed every micro-batch, as its job decides it (jobs/runtime.py)."""
    plan = built.query.changelog
    if plan is None:
        return None
    sql, views = stream.own_views(plan.sql, plan.views, f"{manifest.name}_validate")
    sources = stream.sources(plan.stream, [(own, table) for _view, own, table in views])
    return incremental.choose(spark, chosen_changelog_engine(manifest), sources, lambda: spark.sql(sql)).recomputed


def _field_lines(path: Path) -> dict[str, int]:
    try:
        return yamlfile.load(path.read_text(encoding="utf-8"), file=str(path)).lines
    except UserError:
        return {}


def validate_paths(
    paths: list[Path],
    project_dir: Path | None,
    values: Mapping[str, str] | None = None,
) -> list[Checked]:
    """Validate manifests and DDL files; raises UserError with every problem found.

    With no paths, the whole project; a manifest given alone is checked against the
    project's tables, a DDL file given alone for its own problems.
    """
    manifest_paths = [p for p in paths if p.suffix in (".yaml", ".yml")]
    ddl_paths = [p for p in paths if p.suffix == ".sql"]
    other = [p for p in paths if p not in manifest_paths and p not in ddl_paths]
    collector = ProblemCollector()
    for path in other:
        collector.add(Problem.of("UNSUPPORTED_FILE", file=str(path)))
    for path in paths:
        if not path.exists():
            collector.add(Problem.of("FILE_NOT_FOUND", file=str(path), kind="file"))
    collector.raise_if_any()
    project = load_project(project_dir, extra_ddl=[p.resolve() for p in ddl_paths])
    if not paths:
        manifest_paths = project.manifest_paths()
    env = values if values is not None else dict(os.environ)
    if ddl_paths and not manifest_paths:
        given = {project.display(p) for p in ddl_paths}
        for table in project.catalog.tables:
            if table.file in given:
                collector.extend(placeholders.table_problems(table, env))
        collector.raise_if_any()
        return []
    loaded: list[tuple[Path, Manifest]] = []
    for path in manifest_paths:
        try:
            loaded.append((path, project.load_manifest(path)))
        except UserError as error:
            collector.capture(error)
    names: dict[str, Path] = {}
    for path, manifest in loaded:
        if manifest.name in names:
            collector.add(
                Problem.of(
                    "MANIFEST_DUPLICATE_NAME",
                    file=project.display(path),
                    field="name",
                    name=manifest.name,
                    other=project.display(names[manifest.name]),
                )
            )
        names[manifest.name] = path
    if not loaded:
        collector.raise_if_any()
        return []
    log.info(f"analysing {len(loaded)} quer{'y' if len(loaded) == 1 else 'ies'} on local Spark (no data is read)")
    checked = _analyse(project, loaded, collector)
    collector.raise_if_any()
    return checked


def _analyse(project: Project, loaded: list[tuple[Path, Manifest]], collector: ProblemCollector) -> list[Checked]:
    spark = local_session("sql-runner-validate")
    checked: list[Checked] = []
    for path, manifest in loaded:
        try:
            analysed = analyse(
                spark, manifest, project.catalog, os.environ, file=project.display(path), lines=_field_lines(path)
            )
        except UserError as error:
            collector.capture(error)
            continue
        checked.append(Checked(path, manifest, analysed))
    return checked
