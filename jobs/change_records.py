"""Changelog records: how a record of a table whose rows change becomes a row and a verdict.

Every changelog source gives the same columns (``Checks.columns``): the table's physical
columns holding the row a record carries (for a delete, at least its key), ``DELETE``
(the record removes its key) and ``SEQ`` (where it stands in its source: a Kafka record's
partition and offset, a file line's file), so that the last change to a key within a
micro-batch is the one that counts (within one file, the last line).

- ``upsert-kafka``: the message key is the PRIMARY KEY (JSON, field names without
  ``key.fields-prefix``), the value the row (``value.fields-include`` ALL: every column,
  EXCEPT_KEY: the others); a message without value (a tombstone) deletes the key.
- ``'format' = 'debezium-json'``: ``{"before": {...}, "after": {...}, "op": "c|r|u|d"}``;
  c, r and u make ``after`` the key's row, d deletes the key of ``before``.
- ``'changelog-mode' = 'upsert'`` over json, csv, parquet or a Kafka value: each record is
  its key's latest row; nothing deletes.

A record that cannot be read this way (no ``op``, an unknown one, no image, a key field
missing, a tombstone where the table has no key in its messages) is malformed: it goes to
the dead-letter location with the reason, and the job goes on.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.streaming import DataStreamReader

from jobs import narrowing, sqltext
from jobs.records import (
    CORRUPT,
    DECODED,
    DECODED_ONCE,
    KAFKA_ORIGIN,
    NO_ERRORS,
    RAW,
    TOMBSTONE,
    Checks,
    decoded_once,
    json_reason,
    kafka_checks,
    origin_columns,
    reader_checks,
    reader_schema,
)
from jobs.schema import spark_schema
from runner.core.tables import TableDef

DELETE = "__sql_runner_delete"
SEQ = "__sql_runner_seq"
FILE = "__sql_runner_source_file"
OP = "__sql_runner_op"
KEY_RAW = "__sql_runner_key"
KEY_BAD = "__sql_runner_key_bad"
IMAGE_MISSING = "__sql_runner_image_missing"
# Where a change stands in its source: (file or partition, position in it).
SEQ_TYPE = T.StructType([T.StructField("place", T.StringType()), T.StructField("position", T.LongType())])
OPS = ("c", "r", "u", "d")


def _kafka_seq(frame: DataFrame) -> F.Column:
    return F.struct(
        F.col("partition").cast("string").alias("place"), F.col("offset").cast("long").alias("position")
    ).alias(SEQ)


def _file_seq(frame: DataFrame) -> F.Column:
    # A line's place in its file is its place in the micro-batch's partitions (jobs/changelog/engine.py): a
    # stream cannot number its rows. The rows a micro-batch's dead letters are taken from again may lack the
    # file (jobs/deadletters.py); they need no place.
    place = F.col(FILE) if FILE in frame.columns else F.lit(None).cast("string")
    return F.struct(place.alias("place"), F.lit(None).cast("long").alias("position")).alias(SEQ)


def _debezium_schema(table: TableDef) -> T.StructType:
    row = narrowing.json_type(spark_schema(table))
    return T.StructType(
        [
            T.StructField("before", row),
            T.StructField("after", row),
            T.StructField("op", T.StringType()),
            T.StructField(RAW, T.StringType()),
        ]
    )


def _debezium(table: TableDef, seq: Callable[[DataFrame], F.Column]) -> Checks:
    """Checks of debezium-json records held as text in ``value`` (a Kafka value, or a line of a text file):
    the physical columns are the image the op leaves (``after``, or ``before`` for a delete). A TINYINT in
    either image is read as a SMALLINT and narrowed (``jobs/narrowing.py``): one that does not fit makes the
    record malformed, as a value of the wrong type in either image does."""
    parse = _debezium_schema(table)
    declared = spark_schema(table)
    wide = parse["after"].dataType
    assert isinstance(wide, T.StructType)

    def columns(frame: DataFrame) -> DataFrame:
        text = F.col("value").cast("string")
        record = F.from_json(text, parse, {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": RAW})
        staged = frame.select(
            record.alias("record"), text.alias(RAW), seq(frame), decoded_once(), *origin_columns(frame)
        )
        op = F.col("record").getField("op")
        delete = op == F.lit("d")
        image = F.when(delete, F.col("record").getField("before")).otherwise(F.col("record").getField("after"))
        fields = [narrowing.narrowed(image.getField(f.name), wide[f.name].dataType, f.dataType)[0] for f in declared]
        images = [narrowing.narrowed(F.col("record").getField(side), wide, declared)[1] for side in ("before", "after")]
        corrupt = F.col("record").getField(RAW)
        misfit = narrowing.any_of(images)
        if misfit is not None:  # parsed, but an integer in an image does not fit its declared type
            corrupt = F.coalesce(corrupt, F.when(misfit, F.col(RAW)))
        return staged.select(
            *[value.alias(f.name) for value, f in zip(fields, declared, strict=True)],
            op.alias(OP),
            delete.alias(DELETE),
            image.isNull().alias(IMAGE_MISSING),
            corrupt.alias(CORRUPT),
            F.col(RAW),
            F.col(SEQ),
            F.col(DECODED),
            *[F.col(c) for c in KAFKA_ORIGIN.values() if c in staged.columns],
        )

    raw, corrupt = sqltext.identifier(RAW), sqltext.identifier(CORRUPT)
    op, image_missing = sqltext.identifier(OP), sqltext.identifier(IMAGE_MISSING)
    ops = ", ".join(sqltext.string(o) for o in OPS)
    parsed = f"{raw} IS NOT NULL AND {corrupt} IS NULL"
    key_set = " AND ".join(f"{sqltext.identifier(k)} IS NOT NULL" for k in table.primary_key)
    key_names = ", ".join(table.primary_key)
    image_text = f"from_json({raw}, 'map<string,string>')[CASE WHEN {op} = 'd' THEN 'before' ELSE 'after' END]"

    def reason(present: Sequence[str]) -> str:
        # A record that is a JSON object but holds a value not of its declared type is told by the field of the
        # image the op leaves (a value in the other image, an update's before, by no field).
        return (
            f"CASE WHEN {raw} IS NULL THEN {sqltext.string(TOMBSTONE)} "
            f"WHEN from_json({raw}, 'map<string,string>') IS NULL THEN 'malformed JSON: not a JSON object' "
            f"WHEN {op} IS NULL THEN 'debezium record has no op (c, r, u or d)' "
            f"WHEN {op} NOT IN ({ops}) THEN concat('debezium record has an unknown op: ', {op}) "
            f"WHEN {image_missing} THEN concat('debezium op ', {op}, ' has no ', "
            f"CASE WHEN {op} = 'd' THEN 'before' ELSE 'after' END, ' row') "
            f"WHEN {corrupt} IS NOT NULL THEN {json_reason(table, present, image_text)} "
            f"ELSE {sqltext.string(f'the row has no primary key ({key_names})')} END"
        )

    return Checks(
        columns,
        f"{DECODED_ONCE} AND {parsed} AND {op} IN ({ops}) AND NOT {image_missing} AND {key_set}",
        reason,
        helpers=(OP, IMAGE_MISSING, CORRUPT, FILE, DECODED),
        origin=tuple(KAFKA_ORIGIN.values()),
        deletes=sqltext.identifier(DELETE),
    )


def file_changes(spark: SparkSession, table: TableDef, options: dict[str, str], path: str) -> tuple[DataFrame, Checks]:
    """The rows and checks of a changelog file table (debezium-json lines, or 'changelog-mode' = 'upsert' over
    json, csv or parquet). Each row carries the file it came from (FILE): changes to one key within a
    micro-batch apply in file name order, then line order."""
    fmt = options["format"]
    if table.changelog == "debezium":
        reader = _file_reader(spark.readStream.format("text"), options)
        return _with_file(reader.load(path)), _debezium(table, _file_seq)
    schema = spark_schema(table)
    reader = _file_reader(spark.readStream.format(fmt), options)
    if fmt == "parquet":
        return _with_file(reader.schema(schema).load(path)), _upsert_checks(table, NO_ERRORS, file=True)
    reader = reader.schema(reader_schema(table, fmt))
    reader = reader.option("mode", "PERMISSIVE").option("columnNameOfCorruptRecord", RAW)
    names = (
        ("csv.field-delimiter", "sep"),
        ("csv.quote-character", "quote"),
        ("csv.null-literal", "nullValue"),
        ("csv.header", "header"),
    )
    csv_options = {spark_name: options[ours] for ours, spark_name in names if fmt == "csv" and ours in options}
    reader = reader.options(**csv_options)
    checks = reader_checks(table, fmt, csv_options)
    return _with_file(reader.load(path)), _upsert_checks(table, checks, file=True)


def _file_reader(reader: DataStreamReader, options: dict[str, str]) -> DataStreamReader:
    if "source.max-files-per-trigger" in options:
        reader = reader.option("maxFilesPerTrigger", options["source.max-files-per-trigger"])
    if "source.path-glob-filter" in options:
        reader = reader.option("pathGlobFilter", options["source.path-glob-filter"])
    return reader


def _with_file(frame: DataFrame) -> DataFrame:
    return frame.select("*", F.col("_metadata.file_path").alias(FILE))


def _upsert_checks(table: TableDef, checks: Checks, *, file: bool) -> Checks:
    """``checks``, each readable record an upsert of its key; a record without its key is malformed."""
    key_set = " AND ".join(f"{sqltext.identifier(k)} IS NOT NULL" for k in table.primary_key)
    key_names = ", ".join(table.primary_key)

    def columns(frame: DataFrame) -> DataFrame:
        decoded = checks.columns(frame)
        seq = _file_seq(frame) if file else _kafka_seq_of_origin()
        return decoded.select("*", F.lit(False).alias(DELETE), seq)

    def reason(present) -> str:
        return (
            f"CASE WHEN NOT ({checks.readable}) THEN {checks.reason(present)} "
            f"ELSE {sqltext.string(f'the row has no primary key ({key_names})')} END"
        )

    return Checks(
        columns,
        f"({checks.readable}) AND {key_set}",
        reason,
        helpers=(*checks.helpers, FILE),
        origin=checks.origin,
        reader_parses=checks.reader_parses,
    )


def _kafka_seq_of_origin() -> F.Column:
    partition, offset = KAFKA_ORIGIN["partition"], KAFKA_ORIGIN["offset"]
    return F.struct(F.col(partition).cast("string").alias("place"), F.col(offset).cast("long").alias("position")).alias(
        SEQ
    )


def kafka_change_checks(table: TableDef) -> Checks:
    """Checks of a changelog ``kafka`` table's records (debezium-json values, or 'changelog-mode' = 'upsert':
    each value the key's whole row); an ``upsert-kafka`` topic's are :func:`upsert_kafka_checks`."""
    if table.changelog == "debezium":
        return _debezium(table, _kafka_seq)
    return _upsert_checks(table, kafka_checks(table), file=False)


def upsert_kafka_checks(table: TableDef) -> Checks:
    """upsert-kafka: the key from the message key, the rest from the value; no value deletes the key."""
    prefix = table.options.get("key.fields-prefix", "")
    schema = spark_schema(table)
    keys = [f for f in schema.fields if f.name in table.primary_key]
    key_schema = T.StructType([T.StructField(f.name.removeprefix(prefix), f.dataType) for f in keys])
    except_key = table.options.get("value.fields-include", "ALL") == "EXCEPT_KEY"
    value_fields = [f for f in schema.fields if not (except_key and f.name in table.primary_key)]
    # A TINYINT in the key or the value is read as a SMALLINT and narrowed (jobs/narrowing.py).
    key_wide = narrowing.json_type(key_schema)
    value_wide = narrowing.json_type(T.StructType(value_fields))
    assert isinstance(key_wide, T.StructType) and isinstance(value_wide, T.StructType)
    value_schema = T.StructType([*value_wide.fields, T.StructField(RAW, T.StringType())])

    def columns(frame: DataFrame) -> DataFrame:
        value = F.col("value").cast("string")
        key = F.col("key").cast("string")
        parsed_key = F.from_json(key, key_wide)
        parsed_value = F.from_json(value, value_schema, {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": RAW})
        staged = frame.select(
            parsed_key.alias("k"),
            parsed_value.alias("v"),
            value.alias(RAW),
            key.alias(KEY_RAW),
            _kafka_seq(frame),
            decoded_once(),
            *origin_columns(frame),
        )
        keyed = {
            f.name: narrowing.narrowed(F.col("k").getField(f.name), key_wide[f.name].dataType, f.dataType)[0]
            for f in key_schema.fields
        }
        key_bad = F.col("k").isNull()
        for field in key_schema.fields:
            key_bad = key_bad | keyed[field.name].isNull()  # a key field that does not fit is NULL
        valued = {
            f.name: narrowing.narrowed(F.col("v").getField(f.name), value_wide[f.name].dataType, f.dataType)
            for f in value_fields
        }
        row = []
        for f in schema.fields:
            if f.name in table.primary_key:
                row.append(keyed[f.name.removeprefix(prefix)].alias(f.name))
            else:
                row.append(valued[f.name][0].alias(f.name))
        corrupt = F.col("v").getField(RAW)
        misfit = narrowing.any_of([m for _, m in valued.values()])
        if misfit is not None:  # parsed, but an integer in the value does not fit its declared type
            corrupt = F.coalesce(corrupt, F.when(misfit, F.col(RAW)))
        return staged.select(
            *row,
            F.col(RAW).isNull().alias(DELETE),
            corrupt.alias(CORRUPT),
            key_bad.alias(KEY_BAD),
            F.coalesce(F.col(RAW), F.col(KEY_RAW)).alias(RAW),
            F.col(SEQ),
            F.col(DECODED),
            *[F.col(c) for c in KAFKA_ORIGIN.values() if c in staged.columns],
        )

    raw, corrupt, key_bad = (sqltext.identifier(n) for n in (RAW, CORRUPT, KEY_BAD))
    delete = sqltext.identifier(DELETE)
    key_names = ", ".join(f.name for f in key_schema.fields)

    def reason(present) -> str:
        return (
            f"CASE WHEN {raw} IS NULL THEN 'message has neither key nor value' "
            f"WHEN {key_bad} THEN {sqltext.string(f'message key is not a JSON object holding the key ({key_names})')} "
            f"ELSE {json_reason(table, present)} END"
        )

    return Checks(
        columns,
        f"{DECODED_ONCE} AND {raw} IS NOT NULL AND NOT {key_bad} AND ({delete} OR {corrupt} IS NULL)",
        reason,
        helpers=(CORRUPT, KEY_BAD, DECODED),
        origin=tuple(KAFKA_ORIGIN.values()),
        deletes=delete,
    )
