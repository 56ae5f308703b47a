"""The state of a changelog job: each source's current rows and the query's last result, per micro-batch.

Kept in the query's checkpoint, under ``changelog/``, so a savepoint (a copy of the
checkpoint) carries it and a restore finds it:

    changelog/v<batch>.json          the version a micro-batch left: where each table and the
                                     result are, and how many keys each table holds
    changelog/b<batch>/t<i>/         source i's rows after that batch (Parquet), written only
                                     when the batch changed the table
    changelog/b<batch>/result/       the query's result after that batch

A micro-batch ``n`` starts from the newest version below ``n`` and writes version ``n``:
Spark replays a batch it did not commit with the same input, so a replay starts from the
same version and writes the same one again. Files no version in use points to are removed
once a newer version is written.
"""

from __future__ import annotations

import re

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from jobs.filesink import HadoopFiles
from runner.core.protocol.document import Document

VERSION_FILE = re.compile(r"^v(\d+)\.json$")


class Version(Document):
    """What micro-batch ``batch`` left: folder of each source's rows and of the result, keys per source. A
    savepoint carries it to a later run, of this release or a later one."""

    batch: int
    tables: dict[str, str]  # source index -> folder (relative to the state root)
    result: str
    keys: dict[str, int] = {}


class StateStore:
    """The versions of a changelog job's tables and result, under ``<checkpoint>/changelog``."""

    def __init__(self, spark: SparkSession, checkpoint: str):
        self.spark = spark
        self.root = checkpoint.rstrip("/") + "/changelog"
        self.files = HadoopFiles(spark)

    def _versions(self) -> list[int]:
        found = (VERSION_FILE.match(name) for name in self.files.names(self.root))
        return sorted(int(m.group(1)) for m in found if m)

    def latest_before(self, batch_id: int) -> Version | None:
        """The version the newest micro-batch below ``batch_id`` left, if any."""
        earlier = [b for b in self._versions() if b < batch_id]
        if not earlier:
            return None
        text = self.files.read_text(f"{self.root}/v{earlier[-1]}.json")
        return Version.decode(text) if text is not None else None

    def folder(self, batch_id: int, part: str) -> str:
        """Where micro-batch ``batch_id`` writes ``part`` (``t<i>`` or ``result``), relative to the root."""
        return f"b{batch_id}/{part}"

    def read(self, relative: str, schema: T.StructType) -> DataFrame:
        return self.spark.read.schema(schema).parquet(f"{self.root}/{relative}")

    def write(self, frame: DataFrame, relative: str) -> DataFrame:
        """Write ``frame`` to ``relative`` (replacing what a crashed attempt left there) and read it back."""
        path = f"{self.root}/{relative}"
        frame.write.mode("overwrite").option("compression", "lz4").parquet(path)
        return self.spark.read.schema(frame.schema).parquet(path)

    def empty(self, schema: T.StructType) -> DataFrame:
        return self.spark.createDataFrame([], schema)

    def commit(self, version: Version) -> None:
        """Record ``version``, then remove the folders neither it nor the version before it uses."""
        self.files.create(f"{self.root}/v{version.batch}.json", version.encode().decode(), overwrite=True)
        versions = self._versions()
        keep = [b for b in versions if b <= version.batch][-2:]
        used: set[str] = set()
        for batch in keep:
            text = self.files.read_text(f"{self.root}/v{batch}.json")
            if text is not None:
                kept = Version.decode(text)
                used.update(p.split("/")[0] for p in (*kept.tables.values(), kept.result))
        for batch in versions:
            if batch < keep[0]:
                self.files.delete(f"{self.root}/v{batch}.json")
        for name in self.files.names(self.root):
            if name.startswith("b") and name not in used and int(name[1:]) < version.batch:
                self.files.delete(f"{self.root}/{name}")
