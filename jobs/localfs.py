"""Spark's file I/O on a local disk without starting a process per file.

pyspark ships no native Hadoop library, and without it Hadoop's local file system runs a
shell command where the library would make a system call: ``chmod`` for every file it
creates (twice, with the checksum file it writes beside each one) and ``readlink`` for
every rename through Hadoop's FileContext, which is how Spark commits checkpoint files.
A streaming query writes several files per micro-batch (offsets, commits, the file sink's
data and log, state), so on a laptop one job with a batch a second started about 170
processes a second, and each micro-batch spent half its time waiting for them.

Every Spark application the runner starts with its checkpoints on this machine therefore
reads and writes ``file:`` paths through Hadoop's raw local file system (no checksum files,
so no second ``chmod``; the runner never reads them) and commits checkpoint files with a
plain rename (``rename(2)``: atomic on a local disk) instead of FileContext's.
Checkpoints on S3 keep Hadoop's and Spark's defaults: S3A uploads a local file (RocksDB's
state store at every commit) through the checksummed local file system. Either can still
be set in ``sparkProperties``. On YARN they are set by the driver on its own session instead
of on spark-submit's command line (``missing_from``): the YARN client stages the
application's files through Hadoop's ``file:`` file system, and the raw one cannot.

A file source's micro-batch builds its relation over the files it found, and Spark checks
those paths again; above 32 paths it starts a distributed Spark job to do so. For files
on this machine that job is pure overhead (a first batch over 200 small local files took
~0.9 s, of which 0.75 s in that job; ~0.2 s without it), so a query whose file sources
are all local has its paths checked on the driver. Sources on S3 keep Spark's default,
where checking many paths in parallel can pay off.
"""

from __future__ import annotations

from collections.abc import Iterable

FILE_IMPL = "spark.hadoop.fs.file.impl"
RAW_LOCAL_FILES = {
    FILE_IMPL: "org.apache.hadoop.fs.RawLocalFileSystem",
    "spark.hadoop.fs.AbstractFileSystem.file.impl": "org.apache.hadoop.fs.local.RawLocalFs",
    # S3A buffers an upload in a local file it places through Hadoop's checksummed LocalFileSystem, which the
    # raw one is not (a ClassCastException on every write to s3://): it buffers in memory instead, in pooled
    # off-heap blocks of fs.s3a.multipart.size.
    "spark.hadoop.fs.s3a.fast.upload.buffer": "bytebuffer",
}
LISTING_THRESHOLD = "spark.sql.sources.parallelPartitionDiscovery.threshold"
LIST_ON_DRIVER = str(2**31 - 1)
CHECKPOINT_MANAGER = "spark.sql.streaming.checkpointFileManagerClass"
RENAME_CHECKPOINTS = "org.apache.spark.sql.execution.streaming.FileSystemBasedCheckpointFileManager"


def is_local(uri: str) -> bool:
    """A path on this machine's disk: no scheme, or ``file:``."""
    return "://" not in uri or uri.startswith("file:")


def properties(checkpoints: str) -> dict[str, str]:
    """Spark properties for an application whose checkpoints live under ``checkpoints``: none when they are not on
    this machine, as S3A copies a local file up (RocksDB's state store does at every commit) through Hadoop's
    checksummed local file system, which the raw one is not (a ClassCastException in every stateful batch)."""
    if not is_local(checkpoints):
        return {}
    return {**RAW_LOCAL_FILES, CHECKPOINT_MANAGER: RENAME_CHECKPOINTS}


def missing_from(conf: object, checkpoints: str) -> dict[str, str]:
    """The ``properties`` a driver's configuration (a ``SparkConf``) does not hold yet: on YARN they are not on
    spark-submit's command line (its client would stage the application's files through the raw file system,
    which cannot), and the driver sets them on its own session."""
    missing = {key: value for key, value in properties(checkpoints).items() if not conf.contains(key)}  # type: ignore[attr-defined]
    if FILE_IMPL in missing:
        # the ApplicationMaster read its files through Hadoop's cached file: file system before this driver set
        # its own: without the cache the session's reads and writes get the raw one
        missing[FILE_IMPL + ".disable.cache"] = "true"
    return missing


def source_properties(file_source_paths: Iterable[str]) -> dict[str, str]:
    """SQL properties for a query reading files at ``file_source_paths``: if every one is local, its
    micro-batches check their files on the driver."""
    paths = list(file_source_paths)
    return {LISTING_THRESHOLD: LIST_ON_DRIVER} if paths and all(is_local(p) for p in paths) else {}
