"""A changelog query as incremental operators: each micro-batch costs what changed, not what is held.

The operators are the runner's jar's (``jobs/java/engine/sqlrunner/engine/``), each a ``transformWithState``
keeping its state in the query's state store, all in the one streaming query that reads the sources:

1. the change stream (``jobs/changelog/stream.py``) numbered in micro-batch order (``Numbered``);
2. per source, its changes by PRIMARY KEY become weighted rows (``UpsertNormaliser``): the key's previous row
   retracted (weight -1), its new one added (+1), its last row kept;
3. the query's own optimised plan over the sources' tables, node by node (``Planner``): filters and projections
   as Spark has them, GROUP BY as retracting accumulators (``GroupAggregate``), equi-joins with both sides kept
   by join key (``EquiJoin``). A join side that is a source's table seen through filters and renames, joined by
   its PRIMARY KEY, takes the source's changes itself instead of step 2's rows, and keeps the key's row as the
   normaliser would;
4. the result's rows by the target's key (``KeyedDifference``): an insert, update or delete per changed key.
   Where the plan has at most one row per key and hands a key's old and new rows over together (``Planner.
   keyedWithoutState``), they are paired where they come out (``KeyChanges``), without a shuffle or a copy of
   the target's rows in state.

The sink takes step 4's rows as it takes the recomputing engine's difference (``jobs/changelog/engine.py``).
A query with a shape the operators do not cover (:func:`not_covered` says which) is recomputed instead.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from jobs.change_records import DELETE, SEQ
from jobs.changelog.engine import KIND, ORDER, BatchOutcome, ChangelogSource
from jobs.filesink import HadoopFiles
from jobs.jvm import (
    analysed_plan,
    frame_of,
    java_array,
    java_class,
    java_frame,
    java_query,
    java_session,
    java_type,
    jvm_of,
    scala_list,
)
from runner.core.engine_record import ENGINE_FILE, LAYOUT, incremental_layout, layout_refusal
from runner.core.manifest import CHANGELOG_ENGINE

WEIGHT = "__weight"
ENGINE = "sqlrunner.engine"
CHANGES_READ = "sql_runner_changes_read"  # observed per source: f"{CHANGES_READ}_<position>"


def batch_views(spark: SparkSession, sources: list[ChangelogSource]) -> dict[int, int]:
    """Register each source's view as an empty table the optimiser cannot see is empty (an RDD's rows, not a
    list's: Spark would prune an empty list's plan away); returns each source's RDD id by position."""
    ids = {}
    for index, source in enumerate(sources):
        frame = spark.createDataFrame(spark.sparkContext.emptyRDD(), source.schema)
        frame.createOrReplaceTempView(source.view)
        ids[index] = analysed_plan(frame).rdd().id()
    return ids


def not_covered(spark: SparkSession, result: DataFrame) -> str | None:
    """What in ``result`` (the query over :func:`batch_views`) the incremental operators do not cover, or None."""
    execution = java_frame(result).queryExecution()
    planner = java_class(jvm_of(spark), f"{ENGINE}.Planner")
    return planner.unsupported(execution.analyzed(), execution.optimizedPlan())


def transform(spark: SparkSession, rows: DataFrame, key: list[int], processor: Any, output: T.StructType) -> DataFrame:
    """``rows`` grouped by the fields at ``key`` and transformed with state by ``processor`` into ``output``."""
    key_schema = T.StructType([rows.schema.fields[i] for i in key])
    planner = java_class(jvm_of(spark), f"{ENGINE}.Planner")
    made = planner.transform(
        java_frame(rows),
        java_array(spark, "int", key),
        java_type(spark, key_schema),
        processor,
        java_type(spark, output),
    )
    return frame_of(made, spark)


def numbered(spark: SparkSession, stream: DataFrame) -> DataFrame:
    """The change stream with each change's place in its micro-batch (ORDER)."""
    schema = T.StructType([*stream.schema.fields, T.StructField(ORDER, T.LongType(), False)])
    jvm = jvm_of(spark)
    encoder = java_class(jvm, "org.apache.spark.sql.Encoders").row(java_type(spark, schema))
    return frame_of(java_frame(stream).mapPartitions(java_class(jvm, f"{ENGINE}.Numbered")(), encoder), spark)


def source_changes(spark: SparkSession, frame: DataFrame, index: int, source: ChangelogSource) -> DataFrame:
    """Source ``index``'s changes (``frame``: its own stream, ``jobs/changelog/stream.py:rows``) as the operators
    take them: ``[delete, place, position, order, <columns>...]``. Each source's branch reads only its own stream:
    picking a source's records out of the stream of all of them would read and parse every source's records in
    every branch (the filter that would pick them cannot pass the taps under it, whose conditions are not
    deterministic)."""
    mine = numbered(spark, frame).observe(f"{CHANGES_READ}_{index}", F.count(F.lit(1)).alias("changes"))
    return mine.select(
        F.col(DELETE).alias("delete"),
        F.col(f"{SEQ}.place").alias("place"),
        F.col(f"{SEQ}.position").alias("position"),
        F.col(ORDER).alias("order"),
        *[F.col(f"`{name}`") for name in source.schema.names],
    )


def weighted_rows(spark: SparkSession, mine: DataFrame, index: int, source: ChangelogSource) -> DataFrame:
    """Source ``index``'s changes (:func:`source_changes`) as weighted rows (``[__weight, <columns>...]``)."""
    names = source.schema.names
    key = [4 + names.index(k) for k in source.table.primary_key]
    normaliser = java_class(jvm_of(spark), f"{ENGINE}.UpsertNormaliser")(java_type(spark, source.schema), index)
    output = T.StructType([T.StructField(WEIGHT, T.IntegerType(), False), *source.schema.fields])
    return transform(spark, mine, key, normaliser, output)


def changes_of(
    spark: SparkSession,
    frames: tuple[DataFrame, ...],
    sources: list[ChangelogSource],
    rdd_ids: dict[int, int],
    result: DataFrame,
    key: tuple[str, ...],
    layout: int = LAYOUT,
    record: str | None = None,
    *,
    recorded: bool = False,
) -> DataFrame:
    """The query's changes as its target takes them (KIND, ``before``, ``after``), one streaming DataFrame:
    ``result`` is the query over :func:`batch_views` (every shape of it covered), ``key`` the target's; its
    operators keep their state in ``layout`` (the checkpoint's: :attr:`Choice.layout`). ``record``: a new
    checkpoint (:attr:`Choice.record`), where the layout the planned operators keep is recorded. ``recorded``: the
    layout is the one a checkpoint records (:attr:`Choice.recorded`), whose state a plan that keeps another layout's
    cannot take over (a layout 4 checkpoint without a copy of the target's rows, a plan that needs one): such a
    plan is refused."""
    jvm = jvm_of(spark)
    planner = java_class(jvm, f"{ENGINE}.Planner")(java_session(spark), layout)
    for index, source in enumerate(sources):
        names = source.schema.names
        primary_key = java_array(spark, "int", [names.index(k) for k in source.table.primary_key])
        mine = source_changes(spark, frames[index], index, source)
        weighted = weighted_rows(spark, mine, index, source)
        planner.source(rdd_ids[index], java_frame(weighted), java_frame(mine), primary_key)
    # an aggregate without GROUP BY: a tick per change read, of every source (read again for them)
    ticks = [frame.select(F.lit(0).alias(WEIGHT)) for frame in frames]
    planner.ticks(java_frame(functools.reduce(DataFrame.unionByName, ticks)))
    weighted = frame_of(planner.plan(java_frame(result).queryExecution().optimizedPlan()), spark)
    columns = T.StructType(weighted.schema.fields[1:])
    names = columns.names
    positions = [names.index(k) for k in key]
    together = planner.keyedWithoutState(java_array(spark, "int", positions))
    kept = planner.keptLayout()
    if record is not None:
        record_engine(spark, record, f"incremental {kept}")
    elif recorded and kept != layout:
        raise RuntimeError(
            f"{REFUSAL}: the checkpoint holds the incremental operators' state as layout {layout} keeps it, and this "
            f"query's plan keeps layout {kept}'s (its target keyed by {', '.join(key) or 'no column'})"
        )
    output = T.StructType(
        [
            T.StructField(KIND, T.StringType(), False),
            T.StructField("before", columns, True),
            T.StructField("after", columns, True),
        ]
    )
    if together is not None:
        pairs = java_class(jvm, f"{ENGINE}.KeyChanges")(
            java_array(spark, "int", positions), java_array(spark, "int", list(together)), ", ".join(key)
        )
        encoder = java_class(jvm, "org.apache.spark.sql.Encoders").row(java_type(spark, output))
        return frame_of(java_frame(weighted).mapPartitions(pairs, encoder), spark)
    grouped = [1 + p for p in positions] if key else list(range(1, len(names) + 1))
    difference = java_class(jvm, f"{ENGINE}.KeyedDifference")(
        java_type(spark, columns), ", ".join(key) if key else None
    )
    return transform(spark, weighted, grouped, difference, output)


# What a query with incremental operators needs of its Spark session as it starts (a started query keeps a copy):
# the RocksDB state store (transformWithState keeps its state nowhere else), committing a changelog of what each
# micro-batch changed; and, for a checkpoint on this machine's disk, a LocalFileSystem RocksDB can commit through
# (the raw one the runner's applications use otherwise makes it fail; ``sqlrunner.files.LocalFiles``).
STATE_SETTINGS = {
    "spark.sql.streaming.stateStore.providerClass": (
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
    ),
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    "fs.file.impl": "sqlrunner.files.LocalFiles",
    "fs.file.impl.disable.cache": "true",
}


@dataclass(frozen=True)
class Choice:
    """Which engine a changelog query runs on: the incremental operators (``recomputed`` None), or the query
    recomputed every micro-batch, and why."""

    recomputed: str | None
    rdd_ids: dict[int, int] = field(default_factory=dict)  # the sources' batch views (:func:`batch_views`)
    result: DataFrame | None = None  # the query over them
    layout: int = LAYOUT  # the state layout the incremental operators keep: the checkpoint's, for one it holds
    recorded: bool = False  # the layout is the one the checkpoint records (its operators' state is there)
    record: str | None = None  # a new checkpoint, where :func:`changes_of` records the layout its plan keeps


REFUSAL = "CHANGELOG_ENGINE_OF_CHECKPOINT"  # a refused restore (jobs/control.py): the next plan starts a new version


def checkpoint_engine(spark: SparkSession, checkpoint: str) -> str | None:
    """The engine whose state ``checkpoint`` holds, as recorded (``recompute``, ``incremental <layout>``; None: a
    new checkpoint). One that committed micro-batches without saying is the recomputing engine's: the only one
    before the engine was recorded."""
    files = HadoopFiles(spark)
    recorded = files.read_text(f"{checkpoint.rstrip('/')}/{ENGINE_FILE}")
    if recorded is not None:
        return recorded.strip()
    return "recompute" if files.has_entries(f"{checkpoint.rstrip('/')}/commits") else None


def record_engine(spark: SparkSession, checkpoint: str, engine: str) -> None:
    HadoopFiles(spark).create(f"{checkpoint.rstrip('/')}/{ENGINE_FILE}", engine + "\n", overwrite=True)


def choose_for(
    spark: SparkSession,
    engine: str,
    sources: list[ChangelogSource],
    compute: Callable[[], DataFrame],
    checkpoint: str,
) -> Choice:
    """:func:`choose`, for a run from ``checkpoint``: a checkpoint stays on the engine that made it (the state
    one keeps is not the other's). The recomputing engine's runs on as it is; the incremental engine's, when
    this run could not run it (its jar missing, a shape its operators no longer cover, a manifest asking
    for recompute in the same version) or keeps its state in a layout this release does not read
    (``runner/core/engine_record.py``), is refused: restoring it on the other engine would lose the target's
    rows, and state read as another layout's would give wrong results, so the next deploy starts a new version
    with clean state (a deploy that sees the layout first starts one at once)."""
    made = checkpoint_engine(spark, checkpoint)
    if made == "recompute":
        return Choice("its checkpoint holds the recomputing engine's state, which it keeps until a new version")
    refusal = layout_refusal(made)
    if refusal is not None:
        raise RuntimeError(f"{REFUSAL}: {refusal}")
    chosen = choose(spark, engine, sources, compute)
    layout = incremental_layout(made)
    if layout is not None and chosen.recomputed is not None:
        raise RuntimeError(
            f"{REFUSAL}: the checkpoint holds the incremental engine's state, and this run would be recomputed "
            f"({chosen.recomputed})"
        )
    if made is None and chosen.recomputed is not None:
        record_engine(spark, checkpoint, "recompute")
    elif made is None:
        chosen = replace(chosen, record=checkpoint)  # recorded with the layout its plan keeps (:func:`changes_of`)
    elif layout is not None:
        chosen = replace(chosen, layout=layout, recorded=True)
    return chosen


def choose(
    spark: SparkSession, engine: str, sources: list[ChangelogSource], compute: Callable[[], DataFrame]
) -> Choice:
    """The engine of a changelog query over ``sources`` (``compute()``: its result over their views) whose
    manifest asks for ``engine`` (``runner/core/manifest.py:CHANGELOG_ENGINE``)."""
    if engine != "incremental":
        return Choice(f"sparkProperties sets {CHANGELOG_ENGINE}: {engine}")
    missing = engine_missing(spark)
    if missing is not None:
        return Choice(missing)
    ids = batch_views(spark, sources)
    result = compute()
    why = not_covered(spark, result)
    if why is not None:
        return Choice(f"the incremental operators do not cover {why} yet")
    return Choice(None, ids, result)


def engine_missing(spark: SparkSession) -> str | None:
    """Why the runner's jar cannot run here (None: it can): an application started without it on its classpath."""
    try:
        java_class(jvm_of(spark), "java.lang.Class").forName(f"{ENGINE}.Planner")
    except Exception:  # noqa: BLE001 - py4j raises the JVM's ClassNotFoundException as its own error
        return "the runner's jar (make jars) is not on this application's classpath"
    return None


class IncrementalQuery:
    """A changelog query's micro-batches through the incremental chain (:func:`changes_of`): the sink takes
    each batch's difference, and what the batch read, wrote and holds is kept for the job's status."""

    def __init__(self, sink, sources: list[ChangelogSource]):
        self.sink, self.sources = sink, sources
        self.engine = "incremental"
        self.query: Any = None  # the running query (its executions hold the operators' metrics)
        self.last: Any = None
        self._outcomes: dict[int, Any] = {}

    def bind(self, query: Any) -> None:
        self.query = query

    def outcome(self, batch_id: int):
        """What micro-batch ``batch_id`` did, while it is among the recent ones."""
        return self._outcomes.get(batch_id)

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        # the sink may look at the difference more than once; the operators' state moves on once per batch. All
        # of it is computed before the sink writes any: a key given two rows fails the batch with nothing written
        batch = batch.persist()
        try:
            batch.count()
            # a new version's first micro-batch: the difference is its whole result
            written = self.sink.write(batch, batch_id, replace=batch_id == 0)
        finally:
            batch.unpersist()
        execution = java_query(self.query).lastExecution() if self.query is not None else None
        read, held = _batch_metrics(execution, len(self.sources)) if execution is not None else ({}, {})
        names = [source.table.name for source in self.sources]
        # keys held: a table's normaliser's; a table whose join sides take its changes themselves has none, and its
        # rows in those sides' state are not counted apart from the other side's (no figure rather than a wrong one)
        outcome = BatchOutcome(
            {names[i]: read.get(i, 0) for i in range(len(names))},
            {names[i]: held[i] for i in range(len(names)) if i in held},
            upserts=written.upserts if written else 0,
            deletes=written.deletes if written else 0,
            written=written is not None,
        )
        self.last = self._outcomes[batch_id] = outcome
        for old in [b for b in self._outcomes if b < batch_id - 100]:
            del self._outcomes[old]


def _batch_metrics(execution: Any, count: int) -> tuple[dict[int, int], dict[int, int]]:
    """The changes each source's micro-batch had (observed as the stream is read) and the keys each source's
    normaliser holds after it, by source position."""
    read: dict[int, int] = {}
    observed = execution.observedMetrics()
    for i in range(count):
        if observed.contains(f"{CHANGES_READ}_{i}"):
            read[i] = int(observed.apply(f"{CHANGES_READ}_{i}").getLong(0))
    held: dict[int, int] = {}
    normaliser = f"{ENGINE}.UpsertNormaliser"
    for node in _nodes(execution.executedPlan()):
        if node.getClass().getSimpleName() != "TransformWithStateExec":
            continue
        processor = node.statefulProcessor()
        if processor.getClass().getName() == normaliser:
            held[int(processor.source())] = int(node.metrics().apply("numTotalStateRows").value())
    return read, held


def _nodes(plan: Any) -> list[Any]:
    found = [plan]
    for child in scala_list(plan.children()):
        found.extend(_nodes(child))
    return found
