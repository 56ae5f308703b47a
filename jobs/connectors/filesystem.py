"""Reading and writing ``filesystem`` tables in Spark.

Read: Spark's file source over the folder (JSON and CSV parsed permissively, so a malformed
record is set aside, not fatal); a new version that continues the previous one skips the files
it read. Written: Spark's file sink (append; exactly once through its ``_spark_metadata`` log),
with batch ids that carry on the table's log (``jobs/filesink.py``). As a lookup table: the
folder listed and read anew at each load, in ``FAILFAST`` mode: one malformed record fails the
load, as does a JSON TINYINT outside -128 to 127 (read as a SMALLINT and narrowed,
``jobs/narrowing.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as S

from jobs import change_records, narrowing, records, sqltext
from jobs.connectors.base import LoadFailed, SparkConnector
from jobs.filesink import file_sink_writer
from jobs.jdbc import first_line
from jobs.records import NO_ERRORS, RAW, reader_checks, reader_schema
from jobs.schema import spark_schema
from jobs.sinks import OutputSink
from jobs.sources import Source, require_s3
from runner.core.starts import FILE_URI_PREFIX, FILE_URI_SPELLING, SkipFiles, Start
from runner.core.tables import TableDef

SKIP_PATH = "__sql_runner_file"


class SparkFilesystem(SparkConnector):
    name = "filesystem"

    def source(self, spark: SparkSession, table: TableDef, options: dict[str, str], start: Start | None) -> Source:
        path = options["path"]
        fmt = options["format"]
        require_s3(spark, path, f"table {table.name}")
        if "://" not in path or path.startswith("file://"):
            # The file source refuses a missing folder; a job waiting for its first file is normal.
            Path(path.removeprefix("file://")).mkdir(parents=True, exist_ok=True)
        if table.changelog:
            rows, checks = change_records.file_changes(spark, table, options, path)
            return Source(table, _skip_files(spark, rows, start), checks)
        reader = spark.readStream.format(fmt)
        if "source.max-files-per-trigger" in options:
            reader = reader.option("maxFilesPerTrigger", options["source.max-files-per-trigger"])
        if "source.path-glob-filter" in options:
            reader = reader.option("pathGlobFilter", options["source.path-glob-filter"])
        if fmt in ("json", "csv"):
            reader = reader.schema(reader_schema(table, fmt))
            reader = reader.option("mode", "PERMISSIVE").option("columnNameOfCorruptRecord", RAW)
            csv_options = csv_reader_options(options) if fmt == "csv" else {}
            reader = reader.options(**csv_options)
            checks = reader_checks(table, fmt, csv_options)
            return Source(table, _skip_files(spark, reader.load(path), start), checks)
        schema = spark_schema(table)
        return Source(table, _skip_files(spark, reader.schema(schema).load(path), start), NO_ERRORS)

    def sink(
        self, frame: DataFrame, target: TableDef, options: dict[str, str], *, checkpoint: str, query: str, mode: str
    ) -> OutputSink:
        spark = frame.sparkSession
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

    def lookup(self, spark: SparkSession, table: TableDef, values: Mapping[str, str]) -> FolderRows:
        return FolderRows(spark, table, self.options(spark, table, values))


def csv_reader_options(options: dict[str, str]) -> dict[str, str]:
    """Spark's CSV reader options for a table's ``csv.*`` options."""
    names = {"csv.field-delimiter": "sep", "csv.quote-character": "quote", "csv.null-literal": "nullValue"}
    names["csv.header"] = "header"
    return {spark_name: options[ours] for ours, spark_name in names.items() if ours in options}


def _skip_files(spark: SparkSession, frame: DataFrame, start: Start | None) -> DataFrame:
    """Drop the rows of files a previous version already read (an anti-join on the file path).

    The list holds paths in the core's one spelling; the file each row came from is put in
    the same spelling by the same rule (``runner/core/starts.py``).
    """
    if not isinstance(start, SkipFiles):
        return frame
    # A changelog file source carries the file of each row already (it orders the row's changes by it).
    path = F.col(change_records.FILE) if change_records.FILE in frame.columns else F.col("_metadata.file_path")
    normalise = F.regexp_replace(path, FILE_URI_PREFIX, FILE_URI_SPELLING)
    read = spark.read.schema("path STRING").json(start.uri).select(F.col("path").alias(SKIP_PATH))
    tagged = frame.select("*", normalise.alias(SKIP_PATH))
    return tagged.join(F.broadcast(read), on=SKIP_PATH, how="left_anti").drop(SKIP_PATH)


class FolderRows:
    """A folder lookup table's rows: every file in it, read anew at each load."""

    def __init__(self, spark: SparkSession, table: TableDef, options: dict[str, str]):
        self.spark, self.table, self.options = spark, table, options
        self.schema = spark_schema(table)

    @property
    def where(self) -> str:
        return self.options.get("path", "")

    def rows(self) -> list[Any]:
        options = self.options
        path, fmt = options["path"], options["format"]
        read_as = narrowing.json_type(self.schema) if fmt == "json" else self.schema
        assert isinstance(read_as, S.StructType)
        reader = self.spark.read.format(fmt).schema(read_as)
        if fmt in ("json", "csv"):
            reader = reader.option("mode", "FAILFAST")
        if fmt == "csv":
            reader = reader.options(**csv_reader_options(options))
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


def _spark_reason(error: Exception) -> str:
    """The line of Spark's error that says what was wrong with the files."""
    text = str(error)
    for marker in ("Malformed records are detected", "PATH_NOT_FOUND", "Path does not exist", "FileNotFound"):
        for line in text.splitlines():
            if marker in line:
                return line.strip()[:300]
    return first_line(error)[:300]
