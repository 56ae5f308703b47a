"""The connectors' Spark halves, by name: how a job reads and writes each connector's tables.

Each is one module in this package, registered here under the name its Spark-free half has in
``runner/core/connectors/`` (a test checks both registries hold the same names). The job reads,
writes and loads tables through the functions below, which check the table's role with the core
half first, then ask its connector.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import DataFrame, SparkSession

from jobs.changelog.sinks import ChangeSink, check_target
from jobs.connectors.base import LoadFailed, LookupRows, SparkConnector
from jobs.connectors.blackhole import SparkBlackhole
from jobs.connectors.datagen import SparkDatagen
from jobs.connectors.filesystem import SparkFilesystem
from jobs.connectors.jdbc import SparkJdbc
from jobs.connectors.kafka import SparkKafka
from jobs.connectors.print import SparkPrint
from jobs.connectors.upsert_kafka import SparkUpsertKafka
from jobs.sinks import OutputSink, check_sink, output_mode
from jobs.sources import Source, require_source
from runner.core.manifest import Manifest
from runner.core.starts import Start
from runner.core.tables import TableDef

__all__ = [
    "SPARK_CONNECTORS",
    "LoadFailed",
    "LookupRows",
    "SparkConnector",
    "change_sink",
    "lookup_rows",
    "open_source",
    "output_sink",
    "read_table",
    "spark_connector",
]

SPARK_CONNECTORS: dict[str, SparkConnector] = {
    each.name: each
    for each in (
        SparkFilesystem(),
        SparkDatagen(),
        SparkBlackhole(),
        SparkPrint(),
        SparkKafka(),
        SparkUpsertKafka(),
        SparkJdbc(),
    )
}


def spark_connector(table: TableDef) -> SparkConnector:
    """The Spark half of ``table``'s connector."""
    return SPARK_CONNECTORS[table.connector]


def open_source(spark: SparkSession, table: TableDef, env: Mapping[str, str], start: Start | None = None) -> Source:
    """The table read live as a stream. ``start`` continues a previous version: Kafka offsets to start from,
    or the files to skip because the previous version read them."""
    require_source(table)
    connector = spark_connector(table)
    return connector.source(spark, table, connector.options(spark, table, env), start)


def read_table(spark: SparkSession, table: TableDef, env: Mapping[str, str], start: Start | None = None) -> DataFrame:
    """Streaming frame: physical columns + RAW + ERROR, before watermark and computed columns."""
    return open_source(spark, table, env, start).frame()


def output_sink(
    frame: DataFrame, target: TableDef, env: Mapping[str, str], *, checkpoint: str, query: str
) -> OutputSink:
    """The sink that writes ``frame``'s micro-batches to ``target``; ``query``: the job's identity in a
    database's batch fence (``jobs/jdbc.py``)."""
    check_sink(target)
    connector = spark_connector(target)
    options = connector.options(frame.sparkSession, target, env)
    return connector.sink(frame, target, options, checkpoint=checkpoint, query=query, mode=output_mode(target))


def change_sink(
    spark: SparkSession, target: TableDef, env: Mapping[str, str], manifest: Manifest, query: str
) -> ChangeSink:
    """The sink of a changelog query writing ``target``; ``query``: the job's identity in a database fence."""
    check_target(target)
    connector = spark_connector(target)
    return connector.change_sink(spark, target, connector.options(spark, target, env), manifest, query)


def lookup_rows(spark: SparkSession, table: TableDef, env: Mapping[str, str]) -> LookupRows:
    """Where a lookup table's rows are read from."""
    return spark_connector(table).lookup(spark, table, env)
