"""Declared tables read as streaming DataFrames, with malformed records set aside.

Each connector reads its tables in its own way (``jobs/connectors/``) into a ``Source``: the
rows as its reader gives them, and the checks that make them the declared columns. A source's
rows become the declared columns in one of two ways. ``Source.good`` keeps the records that can
be read against the declared schema, with a cheap check per record (was it parsed, are its NOT
NULL columns set): that is what a job's query reads. ``Source.parse`` adds two columns to every
record: the raw record and, for a malformed one, the reason, spelt out field by field;
``invalid_rows`` of that frame is what goes to the dead-letter location. Both come from the same
two SQL conditions, so a record is good exactly when it has no reason. A malformed record
therefore never fails the job.

A source whose records can be malformed is read once: its rows pass two *taps* (filters
that keep every row they should and that the optimiser cannot move or merge), one over
the rows as read and one over the good rows. Their row counts tell, after each
micro-batch, whether it held malformed records; only then are they taken from the very
rows the first tap saw (``jobs/deadletters.py``). A tap also keeps the query's filters
out of the reader: every record is checked, not only the ones the query keeps, and
against every declared column, whatever columns the query reads, so every query over a
table sets aside the same records. A Kafka record's value is parsed whole; the first tap
over a JSON or CSV file asks the reader for every column (``Source.tapped``), where
Spark would read only those the query uses. A Parquet or ORC file, whose records cannot
be malformed but by a NULL, is read for the query's columns and those declared NOT NULL.
"""

from __future__ import annotations

import atexit
import functools
import re
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs import sqltext
from jobs.jvm import hadoop_configuration, jvm_of
from jobs.records import ERROR, KAFKA_ORIGIN, RAW, Checks, kafka_checks
from jobs.schema import spark_schema
from runner.core import connectors, jars, platform
from runner.core.errors import UserError
from runner.core.tables import TableDef


def has_class(spark: SparkSession, name: str) -> bool:
    jvm = jvm_of(spark)
    loader = jvm.org.apache.spark.util.Utils.getContextOrSparkClassLoader()
    try:
        jvm.java.lang.Class.forName(name, False, loader)
    except Exception:  # noqa: BLE001 - py4j wraps ClassNotFoundException
        return False
    return True


def require_feature(
    spark: SparkSession, feature: str, code: str, *, file: str | None = None, line: int | None = None, **params: str
) -> None:
    """Raise ``code`` when the jars of ``feature`` (``runner/core/jars.py``) are not on the classpath, naming
    the jars the local cache lacks."""
    wanted = jars.FEATURES[feature]
    if has_class(spark, wanted.marker_class):
        return
    absent = jars.missing(jars.SPARK, feature) if jars.cache_dir(jars.SPARK).is_dir() else []
    raise UserError.of(
        code,
        file=file,
        line=line,
        what=wanted.what,
        absent=f" (the jar cache {jars.cache_dir(jars.SPARK)} lacks {', '.join(absent)})" if absent else "",
        fetch=jars.FETCH_COMMAND,
        jars=jars.summary(feature),
        **params,
    ) from None


def require_s3(spark: SparkSession, uri: str, where: str) -> None:
    """Fail clearly when ``uri`` is on S3 through S3A (everywhere but EMR, ``runner/core/platform.py``) and
    hadoop-aws is not on the classpath. ``where``: what is there, for the message."""
    scheme = uri.split("://", 1)[0] if "://" in uri else ""
    if scheme not in ("s3", "s3a", "s3n"):
        return
    configured = hadoop_configuration(spark).get(f"fs.{scheme}.impl")
    if scheme != "s3a" and configured != platform.S3A_FILE_SYSTEM:
        return  # EMRFS, or whatever the cluster maps s3:// to
    require_feature(spark, "s3", "S3_CONNECTOR_MISSING", where=where)


def require_source(table: TableDef) -> None:
    """Fail clearly when a query reads as a stream a table whose connector only writes."""
    if not connectors.named(table.connector).stream:
        raise UserError.of(
            "CONNECTOR_NOT_A_SOURCE", file=table.file, line=table.line, table=table.name, connector=table.connector
        )


# Taps: ``NOT isnan(spark_partition_id() + marker)`` holds for every row and is not folded
# (the partition id is not deterministic, so the optimiser neither moves nor merges the
# filter), and its marker names the tap in the physical plan. The partition id is a field
# of the task, so nothing is computed per row but an add and a NaN check. rand() would
# do as a tap too, but a stream draws its seed anew for every micro-batch, a new constant
# in the code Spark generates for the scan, so each batch compiled that code again.
TAP_BASE = 7_340_000
ROWS_READ, ROWS_GOOD = 1, 2


def tap_marker(index: int, which: int) -> str:
    """The marker of tap ``which`` (ROWS_READ, ROWS_GOOD) of the ``index``-th tapped source; ``-1``: the output."""
    return f"{TAP_BASE + 10 * (index + 1) + which}.25"


def tap(frame: DataFrame, marker: str, keep: Sequence[str] = ()) -> DataFrame:
    """``frame`` through the tap ``marker``. ``keep``: columns the reader must give whatever the query reads
    above (the optimiser prunes from a read the columns nothing references). The tap references them after an
    OR whose first branch holds for every row, so that branch is never evaluated; the condition is not
    deterministic, so the optimiser does not simplify it. Per row this costs the generated code taking each
    kept column out of the reader's row (a filter does so for the columns its condition references)."""
    condition = f"NOT isnan(spark_partition_id() + {marker}D)"
    if keep:
        condition += f" OR ({' AND '.join(f'{sqltext.identifier(name)} IS NULL' for name in keep)})"
    return frame.where(condition)


@dataclass(frozen=True)
class Source:
    """A table read live: the reader's rows, and how they become the declared columns."""

    table: TableDef
    rows: DataFrame  # as the reader gives them (after skipping files a previous version read)
    checks: Checks

    def parse(self, rows: DataFrame) -> DataFrame:
        """Every record of ``rows``: the physical columns, RAW and ERROR (why it is malformed, else NULL)."""
        return _with_error(self.checks, self.table, rows)

    def good(self, rows: DataFrame) -> DataFrame:
        """The records of ``rows`` that are not malformed, as the physical columns."""
        return _good(self.checks, self.table, rows)

    def frame(self) -> DataFrame:
        return self.parse(self.rows)

    def tapped(self, marker: str) -> DataFrame:
        """The rows as read, through the tap ``marker``. A reader that parses each record into the physical
        columns itself (JSON, CSV files) parses only those it is asked for, and Spark asks only for those the
        query reads: the tap asks for every one, so a record is malformed in every query over the table or
        in none, whatever columns each query reads."""
        keep = [f.name for f in spark_schema(self.table).fields] if self.checks.reader_parses else []
        return tap(self.rows, marker, keep)


def decode_json_values(frame: DataFrame, table: TableDef) -> DataFrame:
    """Kafka records decoded, with RAW and ERROR (``Source.parse`` of a Kafka table)."""
    return _with_error(kafka_checks(table), table, frame)


def _required(table: TableDef) -> list[str]:
    """The physical columns declared NOT NULL."""
    return [c.name for c in table.columns if not c.computed and not c.nullable]


def _missing(checks: Checks, table: TableDef, name: str) -> str:
    """SQL: the NOT NULL column ``name`` is missing from a record (a delete needs only its key)."""
    null = f"{sqltext.identifier(name)} IS NULL"
    if checks.deletes is None or name in table.primary_key:
        return null
    return f"{null} AND NOT coalesce({checks.deletes}, FALSE)"


def _with_error(checks: Checks, table: TableDef, rows: DataFrame) -> DataFrame:
    """The physical columns ``rows`` hold, ERROR (parse problems, then NOT NULL violations) and RAW holding
    every bad record: its text as read, or for a record that was parsed (a NOT NULL violation) the JSON of
    the columns at hand. ``rows`` hold every physical column but for a Parquet or ORC file read again
    (``jobs/deadletters.py``): its read is pruned to the query's columns and those declared NOT NULL, and
    only a NULL in these can make one of its records malformed.

    Both columns are SQL text: one parse in the JVM instead of a Py4J call per function."""
    frame = checks.columns(rows)
    present = [f.name for f in spark_schema(table).fields if f.name in frame.columns]
    null_errors = []
    for name in (name for name in _required(table) if name in present):
        missing = sqltext.string(f"field '{name}' is missing (declared NOT NULL)")
        null_errors.append(f"CASE WHEN {_missing(checks, table, name)} THEN {missing} END")
    null_error = f"nullif(concat_ws('; ', {', '.join(null_errors)}), '')" if null_errors else "NULL"
    parse_error = f"CASE WHEN NOT coalesce({checks.readable}, FALSE) THEN {checks.reason(present)} END"
    error = f"CAST(coalesce({parse_error}, {null_error}) AS STRING)"
    physical = ", ".join(sqltext.identifier(name) for name in present)
    raw, error_column = sqltext.identifier(RAW), sqltext.identifier(ERROR)
    filled = f"CASE WHEN {error_column} IS NOT NULL THEN coalesce({raw}, to_json(struct({physical}))) END"
    return frame.withColumn(ERROR, F.expr(error)).withColumn(RAW, F.expr(filled)).drop(*checks.helpers)


def _good(checks: Checks, table: TableDef, rows: DataFrame) -> DataFrame:
    """The rows ``_with_error`` gives no ERROR, as the physical columns: the same conditions, without the
    reasons, so a job's query checks each record without building text it does not need."""
    condition = " AND ".join(
        [f"({checks.readable})", *(f"NOT ({_missing(checks, table, name)})" for name in _required(table))]
    )
    return checks.columns(rows).where(condition).drop(RAW, *checks.helpers, *checks.origin)


def valid_rows(frame: DataFrame, table: TableDef) -> DataFrame:
    """Good rows of a parsed frame (``Source.parse``) in declaration order, computed columns added and the
    watermark applied."""
    return finish(frame.where(f"{sqltext.identifier(ERROR)} IS NULL").drop(RAW, ERROR), table)


# Flink's processing-time attribute, ``proc_time AS PROCTIME()``: in Spark, the micro-batch's time.
_PROCTIME = re.compile(r"\bPROCTIME\s*\(\s*\)", re.IGNORECASE)


def spark_expression(expression: str) -> str:
    """A computed column's expression as Spark SQL: ``PROCTIME()`` is the micro-batch's ``current_timestamp()``."""
    return _PROCTIME.sub("current_timestamp()", expression)


def finish(frame: DataFrame, table: TableDef) -> DataFrame:
    """Computed columns (in order) and the watermark, over a frame of the physical columns."""
    for column in table.columns:
        if column.computed:
            frame = frame.withColumn(column.name, F.expr(spark_expression(column.expression or "")))
    frame = frame.select(*[F.col(f"`{c.name}`") for c in table.columns])
    if table.watermark:
        frame = frame.withWatermark(table.watermark.column, table.watermark.delay)
    return frame


def invalid_rows(frame: DataFrame, table: TableDef) -> DataFrame:
    """Rejected records with the raw text (base64 for Avro values), the reason, when they were seen and, for a
    Kafka record, its topic, partition and offset."""
    raw, error = sqltext.identifier(RAW), sqltext.identifier(ERROR)
    origin = [f"{sqltext.identifier(ours)} AS `{name}`" for name, ours in KAFKA_ORIGIN.items() if ours in frame.columns]
    return frame.where(f"{error} IS NOT NULL").selectExpr(
        f"{sqltext.string(table.name)} AS source_table",
        f"{raw} AS raw",
        f"{error} AS reason",
        "current_timestamp() AS error_time",
        *origin,
    )


@functools.cache
def _stand_in_root() -> Path:
    """One empty folder per process for the stand-in streams, removed when it exits."""
    root = tempfile.mkdtemp(prefix="sql-runner-analysis-")
    atexit.register(shutil.rmtree, root, True)
    return Path(root)


def stand_in(spark: SparkSession, table: TableDef) -> DataFrame:
    """A streaming frame with the table's shape that reads nothing, for analysing queries.

    A file stream over an empty folder of the table's own (one per table, so Spark tells
    two tables apart), then the same computed columns and watermark as the live source:
    the plan Spark analyses is the streaming plan the job will run, without any data.
    """
    folder = _stand_in_root() / table.slug
    folder.mkdir(exist_ok=True)
    return finish(spark.readStream.schema(spark_schema(table)).json(str(folder)), table)
