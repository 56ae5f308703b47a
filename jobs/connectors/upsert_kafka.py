"""Reading and writing ``upsert-kafka`` tables in Spark: as ``kafka`` tables (``kafka.py``), but the
message key is the PRIMARY KEY (JSON, its field names without ``key.fields-prefix``) and the value the
row, or nothing (a tombstone) when the key is deleted. A changelog query writes an insert or update as
the key's new value, a delete as a tombstone."""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

from jobs.change_records import upsert_kafka_checks
from jobs.changelog.engine import KIND
from jobs.connectors.kafka import WITH_NULLS, KafkaChanges, SparkKafka
from jobs.metadata import METADATA_NAMES
from jobs.records import Checks
from runner.core import connectors
from runner.core.manifest import Manifest
from runner.core.tables import TableDef


class SparkUpsertKafka(SparkKafka):
    name = "upsert-kafka"

    def checks(self, table: TableDef) -> Checks:
        return upsert_kafka_checks(table)

    def changes(self, target: TableDef, manifest: Manifest, producer: dict[str, str]) -> KafkaChanges:
        return UpsertKafkaChanges(target, manifest, producer)


class UpsertKafkaChanges(KafkaChanges):
    """An insert or update is the key's new value, a delete a tombstone."""

    def value(self, after_names: list[str]) -> Column:
        target = self.target
        except_key = connectors.named(target.connector).value_excludes_key(target.options)
        fields = [
            F.col("after").getField(n).alias(n) for n in after_names if not (except_key and n in target.primary_key)
        ]
        return F.when(F.col(KIND) == "delete", F.lit(None).cast("string")).otherwise(
            F.to_json(F.struct(*fields, *[F.col(m) for m in METADATA_NAMES]), WITH_NULLS)
        )
