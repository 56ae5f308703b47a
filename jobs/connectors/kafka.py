"""Reading and writing ``kafka`` tables in Spark, through Spark's own Kafka connector (a jar of the
declared set, ``runner/core/jars.py``), its options mapped from the table's (``jobs/kafka.py``).

Read: each message's value decoded into the declared columns (JSON, Avro, or a debezium-json
change); a new version that continues the previous one starts from the offsets it committed.
Written: the value holds every column (JSON, or Avro: ``'format' = 'avro'``); the PRIMARY KEY
columns, as JSON, are the message key, and a keyed sink is written in update mode (upsert
semantics); at least once, like Spark's Kafka sink: a batch replayed after a crash is written
again (a keyed topic converges to the same latest value per key). A changelog query writes a
debezium-json table as ``{"before", "after", "op"}`` records.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs import change_records, kafka, kafka_admin, kafka_check
from jobs.changelog.engine import KIND
from jobs.changelog.sinks import Written, kinds
from jobs.connectors.base import SparkConnector
from jobs.jvm import spark_configuration
from jobs.metadata import METADATA_NAMES, with_metadata
from jobs.records import Checks, kafka_checks
from jobs.sinks import OutputSink
from jobs.sources import Source, require_feature
from runner.core import connectors
from runner.core.avro import value_schema
from runner.core.manifest import Manifest
from runner.core.placeholders import resolve, resolved_options
from runner.core.starts import KafkaOffsets, Start, kafka_topics
from runner.core.tables import TableDef

# A NULL column is written as null, as Flink's JSON format writes it (a reader tells it from a missing column).
WITH_NULLS = {"ignoreNullFields": "false"}

log = logging.getLogger(__name__)


class SparkKafka(SparkConnector):
    name = "kafka"

    def options(self, spark: SparkSession, table: TableDef, values: Mapping[str, str]) -> dict[str, str]:
        """The table's options over the platform's client defaults (``spark.sqlrunner.kafka.properties.*`` in
        the application's Spark properties)."""
        options = resolved_options(table, values)
        found = spark_configuration(spark).getAllWithPrefix(kafka.PLATFORM_DEFAULTS_PREFIX)
        defaults = {
            key: resolve(value, values, field=f"{kafka.PLATFORM_DEFAULTS_PREFIX}{key}")
            for key, value in ((item._1(), item._2()) for item in found)
        }
        return kafka.with_platform_defaults(options, defaults)

    def source(self, spark: SparkSession, table: TableDef, options: dict[str, str], start: Start | None) -> Source:
        require_jars(spark, table)
        kafka_check.check(spark, table, options)
        reader_options = kafka.source_options(table, options)
        if isinstance(start, KafkaOffsets):
            current = kafka_admin.current_partitions(
                spark, reader_options, kafka_topics(options), options.get("topic-pattern")
            )
            offsets, notes = kafka.complete_offsets(start.offsets, current)
            for note in notes:
                log.info(f"{table.name}: {note}")
            reader_options["startingOffsets"] = json.dumps(offsets)
        frame = spark.readStream.format("kafka").options(**reader_options).load()
        return Source(table, frame, self.checks(table))

    def checks(self, table: TableDef) -> Checks:
        """How a message becomes the declared columns (and when it is malformed)."""
        return change_records.kafka_change_checks(table) if table.changelog else kafka_checks(table)

    def sink(
        self, frame: DataFrame, target: TableDef, options: dict[str, str], *, checkpoint: str, query: str, mode: str
    ) -> OutputSink:
        spark = frame.sparkSession
        require_jars(spark, target)
        kafka_check.check(spark, target, options)
        producer = kafka.sink_options(target, options)
        return OutputSink(
            kafka_records(frame, target),
            lambda batch, _id: batch.write.format("kafka").options(**producer).save(),
            mode,
        )

    def change_sink(
        self, spark: SparkSession, target: TableDef, options: dict[str, str], manifest: Manifest, query: str
    ) -> KafkaChanges:
        require_jars(spark, target)
        kafka_check.check(spark, target, options)
        return self.changes(target, manifest, kafka.sink_options(target, options))

    def changes(self, target: TableDef, manifest: Manifest, producer: dict[str, str]) -> KafkaChanges:
        return KafkaChanges(target, manifest, producer)


def require_jars(spark: SparkSession, table: TableDef) -> None:
    """Fail clearly when the jars a Kafka table needs are not on the classpath: Spark's Kafka connector, and
    spark-avro for Avro values."""
    where = {"file": table.file, "line": table.line, "table": table.name}
    require_feature(spark, "kafka", "KAFKA_CONNECTOR_MISSING", **where)
    if table.value_format == "avro":
        require_feature(spark, "avro", "AVRO_CONNECTOR_MISSING", **where)


def kafka_records(frame: DataFrame, target: TableDef) -> DataFrame:
    """``key`` (JSON of the primary key, or NULL) and ``value``: the whole row as JSON (in a debezium-json
    table, as the ``after`` of a ``c`` record), or as Avro with the schema derived from the target's columns
    (``runner/core/avro.py``)."""
    connector = connectors.named(target.connector)
    prefix = connector.key_prefix(target.options)
    except_key = connector.value_excludes_key(target.options)
    columns = [F.col(f"`{name}`") for name in frame.columns if not (except_key and name in target.primary_key)]
    key = (
        F.to_json(F.struct(*[F.col(f"`{k}`").alias(k.removeprefix(prefix)) for k in target.primary_key]))
        if target.primary_key
        else F.lit(None)
    )
    if target.value_format == "avro":
        from pyspark.sql.avro.functions import to_avro

        value = to_avro(F.struct(*columns), json.dumps(value_schema(target)))
    elif target.value_format == "debezium-json":
        # Each row a debezium insert, as Flink's debezium-json encoder writes an appended or updated row.
        row = F.struct(*columns)
        envelope = F.struct(F.lit(None).alias("before"), row.alias("after"), F.lit("c").alias("op"))
        value = F.to_json(envelope, {"ignoreNullFields": "false"})
    else:
        value = F.to_json(F.struct(*columns))
    return frame.select(key.cast("string").alias("key"), value.alias("value"))


class KafkaChanges:
    """A debezium-json kafka table's changes: each a ``{"before", "after", "op"}`` record, keyed by the
    PRIMARY KEY (``upsert_kafka.py`` writes new values and tombstones instead)."""

    def __init__(self, target: TableDef, manifest: Manifest, producer: dict[str, str]):
        self.target, self.manifest, self.producer = target, manifest, producer

    def write(self, difference: DataFrame, batch_id: int, *, replace: bool) -> Written | None:
        del batch_id, replace  # a replayed batch writes the same values again: the keyed topic ends the same
        difference = difference.persist()
        try:
            return self._write(difference)
        finally:
            difference.unpersist()

    def _write(self, difference: DataFrame) -> Written:
        target = self.target
        prefix = connectors.named(target.connector).key_prefix(target.options)
        image = F.when(F.col(KIND) == "delete", F.col("before")).otherwise(F.col("after"))
        key = (
            F.to_json(F.struct(*[image.getField(k).alias(k.removeprefix(prefix)) for k in target.primary_key]))
            if target.primary_key
            else F.lit(None).cast("string")
        )
        after_names = [n for n in difference.schema["after"].dataType.fieldNames()]
        meta = with_metadata(difference, self.manifest)
        records = meta.select(key.alias("key"), self.value(after_names).alias("value"))
        records.write.format("kafka").options(**self.producer).save()
        return kinds(difference)

    def value(self, after_names: list[str]) -> Column:
        """A change's message value, over the difference with its metadata columns."""
        after = F.struct(
            *[F.col("after").getField(n).alias(n) for n in after_names], *[F.col(m) for m in METADATA_NAMES]
        )
        op = F.when(F.col(KIND) == "insert", F.lit("c")).when(F.col(KIND) == "update", F.lit("u")).otherwise("d")
        before = F.when(F.col(KIND) == "insert", F.lit(None)).otherwise(F.col("before"))
        return F.to_json(
            F.struct(
                before.alias("before"),
                F.when(F.col(KIND) == "delete", F.lit(None)).otherwise(after).alias("after"),
                op.alias("op"),
            ),
            WITH_NULLS,
        )
