"""How a source's records become its declared columns, and why a record is malformed.

A ``Checks`` says, for one kind of record (a JSON or CSV line, a Kafka value in JSON or
Avro, a changelog record), how the reader's rows become the physical columns and the raw
record, which SQL condition holds for a readable record, and the SQL that says why one is
not. Each connector's reader (``jobs/connectors/``) applies them to the rows it reads
(``jobs/sources.py``); ``jobs/change_records.py`` adds the checks of the records that
insert, update and delete rows.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from jobs import narrowing, sqltext
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
    ``reason`` gives the SQL that says why one could not, over the physical columns at hand.
    A record is parsed against every physical column: a Kafka value is decoded whole, and
    a reader that parses the records itself (``reader_parses``: JSON and CSV files) is asked
    for every column (``Source.tapped``). Only a reader of typed files (Parquet, ORC), whose
    records cannot be malformed but by a NULL, reads no more than the query's columns and
    those declared NOT NULL."""

    columns: Callable[[DataFrame], DataFrame]
    readable: str
    reason: Callable[[Sequence[str]], str]
    helpers: tuple[str, ...] = ()
    origin: tuple[str, ...] = ()  # where a record came from (a Kafka record's topic, partition, offset)
    # A changelog record that deletes its key (SQL, ``jobs/change_records.py``): it carries only the key,
    # so its other columns need not be set even where they are declared NOT NULL.
    deletes: str | None = None
    # The reader parses each record into the physical columns itself (a JSON or CSV file reader): it parses
    # only the columns it is asked for, so it must be asked for all of them.
    reader_parses: bool = False


# Sources whose records always match their schema (datagen, parquet, orc): only NOT NULL is checked.
NO_ERRORS = Checks(lambda frame: frame.withColumn(RAW, F.lit(None).cast("string")), "TRUE", lambda _: "NULL")


CORRUPT = "__sql_runner_corrupt"
# A column of the projection that decodes a record (``spark_partition_id()``, not deterministic: the optimiser
# cannot see through it), which the checks' condition references. Without it the optimiser pushes the condition
# below that projection, the decoding function inlined wherever the condition reads a field, and every record is
# decoded once for the condition and again for its columns; with it, once.
DECODED = "__sql_runner_decoded"
DECODED_ONCE = f"{sqltext.identifier(DECODED)} >= 0"  # holds for every record


def decoded_once() -> Column:
    """The projection's column that keeps the checks above it (:data:`DECODED`)."""
    return F.spark_partition_id().alias(DECODED)


MISFIT = "__sql_runner_misfit"  # why a decoded record is malformed: an integer in it does not fit (Avro)


# A Kafka record's place, kept beside a malformed record in the dead letters (as topic, partition, offset).
KAFKA_ORIGIN = {"topic": "__sql_runner_topic", "partition": "__sql_runner_partition", "offset": "__sql_runner_offset"}
TOMBSTONE = "message has no value (tombstone)"


def origin_columns(frame: DataFrame) -> list:
    """The record's place, under the names the checks carry it by (a frame of bare values has none)."""
    return [F.col(column).alias(alias) for column, alias in KAFKA_ORIGIN.items() if column in frame.columns]


def origin_names(frame: DataFrame) -> list[str]:
    return [alias for column, alias in KAFKA_ORIGIN.items() if column in frame.columns]


def kafka_checks(table: TableDef) -> Checks:
    """Kafka records (binary ``value``) decoded against the declared schema: JSON (a TINYINT read as a
    SMALLINT and narrowed, ``jobs/narrowing.py``), or Avro with the schema derived from the declared columns
    (``runner/core/avro.py``)."""
    if table.value_format == "avro":
        return _avro_checks(table)
    schema = spark_schema(table)
    wide = narrowing.json_type(schema)
    assert isinstance(wide, T.StructType)
    parse_schema = T.StructType([*wide.fields, T.StructField(RAW, T.StringType())])

    def decode(frame: DataFrame) -> DataFrame:
        text = F.col("value").cast("string")
        record = F.from_json(text, parse_schema, {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": RAW})
        fields = [
            narrowing.narrowed(F.col("record").getField(f.name), wide[f.name].dataType, f.dataType) for f in schema
        ]
        corrupt = F.col("record").getField(RAW)
        misfit = narrowing.any_of([m for _, m in fields])
        if misfit is not None:  # parsed, but an integer in it does not fit its declared type
            corrupt = F.coalesce(corrupt, F.when(misfit, F.col(RAW)))
        staged = frame.select(record.alias("record"), text.alias(RAW), decoded_once(), *origin_columns(frame))
        return staged.select(
            *[value.alias(f.name) for (value, _), f in zip(fields, schema, strict=True)],
            corrupt.alias(CORRUPT),
            F.col(RAW),
            F.col(DECODED),
            *origin_names(frame),
        )

    raw, corrupt = sqltext.identifier(RAW), sqltext.identifier(CORRUPT)
    return Checks(
        decode,
        f"{DECODED_ONCE} AND {raw} IS NOT NULL AND {corrupt} IS NULL",
        lambda present: (
            f"CASE WHEN {raw} IS NULL THEN {sqltext.string(TOMBSTONE)} ELSE {json_reason(table, present)} END"
        ),
        helpers=(CORRUPT, DECODED),
        origin=tuple(KAFKA_ORIGIN.values()),
    )


def _avro_checks(table: TableDef) -> Checks:
    """Avro values: a record that does not decode is malformed; its raw value is kept as base64.

    Spark's ``from_avro`` in PERMISSIVE mode gives a record it cannot decode as a row of nulls. A record
    whose fields are all null is only valid where every field is nullable, and then it is encoded as one
    zero byte per field (each union's "null" branch), so a row of nulls from any other value is malformed.
    A TINYINT or SMALLINT is an Avro int: one that does not fit its declared type makes the record malformed
    (``jobs/narrowing.py``), its reason naming the field.
    """
    from pyspark.sql.avro.functions import from_avro

    schema = spark_schema(table)
    wide = narrowing.avro_type(schema)
    assert isinstance(wide, T.StructType)
    avro_schema = json.dumps(value_schema(table))
    all_null = functools.reduce(lambda a, b: a & b, [F.col("record").getField(f.name).isNull() for f in schema.fields])
    if all(f.nullable for f in schema.fields):
        all_null = all_null & (F.col("value") != F.lit(bytearray(len(schema.fields))))
    narrows = wide != schema

    def decode(frame: DataFrame) -> DataFrame:
        record = from_avro(F.col("value"), avro_schema, {"mode": "PERMISSIVE"})
        fields = [(f, F.col("record").getField(f.name), wide[f.name].dataType) for f in schema]
        narrowed = [(f, read, *narrowing.narrowed(read, read_as, f.dataType)) for f, read, read_as in fields]
        misfit = narrowing.any_of([m for *_, m in narrowed])
        said = [F.when(m, wrong_type_column(f, read)) for f, read, _, m in narrowed if m is not None]
        return frame.select(
            record.alias("record"), F.col("value"), F.base64("value").alias(RAW), decoded_once(), *origin_columns(frame)
        ).select(
            *[value.cast(f.dataType).alias(f.name) for f, _, value, _ in narrowed],
            F.when(all_null if misfit is None else all_null | misfit, F.lit(True)).alias(CORRUPT),
            F.col(RAW),
            F.col(DECODED),
            *([F.concat_ws("; ", *said).alias(MISFIT)] if narrows else []),
            *origin_names(frame),
        )

    raw, corrupt, misfit = sqltext.identifier(RAW), sqltext.identifier(CORRUPT), sqltext.identifier(MISFIT)
    malformed = sqltext.string(
        "malformed Avro: the value does not decode with the schema derived from the declared columns"
    )
    why = f"CASE WHEN {misfit} != '' THEN {misfit} ELSE {malformed} END" if narrows else malformed
    return Checks(
        decode,
        f"{DECODED_ONCE} AND {raw} IS NOT NULL AND {corrupt} IS NULL",
        lambda _: f"CASE WHEN {raw} IS NULL THEN {sqltext.string(TOMBSTONE)} ELSE {why} END",
        helpers=(CORRUPT, MISFIT, DECODED) if narrows else (CORRUPT, DECODED),
        origin=tuple(KAFKA_ORIGIN.values()),
    )


def reader_schema(table: TableDef, fmt: str) -> T.StructType:
    """The schema a JSON or CSV file reader is given: the physical columns, a TINYINT in JSON as a SMALLINT
    (``jobs/narrowing.py``; the CSV reader reads one as it should), and RAW for a record it cannot parse."""
    schema = spark_schema(table)
    read_as = narrowing.json_type(schema) if fmt == "json" else schema
    assert isinstance(read_as, T.StructType)
    return T.StructType([*read_as.fields, T.StructField(RAW, T.StringType())])


def reader_checks(table: TableDef, fmt: str, options: Mapping[str, str]) -> Checks:
    """Checks of JSON or CSV files, which Spark's reader parses into the physical columns (PERMISSIVE, the raw
    record in RAW when it does not parse; ``reader_schema``). ``options``: the CSV reader's
    (``jobs/connectors/filesystem.py:csv_reader_options``)."""
    if fmt == "json":
        reason: Callable[[Sequence[str]], str] = functools.partial(json_reason, table)
        return Checks(_json_file_columns(table), f"{sqltext.identifier(RAW)} IS NULL", reason, reader_parses=True)
    reason = functools.partial(csv_reason, table, options)
    return Checks(lambda frame: frame, f"{sqltext.identifier(RAW)} IS NULL", reason, reader_parses=True)


def _json_file_columns(table: TableDef) -> Callable[[DataFrame], DataFrame]:
    """The JSON file reader's rows as the physical columns: each TINYINT, read as a SMALLINT, narrowed. A record
    holding one that does not fit was parsed, so the reader kept no text of it: its RAW is the JSON of its
    columns as read, as a record with a NOT NULL column missing gets (``sources._with_error``), and a record
    with RAW is malformed."""
    schema = spark_schema(table)
    wide = narrowing.json_type(schema)
    assert isinstance(wide, T.StructType)
    if wide == schema:
        return lambda frame: frame

    def columns(frame: DataFrame) -> DataFrame:
        fitted = [
            (f.name, *narrowing.narrowed(F.col(sqltext.identifier(f.name)), wide[f.name].dataType, f.dataType))
            for f in schema
        ]
        misfit = narrowing.any_of([m for *_, m in fitted])
        assert misfit is not None
        as_read = F.to_json(F.struct(*[F.col(sqltext.identifier(f.name)) for f in schema]))
        narrowed = {name: value for name, value, m in fitted if m is not None}
        return frame.withColumns({**narrowed, RAW: F.coalesce(F.col(RAW), F.when(misfit, as_read))})

    return columns


def json_reason(table: TableDef, present: Sequence[str], text: str | None = None) -> str:
    """Why a JSON record was rejected: not JSON at all, or which of the ``present`` fields are not of their
    declared type (SQL). ``text``: SQL of the JSON object holding the fields (by default RAW, the record)."""
    raw = sqltext.identifier(RAW)
    record = raw if text is None else text
    as_map = f"from_json({record}, 'map<string,string>')"
    field_errors = []
    for f in (f for f in spark_schema(table).fields if f.name in present):
        value = f"{as_map}[{sqltext.string(f.name)}]"
        column_null = f"{value} IS NOT NULL AND {sqltext.identifier(f.name)} IS NULL"
        if isinstance(f.dataType, T.StructType | T.ArrayType | T.MapType):
            # A nested value with a malformed part can be read as what could be read of it (a struct of NULLs),
            # not as NULL: the field alone is parsed again, and it is malformed when that fails. One that parses
            # but holds a TINYINT that does not fit is NULL (jobs/narrowing.py).
            read_as = T.StructField(f.name, narrowing.json_type(f.dataType), f.nullable, f.metadata)
            alone = T.StructType([read_as, T.StructField(RAW, T.StringType())])
            options = f"map('mode', 'PERMISSIVE', 'columnNameOfCorruptRecord', {sqltext.string(RAW)})"
            wrong_type = f"from_json({record}, {sqltext.string(alone.json())}, {options}).{raw} IS NOT NULL"
            if narrowing.json_type(f.dataType) != f.dataType:
                wrong_type = f"{wrong_type} OR ({column_null})"
        else:
            wrong_type = column_null
        field_errors.append(f"CASE WHEN {wrong_type} THEN {_wrong_type_message(f, value)} END")
    detail = f"concat_ws('; ', {', '.join(field_errors)})"
    return (
        f"CASE WHEN {as_map} IS NULL THEN 'malformed JSON: not a JSON object' WHEN {detail} != '' THEN {detail} "
        "ELSE 'record does not match the declared schema' END"
    )


def csv_reason(table: TableDef, options: Mapping[str, str], present: Sequence[str]) -> str:
    """Why a CSV line was rejected: it does not hold the declared number of fields, or which of the ``present``
    fields are not of their declared type (SQL). ``options``: the reader's (``sep``, ``quote``, ``nullValue``),
    to split the line again as it was read, every field as text."""
    raw = sqltext.identifier(RAW)
    schema = spark_schema(table)
    as_text = T.StructType(
        [*(T.StructField(f.name, T.StringType()) for f in schema.fields), T.StructField(RAW, T.StringType())]
    )
    settings = {
        **{k: v for k, v in options.items() if k != "header"},
        "mode": "PERMISSIVE",
        "columnNameOfCorruptRecord": RAW,
    }
    pairs = ", ".join(f"{sqltext.string(k)}, {sqltext.string(v)}" for k, v in settings.items())
    fields = f"from_csv({raw}, {sqltext.string(as_text.json())}, map({pairs}))"
    field_errors = []
    for f in (f for f in schema.fields if f.name in present):
        # The reader keeps what it could read of a malformed line: a field it could not read is NULL.
        text = f"{fields}.{sqltext.identifier(f.name)}"
        wrong_type = f"{text} IS NOT NULL AND {sqltext.identifier(f.name)} IS NULL"
        field_errors.append(f"CASE WHEN {wrong_type} THEN {_wrong_type_message(f, text)} END")
    detail = f"concat_ws('; ', {', '.join(field_errors)})"
    count = sqltext.string(f"CSV line does not hold the {len(schema.fields)} declared fields")
    return (
        f"CASE WHEN {fields}.{raw} IS NOT NULL THEN {count} WHEN {detail} != '' THEN {detail} "
        "ELSE 'CSV line does not match the declared columns' END"
    )


def _wrong_type_message(field: T.StructField, value: str) -> str:
    """SQL: ``field 'name': <value> is not a valid TYPE``, ``value`` the field's text (SQL)."""
    before, after = _wrong_type_words(field)
    return f"concat({sqltext.string(before)}, {value}, {sqltext.string(after)})"


def wrong_type_column(field: T.StructField, value: Column) -> Column:
    """``field 'name': <value> is not a valid TYPE`` of a decoded ``value`` (a nested one as JSON)."""
    nested = isinstance(field.dataType, T.StructType | T.ArrayType | T.MapType)
    before, after = _wrong_type_words(field)
    return F.concat(F.lit(before), F.to_json(value) if nested else value.cast("string"), F.lit(after))


def _wrong_type_words(field: T.StructField) -> tuple[str, str]:
    return f"field '{field.name}': ", f" is not a valid {type_sql(field.dataType)}"
