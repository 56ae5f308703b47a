"""Malformed records of a micro-batch, set aside from the same read of its sources.

A job is one streaming query; its sources' rows pass two taps each (``jobs/sources.py``).
After the micro-batch's output is written, the taps' row counts in the batch's executed
plan say whether any record was malformed. Only then are the malformed ones taken from
the rows the first tap saw: a copy of the plan below that tap is run (the same files or
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
from jobs.jvm import frame_of, java_session, scala_list
from runner.core.protocol.jobspec import JobSpec

OUTPUT_TAP = sources.tap_marker(-1, sources.ROWS_GOOD)  # the rows a micro-batch writes


class Taps:
    """The taps in one micro-batch's executed plan, by marker (the first one found of each, in pre-order).

    Each look at a plan node is a Py4J call (a few tenths of a millisecond) on the thread that runs the
    micro-batch: walking a whole plan took 18-45 ms a batch. A stream's micro-batches have the same plan, so
    ``places`` (the caller keeps it from batch to batch) holds each tap's place, the number
    ``TreeNode.apply`` takes; the node found there is checked to be that tap, and only when it is not
    (a batch planned otherwise, say with a source that has nothing new) is the plan walked again."""

    def __init__(self, plan: Any, places: dict[str, int] | None = None):  # py4j SparkPlan
        self.plan = plan
        self.places = {} if places is None else places
        self.found: dict[str, Any] = {}
        self.walked: list[tuple[int, str, Any]] | None = None  # (place, condition, node) of every Filter

    def node(self, marker: str) -> Any | None:
        if marker not in self.found:
            place = self.places.get(marker)
            node = None if place is None else self._tap_at(place, marker)
            if node is None:
                place, node = next(((p, n) for p, condition, n in self._filters() if marker in condition), (None, None))
                if place is not None and self._tap_at(place, marker) is not None:
                    self.places[marker] = place  # a plan whose numbering differs from the walk's is walked each time
            self.found[marker] = node
        return self.found[marker]

    def rows(self, marker: str) -> int | None:
        """Rows that passed the tap in this micro-batch (None: not in the plan)."""
        node = self.node(marker)
        return None if node is None else int(node.longMetric("numOutputRows").value())

    def _tap_at(self, place: int, marker: str) -> Any | None:
        node = self.plan.apply(place)  # null past the last node
        if node is None or node.nodeName() != "Filter" or marker not in node.condition().toString():
            return None
        return node

    def _filters(self) -> list[tuple[int, str, Any]]:
        if self.walked is None:
            self.walked = []
            pending, place = [self.plan], 0
            while pending:  # pre-order, numbered as TreeNode.apply numbers a plan without subqueries
                node = pending.pop()
                if node.nodeName() == "Filter":  # FilterExec
                    self.walked.append((place, node.condition().toString(), node))
                pending.extend(reversed(scala_list(node.children())))
                place += 1
        return self.walked


def rows_below(spark: SparkSession, node: Any) -> DataFrame:
    """The rows a plan node's child produces, computed again, as a batch DataFrame.

    A copy of the child is run, not the child itself: the copy's nodes count in metrics of their own. Spark
    adds up the micro-batch's scan nodes' row counts into its progress (``numInputRows``, per source and in
    all) once the batch is written; the child's own scan run again would count every record twice."""
    child = node.child().clone()
    return frame_of(java_session(spark).internalCreateDataFrame(child.execute(), child.schema(), False), spark)


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
