"""Loading one snapshot of a lookup table: its rows now, cached on the executors.

- ``jdbc`` (PostgreSQL): one ``SELECT`` of the declared columns from the driver (psycopg), each
  cast in the database to the declared type, so a value that does not fit fails the load with
  PostgreSQL's own words instead of reaching the query.
- ``filesystem``: the folder listed and read anew (files added or replaced since the last load are
  seen), in ``FAILFAST`` mode: one malformed record fails the load, as does a JSON TINYINT outside
  -128 to 127 (read as a SMALLINT and narrowed, ``jobs/narrowing.py``).

Either way a row with NULL in a NOT NULL column fails the load. The rows are then held by a
DataFrame over the driver's copy of them, cached: should a cached block be lost, Spark rebuilds
it from that copy, never from a database or folder that may have changed since.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as S

from jobs import narrowing, records, sources, sqltext
from jobs.jdbc import Database, database, first_line, match_column, qualified, quote_identifier, unreachable
from jobs.schema import spark_schema
from runner.core.errors import UserError
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


class LoadFailed(Exception):
    """A snapshot could not be loaded: the reason, in one line without secrets."""


@dataclass(frozen=True)
class Loaded:
    frame: DataFrame  # cached and materialised
    rows: int
    seconds: float  # how long the load took


def pg_type(dtype: S.DataType) -> str | None:
    if isinstance(dtype, S.DecimalType):
        return f"numeric({dtype.precision},{dtype.scale})"
    return _PG_TYPES.get(type(dtype))


def check_types(table: TableDef) -> None:
    """A jdbc lookup table's columns must be of types read from PostgreSQL as such (UserError otherwise)."""
    if table.connector != "jdbc":
        return
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


def check_table(table: TableDef, env: Mapping[str, str]) -> None:
    """A jdbc lookup table's database has the table with every declared column (UserError otherwise): what
    ``validate`` checks before a job is deployed."""
    check_types(table)
    if table.connector != "jdbc":
        return
    db = database(table, resolved_options(table, env))
    where = {"file": table.file, "line": table.line, "table": table.name}
    try:
        with db.connect(timeout=5) as conn:
            names = columns_in(conn, db, spark_schema(table))
    except Exception as error:  # noqa: BLE001 - psycopg's OperationalError and friends
        raise unreachable(table, db, error) from None
    if names == "the table does not exist":
        raise UserError.of("LOOKUP_TABLE_MISSING", where_db=db.where, **where)
    if isinstance(names, str):
        missing = names.removeprefix("no column ")
        raise UserError.of("LOOKUP_COLUMN_MISSING", where_db=db.where, columns=missing, **where)


class Loader:
    """Loads snapshots of one lookup table."""

    def __init__(self, spark: SparkSession, table: TableDef, env: Mapping[str, str]):
        self.spark, self.table = spark, table
        self.options = resolved_options(table, env)  # secrets stay in this object, never in a message
        self.schema = spark_schema(table)
        self.db: Database | None = database(table, self.options) if table.connector == "jdbc" else None

    @property
    def where(self) -> str:
        if self.db is not None:
            return self.db.where
        return self.options.get("path", "")

    def load(self) -> Loaded:
        """A new snapshot, cached; LoadFailed with the reason when the rows cannot be had."""
        began = time.monotonic()
        rows = self._jdbc_rows() if self.db is not None else self._file_rows()
        self._check_not_null(rows)
        frame = self.spark.createDataFrame(rows, self.schema, verifySchema=False).cache()
        try:
            count = frame.count()
        except Exception as error:  # noqa: BLE001 - a value Spark cannot take
            frame.unpersist()
            raise LoadFailed(f"{self.table.name}: {first_line(error)}") from None
        return Loaded(frame, count, time.monotonic() - began)

    def column_names(self) -> dict[str, str]:
        """Each declared column's name in the database's table; LoadFailed if the database cannot say."""
        db = self.db
        assert db is not None
        try:
            with db.connect(timeout=5) as conn:
                names = columns_in(conn, db, self.schema)
        except Exception as error:  # noqa: BLE001 - psycopg's errors, in one line
            raise LoadFailed(f"PostgreSQL {db.where}: {first_line(error)}") from None
        if isinstance(names, str):
            raise LoadFailed(f"PostgreSQL {db.where}: {names}")
        return names

    def _jdbc_rows(self) -> list[tuple[Any, ...]]:
        db = self.db
        assert db is not None
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

    def _file_rows(self) -> list[Any]:
        options = self.options
        path, fmt = options["path"], options["format"]
        read_as = narrowing.json_type(self.schema) if fmt == "json" else self.schema
        assert isinstance(read_as, S.StructType)
        reader = self.spark.read.format(fmt).schema(read_as)
        if fmt in ("json", "csv"):
            reader = reader.option("mode", "FAILFAST")
        if fmt == "csv":
            reader = reader.options(**sources.csv_reader_options(options))
        if "source.path-glob-filter" in options:
            reader = reader.option("pathGlobFilter", options["source.path-glob-filter"])
        try:
            rows, misfit = self._fitted(reader.load(path), read_as)
        except Exception as error:  # noqa: BLE001 - Spark's reason (a malformed record, a missing folder)
            raise LoadFailed(f"{path}: {_spark_reason(error)}") from None
        if misfit:
            raise LoadFailed(f"{path}: {misfit}")
        return rows

    def _fitted(self, frame: DataFrame, read_as: S.StructType) -> tuple[list[Any], str | None]:
        """The rows of ``frame``, each TINYINT read from JSON as a SMALLINT narrowed (``jobs/narrowing.py``), and
        why one does not fit (``field 'name': 200 is not a valid TINYINT``), if one does not."""
        fitted = [
            (f, *narrowing.narrowed(F.col(sqltext.identifier(f.name)), read_as[f.name].dataType, f.dataType))
            for f in self.schema
        ]
        said = [
            F.when(misfit, records.wrong_type_column(f, F.col(sqltext.identifier(f.name))))
            for f, _, misfit in fitted
            if misfit is not None
        ]
        if not said:
            return frame.collect(), None
        rows = frame.select(*[value.alias(f.name) for f, value, _ in fitted], F.concat_ws("; ", *said)).collect()
        return [tuple(row)[:-1] for row in rows], next((row[-1] for row in rows if row[-1]), None)

    def _check_not_null(self, rows: list[Any]) -> None:
        required = [(i, f.name) for i, f in enumerate(self.schema.fields) if not f.nullable]
        for i, name in required:
            nulls = sum(1 for row in rows if row[i] is None)
            if nulls:
                raise LoadFailed(f"{self.table.name}: {nulls} rows have no value in NOT NULL column {name}")


def _spark_reason(error: Exception) -> str:
    """The line of Spark's error that says what was wrong with the files."""
    text = str(error)
    for marker in ("Malformed records are detected", "PATH_NOT_FOUND", "Path does not exist", "FileNotFound"):
        for line in text.splitlines():
            if marker in line:
                return line.strip()[:300]
    return first_line(error)[:300]
