"""Reading and writing ``jdbc`` tables (PostgreSQL) from a job.

Written from the driver, one transaction per micro-batch fenced by its batch id (``jobs/jdbc.py``); a
changelog query's changes are upserted and deleted by the PRIMARY KEY, and the first micro-batch of a
query without state replaces the table's rows, so the table holds exactly the query's result. As a
lookup table: one ``SELECT`` of the declared columns from the driver (psycopg), each cast in the
database to the declared type, so a value that does not fit fails the load with PostgreSQL's own
words instead of reaching the query; or, with ``'lookup.cache' = 'PARTIAL'``, keys looked up from the
executors (``jobs/lookup/partial.py``).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as S

from jobs import jdbc
from jobs.changelog.engine import KIND
from jobs.changelog.sinks import Written
from jobs.connectors.base import LoadFailed, SparkConnector
from jobs.jdbc import ChangeText, Database, TextBlock, first_line, match_column, qualified, quote_identifier
from jobs.metadata import with_metadata
from jobs.schema import spark_schema
from jobs.sinks import OutputSink
from runner.core.errors import UserError
from runner.core.manifest import Manifest
from runner.core.placeholders import resolved_options
from runner.core.tables import TableDef

# How each declared type is read from PostgreSQL (the value is cast there).
_PG_TYPES: dict[type[S.DataType], str] = {
    S.StringType: "text",
    S.LongType: "bigint",
    S.IntegerType: "integer",
    S.ShortType: "smallint",
    S.ByteType: "smallint",
    S.BooleanType: "boolean",
    S.DoubleType: "double precision",
    S.FloatType: "real",
    S.DateType: "date",
    S.TimestampType: "timestamptz",
    S.TimestampNTZType: "timestamp",
    S.BinaryType: "bytea",
}


class SparkJdbc(SparkConnector):
    name = "jdbc"

    def sink(
        self, frame: DataFrame, target: TableDef, options: dict[str, str], *, checkpoint: str, query: str, mode: str
    ) -> OutputSink:
        db = jdbc.database(target, options)
        writer = jdbc.Writer(target, db, query, jdbc.check_table(target, db))
        columns = [F.col(f"`{c}`") for c in jdbc.output_columns(target)]
        return OutputSink(
            frame,
            lambda batch, batch_id: writer.write(batch_id, batch.select(*columns).toLocalIterator()),
            mode,
            writer.committed,
        )

    def change_sink(
        self, spark: SparkSession, target: TableDef, options: dict[str, str], manifest: Manifest, query: str
    ) -> JdbcChanges:
        db = jdbc.database(target, options)
        return JdbcChanges(jdbc.Writer(target, db, query, jdbc.check_table(target, db)), target, manifest)

    def lookup(self, spark: SparkSession, table: TableDef, values: Mapping[str, str]) -> DatabaseRows:
        check_types(table)
        return DatabaseRows(table, jdbc.database(table, self.options(spark, table, values)))

    def check_sink(self, target: TableDef, env: Mapping[str, str]) -> None:
        """The database's own table has what the job writes."""
        jdbc.check_table(target, jdbc.database(target, resolved_options(target, env)))

    def check_lookup(self, table: TableDef, env: Mapping[str, str]) -> None:
        """The lookup table's columns are of types read from PostgreSQL as such, and its database has the table
        with every declared column."""
        check_types(table)
        db = jdbc.database(table, resolved_options(table, env))
        where = {"file": table.file, "line": table.line, "table": table.name}
        try:
            with db.connect(timeout=5) as conn:
                names = columns_in(conn, db, spark_schema(table))
        except Exception as error:  # noqa: BLE001 - psycopg's OperationalError and friends
            raise jdbc.unreachable(table, db, error) from None
        if names == "the table does not exist":
            raise UserError.of("LOOKUP_TABLE_MISSING", where_db=db.where, **where)
        if isinstance(names, str):
            missing = names.removeprefix("no column ")
            raise UserError.of("LOOKUP_COLUMN_MISSING", where_db=db.where, columns=missing, **where)


class JdbcChanges:
    def __init__(self, writer: jdbc.Writer, target: TableDef, manifest: Manifest):
        self.writer, self.target, self.manifest = writer, target, manifest

    def write(self, difference: DataFrame, batch_id: int, *, replace: bool) -> Written | None:
        """One pass over the difference: each change is its kind and the declared output columns (a delete's key
        from its ``before`` row, the rest NULL). The metadata columns, the same in every row of the micro-batch,
        are computed once, as one row of their own, and sent once."""
        deleted = F.col(KIND) == "delete"
        image = F.when(deleted, F.col("before")).otherwise(F.col("after"))
        declared = jdbc.declared_columns(self.target)
        rows = difference.select(F.col(KIND), *[image.getField(n).alias(n) for n in declared])
        constants = with_metadata(difference.sparkSession.sql("SELECT 1 AS __one"), self.manifest).drop("__one")
        metadata = tuple(constants.first())
        text = change_text(rows, list(self.target.primary_key))
        changes = text if text is not None else rows.toLocalIterator()
        counted = self.writer.write_changes(batch_id, changes, metadata, replace=replace)
        return Written(*counted) if counted is not None else None


# The blocks of COPY text a partition of changes makes: the JVM writes each change as a line of PostgreSQL's text
# format and joins the lines into blocks, which Python hands to COPY whole. A change taken into Python as a Row and
# handed to COPY on its own cost about six microseconds (1.1 s of a micro-batch of 176,000 changes,
# bench/results/NOTEBOOK.md). A line's block is its partition's and its text's hash: the same lines make the same
# blocks when Spark computes a partition again (a lost shuffle), so no line is sent twice or lost.
PARTITION_BLOCKS = 64

# Types whose value Spark's cast to text writes as PostgreSQL reads it back: digits, true and false, NaN and
# Infinity, dates as yyyy-MM-dd, a timestamp without time zone as its date and time.
_AS_CAST = (
    S.ByteType,
    S.ShortType,
    S.IntegerType,
    S.LongType,
    S.DecimalType,
    S.BooleanType,
    S.FloatType,
    S.DoubleType,
    S.DateType,
    S.TimestampNTZType,
)


def copy_text(column: Column, dtype: S.DataType) -> Column | None:
    """``column``'s value as COPY's text format gives it to PostgreSQL (NULL stays NULL); None for a type whose
    text is not made here (an ARRAY, MAP or ROW: a query writing one sends its changes as rows)."""
    if isinstance(dtype, S.StringType):
        escaped = column
        for plain, escape in (("\\", "\\\\"), ("\n", "\\n"), ("\r", "\\r"), ("\t", "\\t")):
            escaped = F.replace(escaped, F.lit(plain), F.lit(escape))
        return escaped
    if isinstance(dtype, _AS_CAST):
        return column.cast("string")
    if isinstance(dtype, S.TimestampType):
        # the session time zone's date and time with its offset: the instant itself for a timestamptz column
        # (its seconds too: a zone's offset before its standard time had them, Paris's +00:09:21 until 1911)
        return F.date_format(column, "yyyy-MM-dd HH:mm:ss.SSSSSSxxxxx")
    if isinstance(dtype, S.BinaryType):
        return F.concat(F.lit("\\\\x"), F.hex(column))  # bytea's hex form, its backslash escaped
    return None


def change_text(rows: DataFrame, key: list[str]) -> ChangeText | None:
    """``rows`` (a kind, then the declared columns) as COPY text in blocks, each counted as it is made: one pass
    over ``rows``; None when a column's type has no text made here (:func:`copy_text`)."""
    texts = [copy_text(F.col(f"`{field.name}`"), field.dataType) for field in rows.schema.fields]
    if any(text is None for text in texts):
        return None
    line = F.concat_ws("\t", *[F.coalesce(text, F.lit("\\N")) for text in texts])
    null_key = functools.reduce(lambda a, b: a | b, [F.col(f"`{k}`").isNull() for k in key], F.lit(False))
    block = F.spark_partition_id() * PARTITION_BLOCKS + F.pmod(F.xxhash64(line), F.lit(PARTITION_BLOCKS))
    blocks = (
        rows.select(
            line.alias("line"),
            (F.col(KIND) == "delete").alias("deleted"),
            null_key.alias("null_key"),
            block.alias("block"),
        )
        .groupBy("block")
        .agg(
            F.concat(F.concat_ws("\n", F.collect_list("line")), F.lit("\n")).alias("text"),
            F.count(F.lit(1)).alias("changes"),
            F.count(F.when(F.col("deleted"), 1)).alias("deletes"),
            F.max("null_key").alias("null_keys"),
        )
    )
    return ChangeText(TextBlock(row.text, row.changes, row.deletes, row.null_keys) for row in blocks.toLocalIterator())


def pg_type(dtype: S.DataType) -> str | None:
    """The PostgreSQL type a value of ``dtype`` is read as (cast in the database); None when none is."""
    if isinstance(dtype, S.DecimalType):
        return f"numeric({dtype.precision},{dtype.scale})"
    return _PG_TYPES.get(type(dtype))


def check_types(table: TableDef) -> None:
    """A jdbc lookup table's columns must be of types read from PostgreSQL as such (UserError otherwise)."""
    for field in spark_schema(table).fields:
        if pg_type(field.dataType) is None:
            raise UserError.of(
                "LOOKUP_COLUMN_TYPE",
                file=table.file,
                line=table.line,
                table=table.name,
                column=field.name,
                type=field.dataType.simpleString().upper(),
            )


def columns_in(conn: Any, db: Database, schema: S.StructType) -> dict[str, str] | str:
    """Each declared column's name in the database's table (as PostgreSQL folds names); or what is missing."""
    found = {
        row[0]
        for row in conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = %s AND table_name = %s",
            (db.schema, db.table),
        )
    }
    if not found:
        return "the table does not exist"
    names = {field.name: match_column(field.name, found) for field in schema.fields}
    missing = [name for name, column in names.items() if column is None]
    if missing:
        return f"no column {', '.join(missing)}"
    return {name: str(column) for name, column in names.items()}


class DatabaseRows:
    """A jdbc lookup table's rows: one ``SELECT`` of the declared columns, each cast to its declared type."""

    def __init__(self, table: TableDef, db: Database):
        self.table, self.db = table, db  # the database's settings hold its password: never in a message
        self.schema = spark_schema(table)

    @property
    def where(self) -> str:
        return self.db.where

    def column_names(self) -> dict[str, str]:
        """Each declared column's name in the database's table; LoadFailed if the database cannot say."""
        db = self.db
        try:
            with db.connect(timeout=5) as conn:
                names = columns_in(conn, db, self.schema)
        except Exception as error:  # noqa: BLE001 - psycopg's errors, in one line
            raise LoadFailed(f"PostgreSQL {db.where}: {first_line(error)}") from None
        if isinstance(names, str):
            raise LoadFailed(f"PostgreSQL {db.where}: {names}")
        return names

    def rows(self) -> list[Any]:
        db = self.db
        try:
            with db.connect(timeout=5) as conn:
                names = columns_in(conn, db, self.schema)
                if isinstance(names, str):
                    raise LoadFailed(f"PostgreSQL {db.where}: {names}")
                columns = ", ".join(
                    f"{quote_identifier(names[f.name])}::{pg_type(f.dataType)}" for f in self.schema.fields
                )
                return conn.execute(f"SELECT {columns} FROM {qualified(db)}").fetchall()  # noqa: S608 - quoted names
        except LoadFailed:
            raise
        except Exception as error:  # noqa: BLE001 - psycopg's errors, in one line
            raise LoadFailed(f"PostgreSQL {db.where}: {first_line(error)}") from None
