"""Starting a built job's streaming queries and watching them run.

One query writes the output; one more per source that can hold malformed records
writes those to the dead-letter location. Counts come from observed metrics, reported
one line per micro-batch.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery, StreamingQueryListener

from jobs import localfs, sources, sqltext
from jobs.build import BuiltJob
from jobs.filesink import file_sink_writer
from jobs.sinks import Trigger, start_sink
from runner.core.jobspec import JobSpec
from runner.core.placeholders import resolved_options
from runner.core.starts import dead_letter_role

OUTPUT_METRIC = "sql_runner_output"
DEAD_LETTER_METRIC = "sql_runner_dead_letter"


@dataclass
class Counts:
    """Rows written and dead-lettered since the job started."""

    written: int = 0
    dead_lettered: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


class ProgressListener(StreamingQueryListener):
    """A listener that only reacts to progress (Spark requires the other callbacks)."""

    def onQueryStarted(self, event) -> None:  # Spark's listener API
        pass

    def onQueryIdle(self, event) -> None:
        pass

    def onQueryTerminated(self, event) -> None:
        pass


class _ProgressLog(ProgressListener):
    def __init__(self, label: str, counts: Counts, names: set[str]):
        self.label = label
        self.counts = counts
        self.names = names

    def onQueryProgress(self, event) -> None:
        progress = event.progress
        if progress.name not in self.names:
            return
        metrics = progress.observedMetrics
        with self.counts.lock:
            if OUTPUT_METRIC in metrics:
                rows = metrics[OUTPUT_METRIC]["rows"]
                self.counts.written += rows
                wm = progress.eventTime.get("watermark") if progress.eventTime else None
                print(
                    f"[{self.label}] batch {progress.batchId}: {rows} rows written"
                    + (f", watermark {wm}" if wm else ""),
                    flush=True,
                )
            if DEAD_LETTER_METRIC in metrics:
                bad = metrics[DEAD_LETTER_METRIC]["rows"]
                self.counts.dead_lettered += bad
                if bad:
                    print(
                        f"[{self.label}] batch {progress.batchId}: {bad} malformed records to the dead-letter location",
                        flush=True,
                    )


def query_name(spec: JobSpec) -> str:
    """The output query's name: ``<name>-v<version>``."""
    return f"{spec.manifest.name}-v{spec.manifest.version}"


def start(
    spark: SparkSession, built: BuiltJob, spec: JobSpec, env: Mapping[str, str], counts: Counts | None = None
) -> list[StreamingQuery]:
    """Start the output query and the dead-letter queries; returns them, output first."""
    manifest = spec.manifest
    for key, value in _source_properties(built, env).items():
        if key not in manifest.spark_properties:  # the manifest's own setting wins
            spark.conf.set(key, value)
    trigger = Trigger(interval=manifest.trigger_interval, available_now=spec.once)
    name = query_name(spec)
    observed = built.output.observe(OUTPUT_METRIC, F.expr("count(1) AS rows"))
    names = {name} | {f"{name}-dead-letter-{t.slug}" for t, _ in built.query.dead_letters}
    if counts is not None and not spec.once:
        spark.streams.addListener(_ProgressLog(spec.label, counts, names))
    queries = [start_sink(observed, built.target, env, checkpoint=spec.checkpoint, trigger=trigger, query_name=name)]
    for table, frame in built.query.dead_letters:
        slug = table.slug
        rejected = (
            sources.invalid_rows(frame, table)
            .selectExpr(
                "*", f"{sqltext.string(manifest.name)} AS query_name", f"{int(manifest.version)} AS query_version"
            )
            .observe(DEAD_LETTER_METRIC, F.expr("count(1) AS rows"))
        )
        checkpoint = f"{spec.checkpoint.rstrip('/')}/{dead_letter_role(table)}"
        writer = (
            rejected.writeStream.queryName(f"{name}-dead-letter-{slug}")
            .foreachBatch(
                file_sink_writer(
                    spark, checkpoint=checkpoint, fmt="json", path=f"{spec.dead_letter.rstrip('/')}/{slug}"
                )
            )
            .option("checkpointLocation", checkpoint)
            .outputMode("append")
        )
        queries.append(trigger.apply(writer).start())
    return queries


def _source_properties(built: BuiltJob, env: Mapping[str, str]) -> dict[str, str]:
    """Properties that depend on where the job's file sources are (``jobs/localfs.py``)."""
    files = [table for table in built.query.sources.values() if table.connector == "filesystem"]
    paths = [resolved_options(table, env)["path"] for table in files]
    return localfs.source_properties(paths)


def wait(spark: SparkSession, queries: list[StreamingQuery], *, once: bool) -> None:
    """Block until the queries finish (``once``) or one of them stops; re-raise its failure."""
    if once:
        for query in queries:
            query.awaitTermination()
        return
    try:
        spark.streams.awaitAnyTermination()
    finally:
        for query in queries:
            if query.isActive:
                query.stop()
    for query in queries:
        error = query.exception()
        if error is not None:
            raise error


def totals(queries: list[StreamingQuery]) -> tuple[int, int]:
    """(rows written, records dead-lettered) over the queries' recent progress."""
    written = dead = 0
    for query in queries:
        for progress in query.recentProgress:
            metrics = progress.observedMetrics
            if OUTPUT_METRIC in metrics:
                written += metrics[OUTPUT_METRIC]["rows"]
            if DEAD_LETTER_METRIC in metrics:
                dead += metrics[DEAD_LETTER_METRIC]["rows"]
    return written, dead


def stop_all(queries: list[StreamingQuery]) -> None:
    for query in queries:
        try:
            if query.isActive:
                query.stop()
        except Exception as error:  # noqa: BLE001 - keep stopping the others
            print(f"stopping {query.name} failed: {error}", file=sys.stderr)
