"""How a source's records become its declared columns, and why a record is malformed.

A ``Checks`` says, for one kind of record (a JSON or CSV line, a Kafka value in JSON or
Avro, a changelog record), how the reader's rows become the physical columns and the raw
record, which SQL condition holds for a readable record, and the SQL that says why one is
not. ``jobs/sources.py`` reads the tables and applies them; ``jobs/change_records.py``
adds the checks of the records that insert, update and delete rows.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from jobs import sqltext
from jobs.schema import spark_schema, type_sql
from runner.core.avro import value_schema
from runner.core.tables import TableDef

RAW = "__sql_runner_raw"
ERROR = "__sql_runner_error"


@dataclass(frozen=True)
class Checks:
    """How a source's rows become its declared columns, and which records are malformed.

    ``columns`` turns the reader's rows into the physical columns, RAW and any helper
    columns; over those, ``readable`` (SQL) holds for a record that could be parsed and
    ``reason`` gives the SQL that says why one could not, over the physical columns at hand
    (a file source reads only those the query uses: Spark prunes the others)."""

    columns: Callable[[DataFrame], DataFrame]
    readable: str
    reason: Callable[[Sequence[str]], str]
    helpers: tuple[str, ...] = ()
    origin: tuple[str, ...] = ()  # where a record came from (a Kafka record's topic, partition, offset)
    # A changelog record that deletes its key (SQL, ``jobs/change_records.py``): it carries only the key,
    # so its other columns need not be set even where they are declared NOT NULL.
    deletes: str | None = None


# Sources whose records always match their schema (datagen, parquet, orc): only NOT NULL is checked.
NO_ERRORS = Checks(lambda frame: frame.withColumn(RAW, F.lit(None).cast("string")), "TRUE", lambda _: "NULL")


CORRUPT = "__sql_runner_corrupt"


# A Kafka record's place, kept beside a malformed record in the dead letters (as topic, partition, offset).
KAFKA_ORIGIN = {"topic": "__sql_runner_topic", "partition": "__sql_runner_partition", "offset": "__sql_runner_offset"}
TOMBSTONE = "message has no value (tombstone)"


def origin_columns(frame: DataFrame) -> list:
    """The record's place, under the names the checks carry it by (a frame of bare values has none)."""
    return [F.col(column).alias(alias) for column, alias in KAFKA_ORIGIN.items() if column in frame.columns]


def origin_names(frame: DataFrame) -> list[str]:
    return [alias for column, alias in KAFKA_ORIGIN.items() if column in frame.columns]


def kafka_checks(table: TableDef) -> Checks:
    """Kafka records (binary ``value``) decoded against the declared schema: JSON, or Avro with the schema
    derived from the declared columns (``runner/core/avro.py``)."""
    if table.value_format == "avro":
        return _avro_checks(table)
    schema = spark_schema(table)
    parse_schema = T.StructType([*schema.fields, T.StructField(RAW, T.StringType())])

    def decode(frame: DataFrame) -> DataFrame:
        text = F.col("value").cast("string")
        record = F.from_json(text, parse_schema, {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": RAW})
        return frame.select(record.alias("record"), text.alias(RAW), *origin_columns(frame)).select(
            *[F.col("record").getField(f.name).alias(f.name) for f in schema.fields],
            F.col("record").getField(RAW).alias(CORRUPT),
            F.col(RAW),
            *origin_names(frame),
        )

    raw, corrupt = sqltext.identifier(RAW), sqltext.identifier(CORRUPT)
    return Checks(
        decode,
        f"{raw} IS NOT NULL AND {corrupt} IS NULL",
        lambda present: (
            f"CASE WHEN {raw} IS NULL THEN {sqltext.string(TOMBSTONE)} ELSE {json_reason(table, present)} END"
        ),
        helpers=(CORRUPT,),
        origin=tuple(KAFKA_ORIGIN.values()),
    )


def _avro_checks(table: TableDef) -> Checks:
    """Avro values: a record that does not decode is malformed; its raw value is kept as base64.

    Spark's ``from_avro`` in PERMISSIVE mode gives a record it cannot decode as a row of nulls. A record
    whose fields are all null is only valid where every field is nullable, and then it is encoded as one
    zero byte per field (each union's "null" branch), so a row of nulls from any other value is malformed.
    """
    from pyspark.sql.avro.functions import from_avro

    schema = spark_schema(table)
    avro_schema = json.dumps(value_schema(table))
    all_null = functools.reduce(lambda a, b: a & b, [F.col("record").getField(f.name).isNull() for f in schema.fields])
    if all(f.nullable for f in schema.fields):
        all_null = all_null & (F.col("value") != F.lit(bytearray(len(schema.fields))))

    def decode(frame: DataFrame) -> DataFrame:
        record = from_avro(F.col("value"), avro_schema, {"mode": "PERMISSIVE"})
        return frame.select(
            record.alias("record"), F.col("value"), F.base64("value").alias(RAW), *origin_columns(frame)
        ).select(
            *[F.col("record").getField(f.name).cast(f.dataType).alias(f.name) for f in schema.fields],
            F.when(all_null, F.lit(True)).alias(CORRUPT),
            F.col(RAW),
            *origin_names(frame),
        )

    raw, corrupt = sqltext.identifier(RAW), sqltext.identifier(CORRUPT)
    malformed = "malformed Avro: the value does not decode with the schema derived from the declared columns"
    return Checks(
        decode,
        f"{raw} IS NOT NULL AND {corrupt} IS NULL",
        lambda _: f"CASE WHEN {raw} IS NULL THEN {sqltext.string(TOMBSTONE)} ELSE {sqltext.string(malformed)} END",
        helpers=(CORRUPT,),
        origin=tuple(KAFKA_ORIGIN.values()),
    )


def json_reason(table: TableDef, present: Sequence[str]) -> str:
    """Why a JSON record was rejected: not JSON at all, or which of the ``present`` fields have the wrong
    type (SQL)."""
    as_map = f"from_json({sqltext.identifier(RAW)}, 'map<string,string>')"
    field_errors = []
    for f in (f for f in spark_schema(table).fields if f.name in present):
        value = f"{as_map}[{sqltext.string(f.name)}]"
        message = ", ".join(
            (sqltext.string(f"field '{f.name}': "), value, sqltext.string(f" is not a valid {type_sql(f.dataType)}"))
        )
        wrong_type = f"{value} IS NOT NULL AND {sqltext.identifier(f.name)} IS NULL"
        field_errors.append(f"CASE WHEN {wrong_type} THEN concat({message}) END")
    detail = f"concat_ws('; ', {', '.join(field_errors)})"
    return (
        f"CASE WHEN {as_map} IS NULL THEN 'malformed JSON: not a JSON object' WHEN {detail} != '' THEN {detail} "
        "ELSE 'record does not match the declared schema' END"
    )
