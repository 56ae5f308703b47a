"""Targets that take a changelog query's difference: inserts, updates and deletes.

- ``jdbc`` with a PRIMARY KEY: upserts and deletes in one transaction per micro-batch,
  fenced by the batch id (``jobs/jdbc.py``); the first micro-batch of a query without
  state replaces the table's rows, so the table holds exactly the query's result.
- ``upsert-kafka``: an insert or update is the key's new value, a delete a tombstone.
- ``kafka`` with ``'format' = 'debezium-json'``: ``{"before", "after", "op"}`` records.
- ``print``: Flink's notation, ``+I[...]``, ``-U[...]`` / ``+U[...]``, ``-D[...]``.
- ``blackhole``: every change computed, none kept.

Any other target only grows (a file table, a ``kafka`` table of plain records, a ``jdbc``
table without key): a changelog query into it is refused before it runs
(``check_target``), as Flink refuses it.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs import jdbc, kafka, kafka_check
from jobs.changelog.engine import KIND
from jobs.metadata import METADATA_NAMES, with_metadata
from jobs.sources import require_connector, table_options
from runner.core.errors import UserError
from runner.core.manifest import Manifest
from runner.core.tables import TableDef

# A NULL column is written as null, as Flink's JSON format writes it (a reader tells it from a missing column).
WITH_NULLS = {"ignoreNullFields": "false"}


@dataclass(frozen=True)
class Written:
    upserts: int  # rows inserted or updated
    deletes: int  # keys (or rows) deleted


class ChangeSink(Protocol):
    def write(self, difference: DataFrame, batch_id: int, *, replace: bool) -> Written | None:
        """Write a micro-batch's difference (KIND, ``before``, ``after``); None when the sink held it already.
        ``replace``: the first micro-batch of a query without state (the difference is its whole result)."""
        ...


def _kinds(difference: DataFrame) -> Written:
    counts = {row[0]: row[1] for row in difference.groupBy(KIND).count().collect()}
    deletes = counts.get("delete", 0)
    return Written(sum(counts.values()) - deletes, deletes)


def check_target(target: TableDef, *, file: str | None = None, line: int | None = None) -> None:
    """A changelog query can write ``target``: it takes updates and deletes."""
    reason = None
    if target.connector == "filesystem":
        reason = "a file table only grows"
        hint = "write to a jdbc table with a PRIMARY KEY, an upsert-kafka table, or a kafka table in debezium-json"
    elif target.connector == "kafka" and target.value_format != "debezium-json":
        reason = f"a kafka table in {target.value_format} holds records, not updates and deletes"
        hint = "declare the target 'connector' = 'upsert-kafka' with a PRIMARY KEY, or 'format' = 'debezium-json'"
    elif target.connector == "jdbc" and not target.primary_key:
        reason = "a jdbc table without PRIMARY KEY is appended to"
        hint = "declare the PRIMARY KEY of the database table on the target: rows are upserted and deleted by it"
    if reason is not None:
        raise UserError.of(
            "CHANGELOG_TARGET_APPEND_ONLY",
            file=file or target.file,
            line=line,
            table=target.name,
            reason=reason,
            hint=hint,
        )


def change_sink(
    spark: SparkSession, target: TableDef, env: Mapping[str, str], manifest: Manifest, query: str
) -> ChangeSink:
    """The sink of a changelog query writing ``target``; ``query``: the job's identity in a database fence."""
    check_target(target)
    options = table_options(spark, target, env)
    if target.connector == "jdbc":
        db = jdbc.database(target, options)
        return JdbcChanges(jdbc.Writer(target, db, query, jdbc.check_table(target, db)), target, manifest)
    if target.connector in ("kafka", "upsert-kafka"):
        require_connector(spark, target)
        kafka_check.check(spark, target, options)
        return KafkaChanges(target, manifest, kafka.sink_options(target, options))
    if target.connector == "print":
        identifier = options.get("print-identifier", target.parts[-1])
        return PrintChanges(identifier, int(options.get("print.max-rows", "100")))
    return Discard()


class JdbcChanges:
    def __init__(self, writer: jdbc.Writer, target: TableDef, manifest: Manifest):
        self.writer, self.target, self.manifest = writer, target, manifest

    def write(self, difference: DataFrame, batch_id: int, *, replace: bool) -> Written | None:
        """One pass over the difference: each change is its kind and the output columns (a delete's key from
        its ``before`` row, the rest NULL)."""
        deleted = F.col(KIND) == "delete"
        image = F.when(deleted, F.col("before")).otherwise(F.col("after"))
        names = difference.schema["after"].dataType.fieldNames()
        rows = with_metadata(
            difference.select(F.col(KIND), *[image.getField(n).alias(n) for n in names]), self.manifest
        )
        columns = [F.col(KIND), *[F.col(f"`{c}`") for c in jdbc.output_columns(self.target)]]
        counted = self.writer.write_changes(batch_id, rows.select(*columns).toLocalIterator(), replace=replace)
        return Written(*counted) if counted is not None else None


class KafkaChanges:
    """upsert-kafka (new values and tombstones) or a debezium-json kafka table (before, after, op)."""

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
        prefix = target.options.get("key.fields-prefix", "") if target.connector == "upsert-kafka" else ""
        image = F.when(F.col(KIND) == "delete", F.col("before")).otherwise(F.col("after"))
        key = (
            F.to_json(F.struct(*[image.getField(k).alias(k.removeprefix(prefix)) for k in target.primary_key]))
            if target.primary_key
            else F.lit(None).cast("string")
        )
        after_names = [n for n in difference.schema["after"].dataType.fieldNames()]
        meta = with_metadata(difference, self.manifest)
        after = F.struct(
            *[F.col("after").getField(n).alias(n) for n in after_names], *[F.col(m) for m in METADATA_NAMES]
        )
        if target.connector == "upsert-kafka":
            except_key = target.options.get("value.fields-include", "ALL") == "EXCEPT_KEY"
            fields = [
                F.col("after").getField(n).alias(n) for n in after_names if not (except_key and n in target.primary_key)
            ]
            value = F.when(F.col(KIND) == "delete", F.lit(None).cast("string")).otherwise(
                F.to_json(F.struct(*fields, *[F.col(m) for m in METADATA_NAMES]), WITH_NULLS)
            )
        else:
            op = F.when(F.col(KIND) == "insert", F.lit("c")).when(F.col(KIND) == "update", F.lit("u")).otherwise("d")
            before = F.when(F.col(KIND) == "insert", F.lit(None)).otherwise(F.col("before"))
            value = F.to_json(
                F.struct(
                    before.alias("before"),
                    F.when(F.col(KIND) == "delete", F.lit(None)).otherwise(after).alias("after"),
                    op.alias("op"),
                ),
                WITH_NULLS,
            )
        records = meta.select(key.alias("key"), value.alias("value"))
        records.write.format("kafka").options(**self.producer).save()
        return _kinds(difference)


class PrintChanges:
    def __init__(self, identifier: str, max_rows: int):
        self.identifier, self.max_rows = identifier, max_rows

    def write(self, difference: DataFrame, batch_id: int, *, replace: bool) -> Written | None:
        del replace
        rows = difference.collect()
        deletes = sum(1 for row in rows if row[KIND] == "delete")
        for row in rows[: self.max_rows]:
            for sign, image in _signs(row[KIND], row["before"], row["after"]):
                values = ", ".join("NULL" if v is None else str(v) for v in image)
                sys.stdout.write(f"{self.identifier}> {sign}[{values}]\n")
        if len(rows) > self.max_rows:
            sys.stdout.write(f"{self.identifier}> ... batch {batch_id} has more changes (print.max-rows)\n")
        sys.stdout.flush()
        return Written(len(rows) - deletes, deletes)


def _signs(kind: str, before, after) -> list[tuple[str, object]]:
    if kind == "insert":
        return [("+I", after)]
    if kind == "delete":
        return [("-D", before)]
    return [("-U", before), ("+U", after)]


class Discard:
    def write(self, difference: DataFrame, batch_id: int, *, replace: bool) -> Written | None:
        del batch_id, replace
        return _kinds(difference)
