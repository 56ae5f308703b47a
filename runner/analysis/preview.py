"""``sql-runner preview``: the first rows of a query over the live sources.

Runs in this process on local Spark with a throw-away checkpoint, writes nothing to the
target and touches no deployed state. Over file sources it stops once the files present
now are processed; over unbounded sources (datagen, kafka) after N rows or a timeout.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, Row

from jobs.build import BuiltQuery, build_query, sql_preview_query
from jobs.lookup.refresh import LookupFailed, Lookups
from jobs.lookup.refresh import failure as lookup_failure
from runner.analysis.session import local_session
from runner.authoring.project import Project
from runner.core import connectors

log = logging.getLogger(__name__)


@dataclass
class PreviewResult:
    columns: list[str]
    rows: list[Row]
    timed_out: bool


def preview_query(
    project: Project, *, manifest: Path | None, sql: str | None, limit: int, timeout: float
) -> PreviewResult:
    """The first rows of a manifest's query, or of ``sql``, over the project's live sources."""
    log.info("starting local Spark for the preview")
    spark = local_session("sql-runner-preview")
    if manifest is not None:
        loaded = project.load_manifest(manifest)
        query = build_query(spark, loaded, project.catalog, os.environ, live=True, file=project.display(manifest))
    else:
        query = sql_preview_query(spark, sql or "", project.catalog, os.environ)
    log.info(f"reading {', '.join(t.name for t in query.sources.values())} (up to {limit} rows, {timeout:.0f}s)")
    return preview(query, limit=limit, timeout=timeout, env=os.environ)


def preview(
    query: BuiltQuery,
    *,
    limit: int,
    timeout: float,
    env: Mapping[str, str] | None = None,
    on_rows: Callable[[list[Row]], None] | None = None,
) -> PreviewResult:
    """Collect up to ``limit`` rows of the query's output; ``on_rows`` is given each micro-batch's new rows as
    they arrive (the console shows them so)."""
    collected: list[Row] = []
    lock = threading.Lock()

    def collect(batch: DataFrame, _batch_id: int) -> None:
        with lock:
            missing = limit - len(collected)
            if missing > 0:
                rows = batch.limit(missing).collect()
                collected.extend(rows)
                if rows and on_rows is not None:
                    on_rows(rows)

    bounded = all(connectors.named(t.connector).preview_reads_to_end for t in query.streams().values())
    checkpoint = tempfile.mkdtemp(prefix="sql-runner-preview-")
    lookups = Lookups(query.result.sparkSession, query.lookups, env or {}, {}) if query.lookups else None
    try:
        if lookups is not None:
            lookups.load_first()  # the lookup tables' rows now, as a job starting now would join them
        query_handle = None
        for mode in ("update", "append"):
            writer = query.result.writeStream.foreachBatch(collect).outputMode(mode)
            writer = writer.option("checkpointLocation", f"{checkpoint}/{mode}")
            writer = writer.trigger(availableNow=True) if bounded else writer.trigger(processingTime="1 second")
            try:
                query_handle = writer.start()
                if lookups is not None:
                    lookups.start(query_handle)
                break
            except AnalysisException:
                if mode == "append":
                    raise
        assert query_handle is not None
        deadline = time.monotonic() + timeout
        timed_out = False
        while query_handle.isActive:
            with lock:
                if len(collected) >= limit:
                    break
            if time.monotonic() > deadline:
                timed_out = True
                break
            query_handle.awaitTermination(0.2)
        if query_handle.isActive:
            query_handle.stop()
        failed = lookup_failure(query_handle)
        if failed is not None:
            raise LookupFailed(failed)
        error = query_handle.exception()
        if error is not None:
            raise error
        return PreviewResult(query.result.columns, collected[:limit], timed_out)
    finally:
        if lookups is not None:
            lookups.stop()
        shutil.rmtree(checkpoint, ignore_errors=True)
