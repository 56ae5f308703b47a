"""A changelog query recomputed, one micro-batch at a time: apply the changes, compute the query, write the
difference. The engine of the shapes the incremental operators do not cover (``jobs/changelog/incremental.py``),
and of a manifest that asks for it (``spark.sqlrunner.changelog.engine: recompute``).

The streaming query reads every changelog source into one stream of changes
(``jobs/changelog/stream.py``); each micro-batch of it goes through ``ChangelogQuery``:

1. for each source, the batch's changes to a key collapse to its last one (by the
   record's place in its source), and the source's rows become: the previous rows
   without the changed keys, plus the new rows of the keys not deleted;
2. the query's SQL runs in batch over those rows (so it gives exactly what the same
   SQL gives over the tables' current rows: joins, outer joins, every aggregate);
3. its result is compared with the previous result, by the target's PRIMARY KEY (or
   as a multiset of rows, for a target without one): rows new or changed are upserts,
   keys gone are deletes;
4. the sink takes the difference (``jobs/changelog/sinks.py``); then the new version
   of the tables and the result is recorded (``jobs/changelog/state.py``).

Cost per micro-batch: reading and writing each changed source's rows and the result,
and the query over all rows: linear in the keys held, not in the changes. Many changes
per micro-batch amortise it (``scan.max-offsets-per-trigger``, the trigger interval).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from pyspark.sql import DataFrame, Observation, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.streaming import StreamingQuery

from jobs.change_records import DELETE, SEQ
from jobs.changelog.state import StateStore, Version
from jobs.jvm import observed
from runner.core.tables import TableDef

log = logging.getLogger(__name__)

SOURCE = "__sql_runner_source"
KIND = "__sql_runner_kind"  # insert, update, delete
ORDER = "__sql_runner_order"
COUNT = "__sql_runner_count"


def row_column(index: int) -> str:
    return f"__sql_runner_row_{index}"


@dataclass(frozen=True)
class ChangelogSource:
    view: str  # the temporary view the query's SQL reads
    table: TableDef
    schema: T.StructType  # every declared column, computed ones included, as the query sees them


@dataclass
class BatchOutcome:
    """What one micro-batch did."""

    changes: dict[str, int]  # table name -> changes read
    keys: dict[str, int]  # table name -> keys held after the batch
    upserts: int = 0
    deletes: int = 0
    written: bool = True  # False: the sink held the batch already

    def summary(self) -> str:
        read = ", ".join(f"{n} from {t}" for t, n in self.changes.items() if n)
        held = ", ".join(f"{t} {n}" for t, n in self.keys.items())
        held = f"; keys: {held}" if held else ""  # none: every table's rows are in join sides' state (incremental.py)
        if not self.written:
            return f"{sum(self.changes.values())} changes read ({read}); already written before a restart{held}"
        return (
            f"{sum(self.changes.values())} changes read ({read}); {self.upserts} rows upserted, "
            f"{self.deletes} deleted{held}"
        )


class ChangelogQuery:
    """Applies micro-batches of changes to the sources' rows and writes the query's difference to the sink."""

    def __init__(
        self,
        spark: SparkSession,
        sources: list[ChangelogSource],
        compute,  # () -> DataFrame: the query's result (target columns) over the views as registered
        key: tuple[str, ...],
        result_schema: T.StructType,
        sink,  # jobs.changelog.sinks.ChangeSink
        checkpoint: str,
    ):
        self.spark, self.sources, self.compute, self.key = spark, sources, compute, key
        self.result_schema, self.sink = result_schema, sink
        self.store = StateStore(spark, checkpoint)
        self.engine = "recomputed every micro-batch"  # and why, as the job chose it (jobs/runtime.py)
        self.last: BatchOutcome | None = None
        self._outcomes: dict[int, BatchOutcome] = {}

    def outcome(self, batch_id: int) -> BatchOutcome | None:
        """What micro-batch ``batch_id`` did, while it is among the recent ones."""
        return self._outcomes.get(batch_id)

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        # The batch's rows in the order its partitions hold them: a file's lines in line order.
        batch = batch.withColumn(ORDER, F.monotonically_increasing_id()).persist()
        try:
            self.last = self._outcomes[batch_id] = self._apply(batch, batch_id)
            for old in [b for b in self._outcomes if b < batch_id - 100]:
                del self._outcomes[old]
        finally:
            batch.unpersist()

    def _apply(self, batch: DataFrame, batch_id: int) -> BatchOutcome:
        """Each Spark job costs a fixed time whatever its size, so a micro-batch runs few: the count of each
        source's changes (which also caches the batch), one write per changed source, one of the result, and
        the sink's. Keys held and duplicate keys are observed while those jobs run."""
        previous = self.store.latest_before(batch_id)
        counted = {row[0]: row[1] for row in batch.groupBy(SOURCE).count().collect()}
        tables: dict[str, str] = {}
        keys: dict[str, int] = {}
        changes: dict[str, int] = {}
        for index, source in enumerate(self.sources):
            slot = str(index)
            earlier = previous.tables.get(slot) if previous else None
            read = counted.get(index, 0)
            changes[source.table.name] = read
            if read == 0 and earlier and previous:
                tables[slot], keys[slot] = earlier, previous.keys.get(slot, 0)
            else:
                old = self.store.read(earlier, source.schema) if earlier else self.store.empty(source.schema)
                held = Observation()
                rows = _apply_changes(old, _last_changes(batch, index, source), source)
                folder = self.store.folder(batch_id, f"t{index}")
                written = self.store.write(rows.observe(held, F.count(F.lit(1)).alias("rows")), folder)
                tables[slot] = folder
                keys[slot] = int(observed(held, lambda frame=written: {"rows": frame.count()})["rows"])
            self.store.read(tables[slot], source.schema).createOrReplaceTempView(source.view)
        result = self.compute()
        if self.key:
            duplicates = Observation()
            per_key = F.count(F.lit(1)).over(Window.partitionBy(*[F.col(f"`{k}`") for k in self.key]))
            counted_keys = result.withColumn(COUNT, per_key).observe(duplicates, F.max(COUNT).alias("most"))
            result = self.store.write(counted_keys.drop(COUNT), self.store.folder(batch_id, "result"))
            _refuse_duplicates(
                observed(duplicates, lambda: {"most": _most_per_key(result, self.key)})["most"], self.key
            )
        else:
            result = self.store.write(result, self.store.folder(batch_id, "result"))
        before = (
            self.store.read(previous.result, self.result_schema) if previous else self.store.empty(self.result_schema)
        )
        difference = keyed_difference(before, result, self.key) if self.key else multiset_difference(before, result)
        written = self.sink.write(difference, batch_id, replace=previous is None)
        version = Version(batch=batch_id, tables=tables, result=self.store.folder(batch_id, "result"), keys=keys)
        self.store.commit(version)
        return BatchOutcome(
            changes,
            {s.table.name: keys[str(i)] for i, s in enumerate(self.sources)},
            upserts=written.upserts if written else 0,
            deletes=written.deletes if written else 0,
            written=written is not None,
        )


_ATTRIBUTE = "_sql_runner_changelog"


def attach(query: StreamingQuery, engine: ChangelogQuery) -> None:
    """Keep a changelog query's engine with the query object ``jobs/runtime.py`` returns."""
    setattr(query, _ATTRIBUTE, engine)


def changelog_of(query: StreamingQuery) -> ChangelogQuery | None:
    return getattr(query, _ATTRIBUTE, None)


def _last_changes(batch: DataFrame, index: int, source: ChangelogSource) -> DataFrame:
    """Source ``index``'s changes in ``batch``, the last one per key: its row, and DELETE."""
    mine = batch.where(F.col(SOURCE) == index).select(DELETE, SEQ, ORDER, f"{row_column(index)}.*")
    key = [F.col(f"`{k}`") for k in source.table.primary_key]
    order = Window.partitionBy(*key).orderBy(F.col(SEQ).desc(), F.col(ORDER).desc())
    return mine.withColumn("__sql_runner_last", F.row_number().over(order)).where("__sql_runner_last = 1")


def _apply_changes(old: DataFrame, last: DataFrame, source: ChangelogSource) -> DataFrame:
    """``old`` rows without the changed keys, plus the rows of the keys not deleted."""
    key = list(source.table.primary_key)
    changed = last.select(*[F.col(f"`{k}`") for k in key])
    condition = [old[f"`{k}`"].eqNullSafe(changed[f"`{k}`"]) for k in key]
    kept = old.join(changed, on=condition, how="left_anti")
    names = [f.name for f in source.schema.fields]
    added = last.where(~F.col(DELETE)).select(*[F.col(f"`{n}`") for n in names])
    return kept.unionByName(added)


def _most_per_key(result: DataFrame, key: tuple[str, ...]) -> int | None:
    found = result.groupBy(*[F.col(f"`{k}`") for k in key]).count().agg(F.max("count")).collect()
    return found[0][0] if found else None


def _refuse_duplicates(most: int | None, key: tuple[str, ...]) -> None:
    """A keyed target holds one row per key: a result with more fails the micro-batch (before anything is
    written), rather than leave the target with one of them."""
    if most is not None and most > 1:
        raise ValueError(
            f"the query gives {most} rows for one value of the target's PRIMARY KEY ({', '.join(key)}); a keyed "
            "target holds one row per key: group by the key, or declare the key the query's rows have"
        )


def keyed_difference(before: DataFrame, after: DataFrame, key: tuple[str, ...]) -> DataFrame:
    """Rows of ``after`` new or changed against ``before`` (insert, update), and keys of ``before`` that
    ``after`` lacks (delete): KIND, then ``before`` and ``after`` as structs of the result's columns."""
    names = after.columns
    old = before.select(F.struct(*[F.col(f"`{n}`") for n in names]).alias("before"), F.lit(True).alias("o"))
    new = after.select(F.struct(*[F.col(f"`{n}`") for n in names]).alias("after"), F.lit(True).alias("n"))
    condition = [old["before"][k].eqNullSafe(new["after"][k]) for k in key]
    joined = old.join(new, on=condition, how="full_outer")
    kind = (
        F.when(F.col("o").isNull(), F.lit("insert"))
        .when(F.col("n").isNull(), F.lit("delete"))
        .when(~F.col("before").eqNullSafe(F.col("after")), F.lit("update"))
    )
    return joined.select(kind.alias(KIND), "before", "after").where(F.col(KIND).isNotNull())


def multiset_difference(before: DataFrame, after: DataFrame) -> DataFrame:
    """For a target without key: rows ``after`` has more of (insert) and rows ``before`` has more of (delete)."""
    names = after.columns
    as_struct = F.struct(*[F.col(f"`{n}`") for n in names])
    typed = F.lit(None).cast(after.select(as_struct.alias("s")).schema["s"].dataType)
    inserted = after.exceptAll(before).select(
        F.lit("insert").alias(KIND), typed.alias("before"), as_struct.alias("after")
    )
    deleted = before.exceptAll(after).select(
        F.lit("delete").alias(KIND), as_struct.alias("before"), typed.alias("after")
    )
    return inserted.unionByName(deleted)
