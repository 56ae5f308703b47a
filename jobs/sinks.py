"""Writing a streaming DataFrame's micro-batches to a declared table.

filesystem: Spark's file sink (append; exactly once through its _spark_metadata log), with
            batch ids that carry on the table's log (see jobs/filesink.py).
kafka:      the value holds every column (JSON, or Avro: 'format' = 'avro'); the PRIMARY
            KEY columns, as JSON, are the message key, and a keyed sink is written in
            update mode (upsert semantics); at least once, like Spark's Kafka sink: a
            batch replayed after a crash is written again (a keyed topic converges to the
            same latest value per key).
print:      rows logged to stdout, prefixed with the print-identifier.
blackhole:  every row computed, then discarded (what Spark's noop sink does).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming import DataStreamWriter

from jobs import jdbc, kafka, kafka_check
from jobs.filesink import file_sink_writer
from jobs.jvm import java_frame
from jobs.sources import require_connector, require_s3, table_options
from runner.core.avro import value_schema
from runner.core.errors import UserError
from runner.core.tables import TableDef


@dataclass(frozen=True)
class Trigger:
    """How often micro-batches run: every ``interval`` or once over what is available."""

    interval: str | None = None
    available_now: bool = False

    def apply(self, writer: DataStreamWriter) -> DataStreamWriter:
        if self.available_now:
            return writer.trigger(availableNow=True)
        return writer.trigger(processingTime=self.interval or "10 seconds")


def check_sink(target: TableDef) -> None:
    """The target's connector can be written, in a mode it supports."""
    if target.connector == "datagen":
        raise UserError.of(
            "CONNECTOR_NOT_A_SINK", file=target.file, line=target.line, table=target.name, connector=target.connector
        )
    if target.connector == "filesystem" and target.primary_key:
        raise UserError.of("SINK_PRIMARY_KEY_UNSUPPORTED", file=target.file, line=target.line, table=target.name)


def output_mode(target: TableDef) -> str:
    return "update" if target.primary_key else "append"


@dataclass(frozen=True)
class OutputSink:
    """How a job's micro-batches reach its target: every query writes through ``foreachBatch``, so the
    same batch can also set its malformed records aside (``jobs/deadletters.py``)."""

    frame: DataFrame  # what the query streams (for Kafka: the key and value records)
    write: Callable[[DataFrame, int], None]
    mode: str  # append, or update for a keyed target
    committed: Callable[[int], bool] = lambda _batch_id: False  # a replayed batch the sink already holds
    # ``write`` only runs the batch's executed plan (Spark's file sink, the noop sink), so it can take the
    # micro-batch as Spark hands it to its own sinks (``jobs/runtime.py:streamed``).
    runs_plan: bool = False
    changes: Any = None  # a changelog query's engine (jobs/changelog/engine.py), which says what each batch did


def output_sink(
    frame: DataFrame, target: TableDef, env: Mapping[str, str], *, checkpoint: str, query: str
) -> OutputSink:
    """The sink that writes ``frame``'s micro-batches to ``target``; ``query``: the job's identity in a
    database's batch fence (``jobs/jdbc.py``)."""
    check_sink(target)
    spark = frame.sparkSession
    options = table_options(spark, target, env)
    connector = target.connector
    mode = output_mode(target)
    if connector == "filesystem":
        require_s3(spark, options["path"], f"table {target.name}")
        format_options = (
            {"sep": options["csv.field-delimiter"]}
            if (options["format"] == "csv" and "csv.field-delimiter" in options)
            else {}
        )
        writer = file_sink_writer(
            spark,
            checkpoint=checkpoint,
            fmt=options["format"],
            path=options["path"],
            options=format_options,
            partition_by=target.partitioned_by,
        )
        return OutputSink(frame, writer, mode, writer.committed, runs_plan=True)
    if connector == "jdbc":
        db = jdbc.database(target, options)
        writer = jdbc.Writer(target, db, query, jdbc.check_table(target, db))
        columns = [F.col(f"`{c}`") for c in jdbc.output_columns(target)]
        return OutputSink(
            frame,
            lambda batch, batch_id: writer.write(batch_id, batch.select(*columns).toLocalIterator()),
            mode,
            writer.committed,
        )
    if connector in ("kafka", "upsert-kafka"):
        require_connector(spark, target)
        kafka_check.check(spark, target, options)
        producer = kafka.sink_options(target, options)
        return OutputSink(
            kafka_records(frame, target),
            lambda batch, _id: batch.write.format("kafka").options(**producer).save(),
            mode,
        )
    if connector == "print":
        printer = _printer(options.get("print-identifier", target.parts[-1]), int(options.get("print.max-rows", "100")))
        return OutputSink(frame, printer, mode)
    return OutputSink(frame, _discard, mode, runs_plan=True)


def _discard(batch: DataFrame, _batch_id: int) -> None:
    """Spark's noop sink: every row of the batch computed, none kept."""
    java_frame(batch).queryExecution().toRdd().count()


def kafka_records(frame: DataFrame, target: TableDef) -> DataFrame:
    """``key`` (JSON of the primary key, or NULL) and ``value``: the whole row as JSON (in a debezium-json
    table, as the ``after`` of a ``c`` record), or as Avro with the schema derived from the target's columns
    (``runner/core/avro.py``)."""
    prefix = target.options.get("key.fields-prefix", "") if target.connector == "upsert-kafka" else ""
    except_key = target.connector == "upsert-kafka" and target.options.get("value.fields-include") == "EXCEPT_KEY"
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


def _printer(identifier: str, max_rows: int):  # foreachBatch callback
    def print_batch(batch: DataFrame, batch_id: int) -> None:
        rows = batch.limit(max_rows + 1).collect()
        for row in rows[:max_rows]:
            values = ", ".join("NULL" if v is None else str(v) for v in row)
            sys.stdout.write(f"{identifier}> +I[{values}]\n")
        if len(rows) > max_rows:
            sys.stdout.write(f"{identifier}> ... batch {batch_id} has more rows (print.max-rows = {max_rows})\n")
        sys.stdout.flush()

    return print_batch
