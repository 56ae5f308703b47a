"""Starting a built job's streaming query and watching it run.

A job is one streaming query. Each micro-batch goes through ``BatchWriter``: the output
is written, then the batch's malformed records, if its sources held any, are set aside
(``jobs/deadletters.py``), before Spark commits the batch. Counts come from the taps'
row counts in the batch's plan, one line per micro-batch.

``foreachBatch`` hands its callback the micro-batch wrapped in a new plan over the rows
of the batch's own plan, and writing that plan copies every row once more. A sink that
writes a plan as Spark's own sinks do (the file sink, the noop sink) is given the batch
as Spark hands it to them instead (``streamed``): writing it runs the batch's plan with
nothing in between, so a job's write costs what Spark's own sink costs.

Before the query starts, its session gets the batch-timestamp rule (``jobs/batchtime.py``):
the code Spark generates for a micro-batch is then the same from batch to batch, compiled
once instead of every batch, and its JSON and CSV readers skip the filter checks that could
only ever find nothing to check (``NO_READER_PUSHDOWN``).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from jobs import batchtime, boundary, localfs, sources
from jobs.build import BuiltJob
from jobs.changelog import engine as changelog_engine
from jobs.changelog import incremental, stream
from jobs.changelog.engine import ChangelogQuery
from jobs.connectors import change_sink, output_sink
from jobs.deadletters import OUTPUT_TAP, DeadLetterTable, Taps
from jobs.jvm import frame_of, java_class, java_frame, java_query, jvm_of
from jobs.lookup import refresh as lookup_refresh
from jobs.lookup.refresh import LookupFailed, Lookups
from jobs.sinks import OutputSink, Trigger
from jobs.target_schema import conform
from runner.core import connectors, logs
from runner.core.manifest import chosen_changelog_engine
from runner.core.placeholders import resolved_options
from runner.core.protocol.jobspec import JobSpec

log = logging.getLogger(__name__)


@dataclass
class Counts:
    """Rows written and dead-lettered since the job started."""

    written: int = 0
    dead_lettered: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


# Spark's JSON and CSV readers can take the query's filters and skip converting the rest of a record that
# fails one. The sources a job opens never give them any: every JSON or CSV file source is tapped, and a
# tap is a non-deterministic filter right above the scan, which no filter passes (jobs/build.py);
# ``from_json`` (Kafka records) is never given filters. With pushdown on, the readers still run their
# filter checks on every record, with nothing to check (about 2 % of a JSON filter query's task time):
# off, unless the manifest sets it.
NO_READER_PUSHDOWN = {"spark.sql.json.filterPushdown.enabled": "false", "spark.sql.csv.filterPushdown.enabled": "false"}


def query_name(spec: JobSpec) -> str:
    """The query's name: ``<name>-v<version>``."""
    return f"{spec.manifest.name}-v{spec.manifest.version}"


class BatchWriter:
    """The ``foreachBatch`` callback of a job: its output, then its malformed records."""

    def __init__(
        self, spark: SparkSession, sink: OutputSink, built: BuiltJob, spec: JobSpec, counts: Counts | None, report: bool
    ):
        self.spark, self.sink, self.spec, self.report = spark, sink, spec, report
        self.label = logs.job(spec.manifest.name, spec.manifest.version)
        self.counting = counts is not None
        self.counts = counts or Counts()
        self.dead_letters = [DeadLetterTable(spark, tapped, spec) for tapped in built.query.dead_letters]
        self.query: StreamingQuery | None = None
        self.bound = threading.Event()
        self.boundary = boundary.Boundary()  # passed before a batch writes anything
        self.first = True
        self.tap_places: dict[str, int] = {}  # where the taps are in a batch's plan (jobs/deadletters.py)

    def bind(self, query: StreamingQuery) -> None:
        self.query = query
        boundary.attach(query, self.boundary)
        self.bound.set()

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        self.bound.wait()
        assert self.query is not None
        try:
            self.boundary.enter(batch_id)
        except boundary.StoppedAtBoundary:
            log.info(f"batch {batch_id}: not begun, stopping (it runs on restore)", extra=self.label)
            raise
        execution = java_query(self.query).lastExecution()
        # Only a query's first batch can be a replay the sink already committed.
        replayed = self.first and self.sink.committed(batch_id)
        self.first = False
        if not replayed:
            self.sink.write(streamed(self.spark, batch, execution) if self.sink.runs_plan else batch, batch_id)
        if not self.dead_letters and not self.counting:
            return
        taps = Taps(execution.executedPlan(), self.tap_places)
        changes = self.sink.changes.last if self.sink.changes is not None else None
        if changes is not None:
            written = changes.upserts + changes.deletes if changes.written else 0
        else:
            written = 0 if replayed else (taps.rows(OUTPUT_TAP) or 0)
        dead = sum(table.set_aside(taps, batch_id, replayed=replayed) for table in self.dead_letters)
        with self.counts.lock:
            self.counts.written += written
            self.counts.dead_lettered += dead
        if not self.report:
            return
        label = self.label
        if replayed:
            log.info(f"batch {batch_id}: already written before a restart; dead letters checked", extra=label)
            return
        watermark = int(execution.offsetSeqMetadata().batchWatermarkMs())  # 0: none yet
        at = datetime.fromtimestamp(watermark / 1000, UTC).isoformat(timespec="milliseconds") if watermark else ""
        if changes is not None:
            log.info(f"batch {batch_id}: {changes.summary()}", extra=label)
        else:
            log.info(f"batch {batch_id}: {written} rows written" + (f", watermark {at}" if at else ""), extra=label)
        if dead:
            log.info(f"batch {batch_id}: {dead} malformed records to the dead-letter location", extra=label)


def streamed(spark: SparkSession, batch: DataFrame, execution: object) -> DataFrame:
    """``batch`` as Spark hands a micro-batch to its own sinks: a DataFrame whose plan is the batch's
    executed plan (``execution``, the query's IncrementalExecution), as Spark's MicroBatchExecution builds
    it. Only when ``batch`` is that execution's rows as ``foreachBatch`` wraps them (a LogicalRDD over the
    very RDD of ``execution``); otherwise ``batch`` itself. Such a DataFrame may only be written by a sink
    that writes its executed plan (Spark's file sink, or running it for the noop sink): planning it again
    would plan the streaming query outside its stream."""
    logical = java_frame(batch).logicalPlan()
    if logical.getClass().getSimpleName() != "LogicalRDD" or logical.rdd().id() != execution.toRdd().id():
        return batch
    jvm = jvm_of(spark)
    encoder = java_class(jvm, "org.apache.spark.sql.catalyst.encoders.ExpressionEncoder").apply(
        execution.analyzed().schema()
    )
    return frame_of(java_class(jvm, "org.apache.spark.sql.classic.Dataset")(execution, encoder), spark)


def start(
    spark: SparkSession, built: BuiltJob, spec: JobSpec, env: Mapping[str, str], counts: Counts | None = None
) -> list[StreamingQuery]:
    """Start the job's query; returns it (a list, as callers stop and wait on queries)."""
    manifest = spec.manifest
    sources.require_s3(spark, spec.checkpoint, "the checkpoint")
    sources.require_s3(spark, spec.dead_letter, "the dead-letter location")
    for key, value in {**_source_properties(built, env), **NO_READER_PUSHDOWN}.items():
        if key not in manifest.spark_properties:  # the manifest's own setting wins
            spark.conf.set(key, value)
    batchtime.install(spark, spec.manifest.name, spec.manifest.version)
    trigger = Trigger(interval=manifest.trigger_interval, available_now=spec.once)
    output = sources.tap(built.output, OUTPUT_TAP)
    if built.query.changelog is not None:
        sink = changelog_sink(spark, output, built, spec, env)
    else:
        sink = output_sink(output, built.target, env, checkpoint=spec.checkpoint, query=fence_name(spec))
    writer = BatchWriter(spark, sink, built, spec, counts, report=counts is not None and not spec.once)
    stream = (
        sink.frame.writeStream.queryName(query_name(spec))
        .option("checkpointLocation", spec.checkpoint)
        .outputMode(sink.mode)
        .foreachBatch(writer)
    )
    lookups = None
    if built.query.lookups:
        # Their first snapshots before the query starts: no micro-batch runs without its reference data.
        lookups = Lookups(spark, built.query.lookups, env, logs.job(manifest.name, manifest.version))
        lookups.load_first()
    try:
        with incremental_state(spark, sink):
            query = trigger.apply(stream).start()
    except BaseException:
        if lookups is not None:
            lookups.release()
        raise
    if sink.changes is not None:
        changelog_engine.attach(query, sink.changes)
        if isinstance(sink.changes, incremental.IncrementalQuery):
            sink.changes.bind(query)
    writer.bind(query)
    if lookups is not None:
        lookups.start(query)
    return [query]


_STARTING = threading.Lock()


@contextlib.contextmanager
def incremental_state(spark: SparkSession, sink: OutputSink):
    """While a query with incremental operators starts: the state settings they need in its Spark session
    (``jobs/changelog/incremental.py``), as the started query keeps its own copy; as they were afterwards, for
    the session's other queries."""
    if not isinstance(sink.changes, incremental.IncrementalQuery):
        yield
        return
    with _STARTING:
        kept = {key: spark.conf.get(key, None) for key in incremental.STATE_SETTINGS}
        for key, value in incremental.STATE_SETTINGS.items():
            spark.conf.set(key, value)
        try:
            yield
        finally:
            for key, value in kept.items():
                if value is None:
                    spark.conf.unset(key)
                else:
                    spark.conf.set(key, value)


def fence_name(spec: JobSpec) -> str:
    """The job's identity in a database's batch fence (``jobs/jdbc.py``): its name, query id and version. A
    version's batch ids run on across its restores (its checkpoint carries them); a new version starts from 0."""
    meta = spec.manifest.meta
    query_id = meta.query_id if meta is not None else "-"
    return f"{spec.manifest.name} {query_id} v{spec.manifest.version}"


def changelog_sink(
    spark: SparkSession, output: DataFrame, built: BuiltJob, spec: JobSpec, env: Mapping[str, str]
) -> OutputSink:
    """A changelog query's sink: each micro-batch of changes goes through its engine (``jobs/changelog/``)."""
    plan = built.query.changelog
    assert plan is not None
    target = built.target

    sql, views = stream.own_views(plan.sql, plan.views, f"{spec.manifest.name}_v{spec.manifest.version}")

    def compute() -> DataFrame:
        return conform(spark.sql(sql), target, file=None, field="target-table")

    changelog_sources = stream.sources(plan.stream, [(own, table) for _view, own, table in views])
    sink = change_sink(spark, target, env, spec.manifest, fence_name(spec))
    label = logs.job(spec.manifest.name, spec.manifest.version)
    engine_asked = chosen_changelog_engine(spec.manifest)
    choice = incremental.choose_for(spark, engine_asked, changelog_sources, compute, spec.checkpoint)
    if choice.recomputed is None:
        assert choice.result is not None
        changes = incremental.changes_of(
            spark,
            plan.frames,
            changelog_sources,
            choice.rdd_ids,
            choice.result,
            target.primary_key,
            choice.layout,
            choice.record,
            recorded=choice.recorded,
        )
        log.info("changelog engine: incremental (each micro-batch costs what changed)", extra=label)
        engine = incremental.IncrementalQuery(sink, changelog_sources)
        return OutputSink(changes, engine, "append", changes=engine)
    log.info(f"changelog engine: recomputed every micro-batch: {choice.recomputed}", extra=label)
    for _view, own, table in views:
        stream.table_view(spark, table).createOrReplaceTempView(own)
    engine = ChangelogQuery(
        spark, changelog_sources, compute, target.primary_key, compute().schema, sink, spec.checkpoint
    )
    engine.engine = f"recomputed every micro-batch: {choice.recomputed}"
    return OutputSink(output, engine, "append", changes=engine)


def _source_properties(built: BuiltJob, env: Mapping[str, str]) -> dict[str, str]:
    """Properties that depend on where the job's file sources are (``jobs/localfs.py``)."""
    paths = [
        resolved_options(table, env)[key]
        for table in built.query.sources.values()
        if (key := connectors.named(table.connector).path_option) is not None
    ]
    return localfs.source_properties(paths)


def wait(spark: SparkSession, queries: list[StreamingQuery], *, once: bool) -> None:
    """Block until the queries finish (``once``) or one of them stops; re-raise its failure. A query
    stopped at its boundary (``jobs/boundary.py``) stopped gracefully: that is no failure."""
    try:
        if once:
            for query in queries:
                query.awaitTermination()
        else:
            spark.streams.awaitAnyTermination()
    except StreamingQueryException:
        pass  # which query failed, if any did, is judged below
    finally:
        for query in queries:
            if query.isActive:
                query.stop()
    for query in queries:
        error = query.exception()
        if error is not None and not boundary.stopped_at_boundary(query):
            raise error
        failed = lookup_refresh.failure(query)
        if failed is not None:  # stopped by its lookup tables: a failure, for the restart strategy
            raise LookupFailed(failed)


def lookup_failure(query: StreamingQuery) -> str | None:
    """Why ``query``'s lookup tables failed it (they stop it; Spark reports no error), if they did."""
    return lookup_refresh.failure(query)


def stop_all(queries: list[StreamingQuery]) -> None:
    """Stop each active query; a query that cannot be stopped is logged. Never raises: it runs while a job
    ends, when the JVM may be gone already (a SIGTERM to the process group reaches it too), and then
    every call into it fails, even asking a query its name."""
    for position, query in enumerate(queries, start=1):
        try:
            lookups = lookup_refresh.lookups_of(query)
            if query.isActive:
                query.stop()
            if lookups is not None:
                lookups.stop()
        except Exception as error:  # noqa: BLE001 - keep stopping the others
            said = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            if "stopped SparkContext" in said:
                log.warning(f"query {position}: Spark is shutting down, the query stops with it")
            else:
                log.warning(f"stopping query {position} failed: {said}")
