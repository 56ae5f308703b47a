"""Malformed records of a micro-batch, set aside from the same read of its sources.

A job is one streaming query; its sources' rows pass two taps each (``jobs/sources.py``).
After the micro-batch's output is written, the taps' row counts in the batch's executed
plan say whether any record was malformed. Only then are the malformed ones taken from
the rows the first tap saw: the plan below that tap is run again (the same files or
offsets, the same parsing), its malformed records written to the dead-letter location,
before Spark commits the batch. A batch without malformed records costs nothing more
than its output; one with them reads its input a second time, never its good rows into
memory, so a flood of malformed records needs no more memory than any batch.

Exactly once, per source table: the dead-letter folder is a Spark file table whose log
entries are numbered densely (Spark's log compaction expects no gaps), so a batch with
malformed records takes the next free entry and notes which in the checkpoint
(``dead-letters/<table>.json``) before writing it. A batch replayed after a crash finds
its note and writes the same entry, which Spark's sink skips if it was committed. When
the output is a file table that already holds the replayed batch, Spark does not run the
batch again, so its dead letters are taken from its input regardless of the counts.
"""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from jobs import sources, sqltext
from jobs.build import Tapped
from jobs.filesink import FileSinkWriter, HadoopFiles, latest_batch
from jobs.jvm import scala_list
from runner.core.jobspec import JobSpec

OUTPUT_TAP = sources.tap_marker(-1, sources.ROWS_GOOD)  # the rows a micro-batch writes


class Taps:
    """The taps in one micro-batch's executed plan, by marker (the first one found of each)."""

    def __init__(self, plan: Any):  # py4j SparkPlan
        self.filters: list[tuple[str, Any]] = []
        pending = [plan]
        while pending:
            node = pending.pop()
            if node.nodeName() == "Filter":  # FilterExec
                self.filters.append((node.condition().toString(), node))
            pending.extend(reversed(scala_list(node.children())))

    def node(self, marker: str) -> Any | None:
        return next((node for condition, node in self.filters if marker in condition), None)

    def rows(self, marker: str) -> int | None:
        """Rows that passed the tap in this micro-batch (None: not in the plan)."""
        node = self.node(marker)
        return None if node is None else int(node.metrics().apply("numOutputRows").value())


def rows_below(spark: SparkSession, node: Any) -> DataFrame:
    """The rows a plan node's child produces, computed again, as a batch DataFrame."""
    child = node.child()
    return DataFrame(spark._jsparkSession.internalCreateDataFrame(child.execute(), child.schema(), False), spark)


class DeadLetterTable:
    """One source table's dead-letter folder: ``<dead-letter>/<table slug>``."""

    def __init__(self, spark: SparkSession, tapped: Tapped, spec: JobSpec):
        slug = tapped.table.slug
        self.spark = spark
        self.tapped = tapped
        self.manifest = spec.manifest
        self.path = f"{spec.dead_letter.rstrip('/')}/{slug}"
        self.note = f"{spec.checkpoint.rstrip('/')}/dead-letters/{slug}.json"
        self.files = HadoopFiles(spark)
        self.writer = FileSinkWriter(spark, fmt="json", path=self.path, options={}, partition_by=(), base=0)

    def set_aside(self, taps: Taps, batch_id: int, *, replayed: bool) -> int:
        """Write the batch's malformed records of this table; how many (0 if unknown: a replay)."""
        read = self.tapped.rows_read
        node = taps.node(read)
        if node is None:  # this micro-batch's plan does not read the table
            return 0
        malformed = 0
        if not replayed:
            good = taps.rows(self.tapped.rows_good)
            if good is not None:
                malformed = (taps.rows(read) or 0) - good
                if malformed <= 0:
                    return 0
        table = self.tapped.table
        rejected = sources.invalid_rows(self.tapped.source.parse(rows_below(self.spark, node)), table).selectExpr(
            "*",
            f"{sqltext.string(self.manifest.name)} AS query_name",
            f"{int(self.manifest.version)} AS query_version",
        )
        self.writer.write_at(self._entry(batch_id), rejected)
        return malformed

    def _entry(self, batch_id: int) -> int:
        """The log entry of ``batch_id``: the one noted for it, else the next free one (noted now)."""
        text = self.files.read_text(self.note)
        try:
            noted = json.loads(text) if text else {}
        except ValueError:  # cut short by a crash while writing it: nothing was written under it yet
            noted = {}
        if noted.get("batch") == batch_id:
            return int(noted["entry"])
        latest = latest_batch(self.spark, self.path)
        entry = 0 if latest is None else latest + 1
        self.files.create(self.note, json.dumps({"batch": batch_id, "entry": entry}) + "\n", overwrite=True)
        return entry
