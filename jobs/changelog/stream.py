"""Every changelog source of a query as one stream of changes, and the tables' rows as the query reads them.

The stream has SOURCE (which source, by position), DELETE, SEQ and one struct column per
source holding its row (NULL in the other sources' records): one streaming query reads
every source, so one micro-batch holds each source's changes up to the same offsets, and
one checkpoint commits them together.
"""

from __future__ import annotations

import functools
import re

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from jobs.change_records import DELETE, SEQ, SEQ_TYPE
from jobs.changelog.engine import SOURCE, ChangelogSource, row_column
from jobs.schema import spark_schema
from runner.core.tables import TableDef


def rows(frame: DataFrame, table: TableDef) -> DataFrame:
    """A changelog source's good records (physical columns, DELETE, SEQ) with its computed columns, in
    declaration order; no watermark: a changelog query keeps no event-time state."""
    for column in table.columns:
        if column.computed:
            frame = frame.withColumn(column.name, F.expr(column.expression or ""))
    return frame.select(*[F.col(f"`{c.name}`") for c in table.columns], F.col(DELETE), F.col(SEQ))


def stand_in_rows(frame: DataFrame, table: TableDef) -> DataFrame:
    """``rows`` of a stand-in stream (``jobs/sources.py:stand_in``): nothing is read, nothing deletes."""
    plain = frame.select(*[F.col(f"`{c.name}`") for c in table.columns])
    return plain.select("*", F.lit(False).alias(DELETE), F.lit(None).cast(SEQ_TYPE).alias(SEQ))


def table_view(spark: SparkSession, table: TableDef) -> DataFrame:
    """An empty batch frame of the table's rows as the query reads them (computed columns included)."""
    frame = spark.createDataFrame([], spark_schema(table))
    for column in table.columns:
        if column.computed:
            frame = frame.withColumn(column.name, F.expr(column.expression or ""))
    return frame.select(*[F.col(f"`{c.name}`") for c in table.columns])


def changes(frames: list[DataFrame]) -> DataFrame:
    """One stream of the sources' changes (``frames``: each source's ``rows``)."""
    structs = [F.struct(*[F.col(f"`{c}`") for c in f.columns if c not in (DELETE, SEQ)]) for f in frames]
    types = [f.select(s.alias("s")).schema["s"].dataType for f, s in zip(frames, structs, strict=True)]
    parts = []
    for i, frame in enumerate(frames):
        columns = [F.lit(i).alias(SOURCE), F.col(DELETE), F.col(SEQ)]
        for j, kind in enumerate(types):
            columns.append((structs[i] if j == i else F.lit(None).cast(kind)).alias(row_column(j)))
        parts.append(frame.select(*columns))
    return functools.reduce(DataFrame.unionByName, parts)


def sources(stream: DataFrame, views: list[tuple[str, TableDef]]) -> list[ChangelogSource]:
    """The sources of a change stream, with the schema of each one's rows."""
    found = []
    for i, (view, table) in enumerate(views):
        kind = stream.schema[row_column(i)].dataType
        assert isinstance(kind, T.StructType)
        found.append(ChangelogSource(view, table, kind))
    return found


def own_views(
    sql: str, views: tuple[tuple[str, TableDef], ...], suffix: str
) -> tuple[str, list[tuple[str, str, TableDef]]]:
    """The query's SQL over views of its own (``<view>_<suffix>``) and each (view, own view, table): a session
    runs many queries in one Spark session, and two queries over the same table hold its rows at different
    micro-batches."""
    own = re.sub(r"[^a-zA-Z0-9]+", "_", suffix)
    named = [(view, f"{view}_{own}", table) for view, table in views]
    for view, mine, _table in named:
        sql = sql.replace(f"`{view}`", f"`{mine}`")
    return sql, named
