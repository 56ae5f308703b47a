"""Building a job's DataFrame from a manifest: sources, the query, target check, metadata.

The same code serves two purposes: with ``live=True`` it reads the live sources (the
job, ``preview``); with ``live=False`` every table is a stand-in stream of its declared
shape that reads nothing, so ``validate`` and ``plan`` analyse the very streaming plan
the job will run without reading any data.
"""

from __future__ import annotations

import traceback
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs import sources
from jobs.changelog import stream
from jobs.changelog.sinks import check_target
from jobs.connectors import open_source
from jobs.jvm import expression_classes
from jobs.lookup import partial
from jobs.lookup import rule as lookup_rule
from jobs.lookup.refresh import Marker
from jobs.metadata import with_metadata
from jobs.query import BoundSql, Location, analysed, bind, view_name
from jobs.schema import spark_schema
from jobs.sinks import check_sink
from jobs.target_schema import conform
from runner.core.catalog import Catalog
from runner.core.errors import UserError
from runner.core.lookup import data_definition, is_lookup, lookup_cache
from runner.core.manifest import Manifest
from runner.core.starts import MAIN, Starts
from runner.core.tables import TableDef


@dataclass(frozen=True)
class Tapped:
    """A source whose malformed records go to the dead-letter location, and its taps' markers."""

    source: sources.Source
    rows_read: str  # marker of the tap over the rows as read
    rows_good: str  # marker of the tap over the good rows

    @property
    def table(self) -> TableDef:
        return self.source.table


@dataclass(frozen=True)
class ChangelogPlan:
    """A query over tables whose rows change (``jobs/changelog/``): its SQL runs in batch over the tables'
    current rows every micro-batch; the stream is every source's changes."""

    sql: str  # the query's SQL over the tables' views
    stream: DataFrame  # jobs/changelog/stream.py:changes
    views: tuple[tuple[str, TableDef], ...]  # (view, table), in the stream's source order
    frames: tuple[DataFrame, ...]  # each source's own changes (stream.rows), in the same order


@dataclass
class BuiltQuery:
    result: DataFrame  # the query's own columns (a batch frame over empty tables for a changelog query)
    sources: dict[str, TableDef] = field(default_factory=dict)  # view name -> table
    frames: dict[str, DataFrame] = field(default_factory=dict)  # view name -> the frame registered
    dead_letters: list[Tapped] = field(default_factory=list)
    changelog: ChangelogPlan | None = None
    views: dict[str, DataFrame] = field(default_factory=dict)  # a changelog query: view name -> its batch rows
    lookups: list[Marker] = field(default_factory=list)  # where its lookup tables go in its plan (jobs/lookup/)

    def streams(self) -> dict[str, TableDef]:
        """The tables the query reads as streams (view name -> table): its sources but its lookup tables."""
        return {view: table for view, table in self.sources.items() if not is_lookup(table)}


@dataclass
class BuiltJob:
    output: DataFrame  # conformed to the target, metadata columns added (a changelog query: its change stream)
    target: TableDef
    query: BuiltQuery
    result: DataFrame | None = None  # the query's result conformed to the target, without metadata


class _Sources:
    """Registers each declared table once per build, as a view over its valid rows."""

    def __init__(
        self,
        spark: SparkSession,
        catalog: Catalog,
        env: Mapping[str, str],
        live: bool,
        reuse: BuiltQuery | None = None,
        starts: Starts | None = None,
    ):
        self.spark = spark
        self.reuse = reuse
        self.starts = starts or {}
        self.catalog = catalog
        self.env = env
        self.live = live
        self.frames: dict[str, DataFrame] = {}
        self.tables: dict[str, TableDef] = {}
        self.dead_letters: list[Tapped] = []
        self.views: dict[str, DataFrame] = {}
        self.lookups: list[Marker] = []

    def register(self, table: TableDef) -> DataFrame:
        view = view_name(table)
        if view in self.frames:
            return self.frames[view]
        if table.changelog:
            raise UserError.of("CHANGELOG_QUERY_NOT_SQL", table=table.name)
        if is_lookup(table):
            return self._lookup(view, table)
        earlier = self.reuse.sources.get(view) if self.reuse else None
        if self.reuse and earlier is not None and earlier.definition() == table.definition():
            # The same relation object for an unchanged table lets Spark compare two queries.
            frame = self.reuse.frames[view]
        elif not self.live:
            sources.require_source(table)
            frame = sources.stand_in(self.spark, table)
        else:
            frame = sources.finish(self._good_rows(table), table)
        frame.createOrReplaceTempView(view)
        self.frames[view] = frame
        self.tables[view] = table
        return frame

    def _lookup(self, view: str, table: TableDef) -> DataFrame:
        """A lookup table: a marker where its snapshot goes (``jobs/lookup/``), joined by broadcast."""
        earlier = self.reuse.sources.get(view) if self.reuse else None
        if (
            self.reuse
            and earlier is not None
            and is_lookup(earlier)
            and data_definition(earlier) == data_definition(table)
        ):
            frame = self.reuse.frames[view]  # the same relation: only how often it is reloaded may differ
        else:
            marker, marker_id = lookup_rule.marker(self.spark, spark_schema(table))
            self.lookups.append(Marker(table, marker, marker_id))
            if self.live:  # until its first snapshot is in, a plan that meets the marker fails: never reads it empty
                lookup_rule.rule(self.spark).put(marker_id, f"lookup table {table.name} is not loaded")
            frame = sources.finish(marker, table)
            if lookup_cache(table.options) == "FULL":
                frame = frame.hint("broadcast")  # a PARTIAL table's join is replaced (jobs/lookup/partial.py)
        frame.createOrReplaceTempView(view)
        self.frames[view] = frame
        self.tables[view] = table
        return frame

    def _good_rows(self, table: TableDef) -> DataFrame:
        """The table's readable records, read live; a table whose records can be malformed is tapped."""
        source = open_source(self.spark, table, self.env, self.starts.get(MAIN, {}).get(table.name))
        if not table.can_dead_letter:
            return source.good(source.rows)
        # Read once: the taps tell which micro-batches hold malformed records (jobs/deadletters.py).
        index = len(self.dead_letters)
        tapped = Tapped(
            source,
            sources.tap_marker(index, sources.ROWS_READ),
            sources.tap_marker(index, sources.ROWS_GOOD),
        )
        self.dead_letters.append(tapped)
        good = tapped.source.good(source.tapped(tapped.rows_read))
        return sources.tap(good, tapped.rows_good)

    def changes(self, table: TableDef) -> DataFrame:
        """A changelog table's changes as a stream (``jobs/changelog/stream.py:rows``); its rows, as the query
        reads them, are a batch view under the table's view name."""
        view = view_name(table)
        earlier = self.reuse.sources.get(view) if self.reuse else None
        if (
            self.reuse
            and earlier is not None
            and earlier.definition() == table.definition()
            and view in self.reuse.views
        ):
            rows = self.reuse.views[view]  # the same relation object: Spark can compare the two queries
        else:
            rows = stream.table_view(self.spark, table)
        rows.createOrReplaceTempView(view)
        self.views[view] = rows
        if not self.live:
            sources.require_source(table)
            frame = stream.stand_in_rows(sources.stand_in(self.spark, table), table)
        else:
            frame = stream.rows(self._good_rows(table), table)
        self.frames[view] = frame
        self.tables[view] = table
        return frame

    def bind_changelog(self, bound: BoundSql, where: Location) -> ChangelogPlan | None:
        """The changelog plan of a query that reads changelog tables (None for one that reads none)."""
        changing = [t for t in bound.tables.values() if t.changelog]
        if not changing:
            return None
        lookups = [t for t in bound.tables.values() if is_lookup(t)]
        if lookups:
            raise UserError.of(
                "CHANGELOG_LOOKUP",
                file=where.file,
                field=where.field,
                line=where.line,
                changing=", ".join(t.name for t in changing),
                lookups=", ".join(t.name for t in lookups),
            )
        growing = [t for t in bound.tables.values() if not t.changelog]
        if growing:
            raise UserError.of(
                "CHANGELOG_MIXED",
                file=where.file,
                field=where.field,
                line=where.line,
                changing=", ".join(t.name for t in changing),
                growing=", ".join(t.name for t in growing),
            )
        views = tuple(bound.tables.items())
        frames = [self.changes(table) for _, table in views]
        return ChangelogPlan(bound.text, stream.changes(frames), views, tuple(frames))

    def bind_sql(self, sql: str, where: Location) -> BoundSql:
        bound = bind(self.spark, sql, self.catalog, where)
        for table in bound.tables.values():
            self.register(table)
        return bound


class _LazyTables(Mapping[str, DataFrame]):
    """``tables['`kafka`.`x`']`` in code snippets; a table is read only when used."""

    def __init__(self, sources_: _Sources):
        self._sources = sources_

    def __getitem__(self, name: str) -> DataFrame:
        table = self._sources.catalog.lookup_name(name)
        if table is None:
            raise KeyError(f"table {name} is not declared; declared: {', '.join(self._sources.catalog.names)}")
        return self._sources.register(table)

    def __iter__(self) -> Iterator[str]:
        return iter(self._sources.catalog.names)

    def __len__(self) -> int:
        return len(self._sources.catalog.tables)


def build_query(
    spark: SparkSession,
    manifest: Manifest,
    catalog: Catalog,
    env: Mapping[str, str],
    *,
    live: bool,
    file: str | None = None,
    line: int | None = None,
    reuse: BuiltQuery | None = None,
    starts: Starts | None = None,
) -> BuiltQuery:
    """The query's result over the declared tables (SQL or a code snippet).

    ``reuse``: an earlier build whose frames serve every table declared the same way,
    so the two results can be compared with ``sameSemantics``.
    """
    registry = _Sources(spark, catalog, env, live, reuse, starts)
    changelog = None
    if manifest.sql is not None:
        where = Location(file, "sql", line, manifest.sql)
        bound = bind(spark, manifest.sql, catalog, where)
        changelog = registry.bind_changelog(bound, where)
        if changelog is None:
            for table in bound.tables.values():
                registry.register(table)
        result = analysed(lambda: spark.sql(bound.text), where, bound)
        if changelog is not None:
            refuse_nondeterministic(result, where)
        elif not result.isStreaming:
            raise UserError.of(
                "LOOKUP_ONLY",
                file=file,
                field="sql",
                line=line,
                tables=", ".join(t.name for t in bound.tables.values()) or "none",
            )
    else:
        result = _run_code(spark, manifest, registry, file, line)
    return BuiltQuery(
        result,
        dict(registry.tables),
        dict(registry.frames),
        registry.dead_letters,
        changelog,
        dict(registry.views),
        list(registry.lookups),
    )


def sql_preview_query(spark: SparkSession, sql: str, catalog: Catalog, env: Mapping[str, str]) -> BuiltQuery:
    """A query given on the command line, over the live sources."""
    registry = _Sources(spark, catalog, env, live=True)
    where = Location("--sql", "sql", None, sql)
    bound = registry.bind_sql(sql, where)
    result = analysed(lambda: spark.sql(bound.text), where, bound)
    return BuiltQuery(
        result, dict(registry.tables), dict(registry.frames), registry.dead_letters, lookups=list(registry.lookups)
    )


def _run_code(
    spark: SparkSession, manifest: Manifest, registry: _Sources, file: str | None, line: int | None
) -> DataFrame:
    filename = f"<{manifest.name} code>"
    where = Location(file, "code", line)

    def table(name: str) -> DataFrame:
        found = registry.catalog.lookup_name(name)
        if found is None:
            raise UserError.of(
                "UNKNOWN_TABLE",
                file=file,
                field="code",
                line=line,
                reason=f"table {name} is not declared",
                hint=f"declared tables: {', '.join(registry.catalog.names)}",
            )
        return registry.register(found)

    def sql(text: str) -> DataFrame:
        inner = Location(file, "code", line, text)
        bound = registry.bind_sql(text, inner)
        return analysed(lambda: spark.sql(bound.text), inner, bound)

    namespace = {"spark": spark, "table": table, "sql": sql, "tables": _LazyTables(registry), "F": F}
    try:
        exec(compile(manifest.code or "", filename, "exec"), namespace)  # the author's own job code
    except (UserError, KeyboardInterrupt):
        raise
    except AnalysisException as error:
        raise UserError.of(
            "SQL_ANALYSIS_ERROR", file=file, field="code", line=line, reason=error.getMessage().splitlines()[0]
        ) from None
    except Exception as error:  # noqa: BLE001 - any failure in user code is reported as theirs
        frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename == filename]
        at = f" at line {frames[-1].lineno} of the code" if frames else ""
        raise UserError.of(
            "CODE_ERROR", file=file, field="code", line=line, error=type(error).__name__, at=at, reason=str(error)
        ) from None
    output = namespace.get("execution_output")
    if not isinstance(output, DataFrame):
        raise UserError.of("CODE_NO_OUTPUT", file=file, field="code", line=line, kind=type(output).__name__)
    if not output.isStreaming:
        raise UserError.of("CODE_NOT_STREAMING", file=file, field="code", line=line)
    return analysed(lambda: output, where)


# Functions whose value depends on when or where they run, not on the tables' rows: a changelog query's
# result is recomputed every micro-batch, and would change with nothing changing in the tables.
NONDETERMINISTIC = {
    "CurrentTimestamp": "current_timestamp()",
    "Now": "now()",
    "CurrentDate": "current_date()",
    "LocalTimestamp": "localtimestamp()",
    "CurrentBatchTimestamp": "current_timestamp()",
    "Rand": "rand()",
    "Randn": "randn()",
    "Uuid": "uuid()",
    "Shuffle": "shuffle()",
    "MonotonicallyIncreasingID": "monotonically_increasing_id()",
    "SparkPartitionID": "spark_partition_id()",
    "InputFileName": "input_file_name()",
}


def refuse_nondeterministic(result: DataFrame, where: Location) -> None:
    """A changelog query must give the same result for the same rows: refuse functions that do not."""
    found = sorted({NONDETERMINISTIC[name] for name in expression_classes(result) if name in NONDETERMINISTIC})
    if found:
        raise UserError.of(
            "CHANGELOG_NONDETERMINISTIC",
            file=where.file,
            field=where.field,
            line=where.line,
            functions=", ".join(found),
        )


def build_job(
    spark: SparkSession,
    manifest: Manifest,
    catalog: Catalog,
    env: Mapping[str, str],
    *,
    live: bool,
    file: str | None = None,
    lines: Mapping[str, int] | None = None,
    starts: Starts | None = None,
    reuse: BuiltQuery | None = None,
) -> BuiltJob:
    """The full output of a job: query result checked against the target, plus metadata.

    A live job writes metadata columns, so its manifest must carry the runner's meta
    section; an analysis (``live=False``) leaves them out: they are literals, which
    change neither what Spark accepts nor what the query keeps in state.
    """
    lines = lines or {}
    target = catalog.lookup_name(manifest.target_table)
    if target is None:
        raise UserError.of(
            "UNKNOWN_TABLE",
            file=file,
            field="target-table",
            line=lines.get("target-table"),
            reason=f"target table {manifest.target_table} is not declared",
            hint=f"declared tables: {', '.join(catalog.names) or 'none'}",
        )
    check_sink(target)
    query_field = "sql" if manifest.sql is not None else "code"
    query = build_query(
        spark, manifest, catalog, env, live=live, file=file, line=lines.get(query_field), starts=starts, reuse=reuse
    )
    partial.check_joins(spark, query.result, query.lookups, file=file, field=query_field, line=lines.get(query_field))
    if target.key in {t.key for t in query.sources.values()}:
        raise UserError.of(
            "TARGET_IS_SOURCE", file=file, field="target-table", line=lines.get("target-table"), table=target.name
        )
    conformed = conform(query.result, target, file=file, field="target-table")
    if query.changelog is not None:
        check_target(target, file=file, line=lines.get("target-table"))
        # The engine adds the metadata columns to the rows it writes (its change sink, jobs/connectors/).
        return BuiltJob(query.changelog.stream, target, query, conformed)
    output = with_metadata(conformed, manifest) if live else conformed
    return BuiltJob(output, target, query, conformed)
