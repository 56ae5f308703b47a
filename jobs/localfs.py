"""Spark's file I/O on a local disk without starting a process per file.

pyspark ships no native Hadoop library, and without it Hadoop's local file system runs a
shell command where the library would make a system call: ``chmod`` for every file it
creates (twice, with the checksum file it writes beside each one) and ``readlink`` for
every rename through Hadoop's FileContext, which is how Spark commits checkpoint files.
A streaming query writes several files per micro-batch (offsets, commits, the file sink's
data and log, state), so on a laptop one job with a batch a second started about 170
processes a second, and each micro-batch spent half its time waiting for them.

Every Spark application the runner starts therefore reads and writes ``file:`` paths
through Hadoop's raw local file system (no checksum files, so no second ``chmod``; the
runner never reads them) and, when its checkpoints are local, commits checkpoint files
with a plain rename (``rename(2)``: atomic on a local disk) instead of FileContext's.
Checkpoints on S3 keep Spark's default. Either can still be set in ``sparkProperties``.
"""

from __future__ import annotations

RAW_LOCAL_FILES = {
    "spark.hadoop.fs.file.impl": "org.apache.hadoop.fs.RawLocalFileSystem",
    "spark.hadoop.fs.AbstractFileSystem.file.impl": "org.apache.hadoop.fs.local.RawLocalFs",
}
CHECKPOINT_MANAGER = "spark.sql.streaming.checkpointFileManagerClass"
RENAME_CHECKPOINTS = "org.apache.spark.sql.execution.streaming.FileSystemBasedCheckpointFileManager"


def is_local(uri: str) -> bool:
    """A path on this machine's disk: no scheme, or ``file:``."""
    return "://" not in uri or uri.startswith("file:")


def properties(checkpoints: str) -> dict[str, str]:
    """Spark properties for an application whose checkpoints live under ``checkpoints``."""
    found = dict(RAW_LOCAL_FILES)
    if is_local(checkpoints):
        found[CHECKPOINT_MANAGER] = RENAME_CHECKPOINTS
    return found
