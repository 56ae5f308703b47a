"""The optimizer rule that puts each lookup table's current snapshot where its marker is.

A marker is a relation over an empty RDD of the table's columns (Spark cannot tell it is empty, so
it folds nothing away). The rule finds markers by their RDD's id, and puts in the snapshot the
table's reloader registered for it (``Snapshots.put``) with the marker's own columns, so the plan
above reads the snapshot as it read the marker. A marker with nothing registered, or with a failure
registered (the snapshot grew older than the table allows), fails the plan with that reason: a
query never runs a micro-batch against an empty stand-in or a snapshot it was told to refuse.

The rule is a small Java class (``jobs/java/SqlRunnerLookupTables.java``) compiled in the driver's JVM
(``jobs/jvm.py:compiled_class``); it runs on the driver only. A job that reads a lookup table cannot run
without it, and says so.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from jobs.jvm import add_optimizer_rule, analysed_plan, compiled_class, java_frame, optimizer_rule
from runner.core.errors import UserError

RULE_CLASS = "SqlRunnerLookupTables"


def rule(spark: SparkSession) -> Any:
    """The session's lookup rule, added to its optimizer on first use; a UserError if it cannot be had (a
    query would then read the empty marker: it must not start)."""
    found = optimizer_rule(spark, RULE_CLASS)
    if found is not None:
        return found
    try:
        found = compiled_class(spark, RULE_CLASS).newInstance()
        add_optimizer_rule(spark, found)
    except Exception as error:  # noqa: BLE001 - reported as the reason the query cannot start
        said = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise UserError.of("LOOKUP_RULE_UNAVAILABLE", reason=said) from None
    return found


def marker(spark: SparkSession, schema: T.StructType) -> tuple[DataFrame, int]:
    """An empty relation of ``schema`` to stand where a lookup table's snapshot goes, and its id."""
    frame = spark.createDataFrame(spark.sparkContext.emptyRDD(), schema)
    return frame, int(analysed_plan(frame).rdd().id())


def cached_relation(snapshot: DataFrame) -> Any:
    """The cached relation of ``snapshot`` (cached and materialised already): what the rule puts in."""
    relation = java_frame(snapshot).queryExecution().withCachedData()
    if relation.getClass().getSimpleName() != "InMemoryRelation":
        raise RuntimeError(f"a lookup snapshot is not cached (its plan is a {relation.getClass().getSimpleName()})")
    return relation
