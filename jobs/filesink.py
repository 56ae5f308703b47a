"""Spark's file sink, with batch ids that carry on the table's own log.

Spark's file sink is exactly once through the table's ``_spark_metadata`` log, keyed by
the query's batch id: a batch whose id the log already holds is skipped as "already
committed". A query that starts from a fresh checkpoint (a new version after an
incompatible change, reprocessing, a wiped checkpoint) numbers its batches from 0
again, so against a table that an earlier run already wrote, Spark would silently drop
the new query's first batches.

Here every streaming write to a file table goes through Spark's own sink (the same
class, log, commit protocol and compaction), called from ``foreachBatch`` with the
batch id shifted by a *base*: the table's next free batch id, decided once when the
checkpoint first starts and kept in ``<checkpoint>/sink.json``. A restart or a restore
(which copies the checkpoint) keeps the same base, so a batch replayed after a crash
maps to the same log entry and is still written exactly once. A checkpoint that already
has batches but no ``sink.json`` was written with base 0.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from jobs.jvm import hadoop_configuration, java_class, java_frame, java_session, jvm_of, scala_none

BASE_FILE = "sink.json"


class HadoopFiles:
    """Small file operations through Hadoop's FileSystem, so any URI Spark can write works."""

    def __init__(self, spark: SparkSession):
        self.jvm = jvm_of(spark)
        self.conf = hadoop_configuration(spark)

    def _resolve(self, uri: str) -> tuple[Any, Any]:
        path = java_class(self.jvm, "org.apache.hadoop.fs.Path")(uri)
        return path.getFileSystem(self.conf), path

    def read_text(self, uri: str) -> str | None:
        fs, path = self._resolve(uri)
        if not fs.exists(path):
            return None
        stream = fs.open(path)
        try:
            return java_class(self.jvm, "org.apache.commons.io.IOUtils").toString(stream, "UTF-8")
        finally:
            stream.close()

    def create(self, uri: str, text: str, *, overwrite: bool = False) -> None:
        """Write a file; fails if it exists, unless ``overwrite``."""
        fs, path = self._resolve(uri)
        stream = fs.create(path, overwrite)
        try:
            stream.write(bytearray(text.encode()))
        finally:
            stream.close()

    def names(self, uri: str) -> list[str]:
        """The names of the entries in folder ``uri`` (none when it does not exist)."""
        fs, path = self._resolve(uri)
        if not fs.exists(path):
            return []
        return [status.getPath().getName() for status in fs.listStatus(path)]

    def delete(self, uri: str) -> None:
        """Remove ``uri`` (a file, or a folder and all it holds); nothing when it does not exist."""
        fs, path = self._resolve(uri)
        fs.delete(path, True)

    def has_entries(self, uri: str) -> bool:
        fs, path = self._resolve(uri)
        return bool(fs.exists(path)) and len(fs.listStatus(path)) > 0


def latest_batch(spark: SparkSession, path: str) -> int | None:
    """The last batch id in the file table's ``_spark_metadata`` log (None: no log yet)."""
    jvm = jvm_of(spark)
    none = scala_none(jvm)
    log = java_class(jvm, "org.apache.spark.sql.execution.streaming.FileStreamSinkLog")(
        1, java_session(spark), f"{path.rstrip('/')}/_spark_metadata", none
    )
    latest = log.getLatestBatchId()
    return int(latest.get()) if latest.isDefined() else None


def batch_base(spark: SparkSession, checkpoint: str, path: str) -> int:
    """The checkpoint's base: kept from its first start, else decided now from the table's log."""
    files = HadoopFiles(spark)
    base_uri = f"{checkpoint.rstrip('/')}/{BASE_FILE}"
    kept = files.read_text(base_uri)
    if kept is not None:
        return int(json.loads(kept)["batch-base"])
    if files.has_entries(f"{checkpoint.rstrip('/')}/offsets"):
        return 0
    latest = latest_batch(spark, path)
    base = 0 if latest is None else latest + 1
    files.create(base_uri, json.dumps({"path": path, "batch-base": base}) + "\n")
    return base


class FileSinkWriter:
    """A ``foreachBatch`` callback writing each batch through Spark's file sink at ``base + batch id``."""

    def __init__(
        self,
        spark: SparkSession,
        *,
        fmt: str,
        path: str,
        options: Mapping[str, str],
        partition_by: Sequence[str],
        base: int,
    ):
        jvm = jvm_of(spark)
        utils = java_class(jvm, "org.apache.spark.api.python.PythonUtils")
        none = scala_none(jvm)
        java_options = java_class(jvm, "java.util.HashMap")()
        for key, value in {**options, "path": path}.items():
            java_options.put(key, value)
        partitions = java_class(jvm, "java.util.ArrayList")()
        for column in partition_by:
            partitions.add(column)
        source = java_class(jvm, "org.apache.spark.sql.execution.datasources.DataSource")(
            java_session(spark),
            fmt,
            utils.toSeq(java_class(jvm, "java.util.ArrayList")()),
            none,
            utils.toSeq(partitions),
            none,
            utils.toScalaMap(java_options),
            none,
        )
        self.sink = source.createSink(java_class(jvm, "org.apache.spark.sql.streaming.OutputMode").Append())
        self.base = base
        self.spark = spark
        self.path = path

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        self.write_at(self.base + batch_id, batch)

    def write_at(self, log_id: int, frame: DataFrame) -> None:
        """Write ``frame`` as entry ``log_id`` of the table's log (nothing, if the log has it already)."""
        self.sink.addBatch(log_id, java_frame(frame))

    def committed(self, batch_id: int) -> bool:
        """Whether the table's log already holds the query's batch ``batch_id`` (a replay after a crash)."""
        latest = latest_batch(self.spark, self.path)
        return latest is not None and latest >= self.base + batch_id


def file_sink_writer(
    spark: SparkSession,
    *,
    checkpoint: str,
    fmt: str,
    path: str,
    options: Mapping[str, str] | None = None,
    partition_by: Sequence[str] = (),
) -> FileSinkWriter:
    return FileSinkWriter(
        spark,
        fmt=fmt,
        path=path,
        options=options or {},
        partition_by=partition_by,
        base=batch_base(spark, checkpoint, path),
    )
