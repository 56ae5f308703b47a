"""Reloading a running query's lookup tables, and what it says about them.

Each lookup table of a query is loaded once before the query starts (a query never runs without
its reference data), then reloaded on one thread per query at a fixed rate: every
``lookup.full-cache.periodic-reload.interval`` from the first load. A reload that loaded swaps the
snapshot in (``rule.py``) and lets the old one go; a micro-batch that began before the swap keeps
the snapshot it was planned with.

A reload that fails after ``lookup.max-retries`` more attempts keeps the last good snapshot: the
query goes on, ``degraded``, and its status says why and how old the snapshot is. It is tried
again at the next interval. Once the snapshot is older than ``lookup.max-staleness`` (when set),
the query is failed: the rule refuses the snapshot to any micro-batch planned from then on, the
query is stopped, and its runner treats that as a failure (``failure``), so the restart strategy
decides what follows.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from jobs.connectors import lookup_rows
from jobs.connectors.base import LoadFailed
from jobs.connectors.jdbc import DatabaseRows
from jobs.lookup import partial, rule
from jobs.lookup.load import Loaded, Loader
from runner.core.lookup import LookupOptions
from runner.core.protocol.status import LookupStatus
from runner.core.tables import TableDef

log = logging.getLogger(__name__)

_ATTRIBUTE = "_sql_runner_lookups"
HISTORY = 200  # snapshots remembered per table
RETRY_PAUSE_SECONDS = 1.0  # before the first retry of a failed load; doubled for each further one


@dataclass(frozen=True)
class Marker:
    """Where a lookup table's snapshot goes in a query's plan (``rule.marker``)."""

    table: TableDef
    frame: DataFrame
    id: int


class LookupFailed(RuntimeError):
    """A lookup table could not be had: its first load failed, or its snapshot grew too old."""


def _iso(epoch: float | None) -> str | None:
    return None if epoch is None else datetime.fromtimestamp(epoch, UTC).isoformat(timespec="milliseconds")


class LookupTable:
    """One lookup table of one running query: its current snapshot and its reloads."""

    def __init__(self, spark: SparkSession, marker: Marker, env: Mapping[str, str], label: dict[str, Any]):
        self.marker, self.label = marker, label
        self.table = marker.table
        self.options = LookupOptions.of(self.table)
        self.loader = Loader(spark, self.table, env)
        self.rule = rule.rule(spark)
        self.snapshot: Loaded | None = None
        self.loaded_at: float | None = None  # epoch seconds the current snapshot was read
        self.next_at = 0.0  # monotonic time of the next reload
        self.error: str | None = None  # the last reload's failure, until a reload succeeds
        self.failing_since: float | None = None
        self.reloads = 0
        self.failed_reloads = 0
        self.fatal: str | None = None
        self.lock = threading.Lock()
        # (load began, swapped in, rows) of the recent snapshots, in epoch seconds: the rows are the source's as of
        # some moment between the first two
        self.history: deque[tuple[float, float, int]] = deque(maxlen=HISTORY)

    def load(self, stopping: threading.Event | None = None) -> bool:
        """One reload: up to ``lookup.max-retries`` more attempts after a failure. True if a snapshot was
        swapped in; on failure the last good one stays, and the failure is kept for the status."""
        began = time.monotonic()
        self.next_at = (self.next_at or began) + self.options.reload_seconds
        if self.next_at <= began:  # a reload that took longer than the interval: the next is due now
            self.next_at = began
        pause = RETRY_PAUSE_SECONDS
        failure = ""
        for attempt in range(self.options.max_retries + 1):
            if attempt:
                if stopping is not None and stopping.wait(pause):
                    return False
                if stopping is None:
                    time.sleep(pause)
                pause *= 2
            read_at = time.time()
            try:
                loaded = self.loader.load()
            except LoadFailed as error:
                failure = str(error)
                continue
            self._swap(loaded, read_at)
            return True
        self._failed(failure)
        return False

    def _swap(self, loaded: Loaded, read_at: float) -> None:
        relation = rule.cached_relation(loaded.frame)
        with self.lock:
            old = self.snapshot
            self.rule.put(self.marker.id, relation)
            self.snapshot, self.loaded_at = loaded, read_at
            self.history.append((read_at, time.time(), loaded.rows))
            recovered = self.error is not None
            self.error, self.failing_since = None, None
            self.reloads += 1
        if old is not None:
            # A batch planned with it may still read it: it rebuilds any block it misses from the driver's copy.
            old.frame.unpersist()
        said = f"{self.table.name}: {loaded.rows} rows loaded in {loaded.seconds:.2f}s"
        if recovered:
            log.info(f"{said}; reloads work again", extra=self.label)
        else:
            log.debug(said, extra=self.label)

    def _failed(self, failure: str) -> None:
        now = time.time()
        with self.lock:
            self.error = failure
            self.failing_since = self.failing_since or now
            self.failed_reloads += 1
            age = now - self.loaded_at if self.loaded_at is not None else None
        limit = self.options.max_staleness_seconds
        kept = f"keeping the snapshot read {age:.0f}s ago" if age is not None else "no snapshot yet"
        log.warning(f"{self.table.name}: reload failed ({failure}); {kept}", extra=self.label)
        if limit is not None and age is not None and age > limit:
            self.fail(
                f"lookup table {self.table.name}: its snapshot is {age:.0f}s old, more than 'lookup.max-staleness' "
                f"allows ({limit:.0f}s); the last reload failed: {failure}"
            )

    def fail(self, reason: str) -> None:
        """Refuse the snapshot to every micro-batch planned from now on."""
        with self.lock:
            self.fatal = reason
            self.rule.put(self.marker.id, reason)

    def release(self) -> None:
        """Let the snapshot go once the query ended; a plan that still meets the marker fails, never reads it
        empty."""
        with self.lock:
            self.rule.put(self.marker.id, f"lookup table {self.table.name}: its query ended")
            snapshot, self.snapshot = self.snapshot, None
        if snapshot is not None:
            snapshot.frame.unpersist()

    def status(self) -> LookupStatus:
        with self.lock:
            return LookupStatus(
                table=self.table.name,
                rows=self.snapshot.rows if self.snapshot else None,
                loaded_at=_iso(self.loaded_at),
                reload_seconds=self.options.reload_seconds,
                error=self.error,
                failing_since=_iso(self.failing_since),
                reloads=self.reloads,
                failed_reloads=self.failed_reloads,
            )


class PartialTable:
    """One PARTIAL lookup table of one running query: its look-up functions in the rule, and their counts."""

    def __init__(self, spark: SparkSession, marker: Marker, env: Mapping[str, str], label: dict[str, Any]):
        self.spark, self.marker, self.label = spark, marker, label
        self.table = marker.table
        self.options = LookupOptions.of(self.table)
        database = lookup_rows(spark, self.table, env)
        # Only a database's table takes a PARTIAL cache (runner/core/connectors/: Connector.lookup_caches).
        assert isinstance(database, DatabaseRows)
        self.database = database
        self.rule = rule.rule(spark)
        self.stats: dict[str, Any] | None = None
        self.error: str | None = None

    def load(self) -> bool:
        """Check the database has the table and its columns (up to ``lookup.max-retries`` more attempts), then
        put the look-up functions in the rule. False (the reason in ``error``) if the database cannot say."""
        pause = RETRY_PAUSE_SECONDS
        for attempt in range(self.options.max_retries + 1):
            if attempt:
                time.sleep(pause)
                pause *= 2
            try:
                names = self.database.column_names()
            except LoadFailed as error:
                self.error = str(error)
                continue
            identity = f"{self.table.name} {self.marker.id} {uuid.uuid4().hex}"
            schema = self.database.schema
            spec = partial.spec_of(self.table.name, self.database.db, names, schema, identity, self.options)
            inner, outer, self.stats = partial.functions(self.spark, spec, schema)
            self.rule.putPartial(self.marker.id, inner, outer, self.table.name)
            self.error = None
            return True
        return False

    def release(self) -> None:
        self.rule.forgetPartial(self.marker.id)
        self.rule.put(self.marker.id, f"lookup table {self.table.name}: its query ended")

    def status(self) -> LookupStatus:
        stats = self.stats or {}
        value = {name: int(accumulator.value) for name, accumulator in stats.items()}
        return LookupStatus(
            table=self.table.name,
            cache="PARTIAL",
            hits=value.get("hits", 0),
            misses=value.get("misses", 0),
            held=value.get("held", 0),
        )


class Lookups:
    """The lookup tables of one query and the thread that reloads them."""

    def __init__(self, spark: SparkSession, markers: Sequence[Marker], env: Mapping[str, str], label: dict[str, Any]):
        self.label = label
        full = [marker for marker in markers if LookupOptions.of(marker.table).cache == "FULL"]
        self.tables = [LookupTable(spark, marker, env, label) for marker in full]
        self.partials = [PartialTable(spark, marker, env, label) for marker in markers if marker not in full]
        self.stopping = threading.Event()
        self.changed = threading.Event()  # a reload failed or recovered: the status should say so
        self.query: StreamingQuery | None = None
        self._thread: threading.Thread | None = None

    def load_first(self) -> None:
        """Each table's first snapshot, before the query starts; LookupFailed if one cannot be had."""
        for keyed in self.partials:
            if not keyed.load():
                self.release()
                raise LookupFailed(f"lookup table {keyed.table.name} could not be read: {keyed.error}")
        for table in self.tables:
            if not table.load():
                self.release()
                raise LookupFailed(f"lookup table {table.table.name} could not be loaded: {table.error}")
            log.info(
                f"lookup table {table.table.name}: {table.snapshot.rows if table.snapshot else 0} rows, reloaded "
                f"every {table.options.reload_seconds:g}s",
                extra=self.label,
            )

    def start(self, query: StreamingQuery) -> None:
        self.query = query
        setattr(query, _ATTRIBUTE, self)
        if self.tables:  # FULL tables are reloaded; PARTIAL ones expire key by key in their caches
            self._thread = threading.Thread(target=self._run, name="sql-runner-lookups", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        try:
            while not self.stopping.is_set():
                if self.query is not None and not _active(self.query):
                    break
                table = min(self.tables, key=lambda t: t.next_at)
                wait = table.next_at - time.monotonic()
                if wait > 0:
                    self.stopping.wait(min(wait, 1.0))  # a second at most: notice a query that ended
                    continue
                had_error = table.error
                table.load(self.stopping)
                if table.fatal is not None:
                    self.changed.set()
                    self._stop_query()
                    break
                if (table.error is None) != (had_error is None) or table.error:
                    self.changed.set()
        except Exception as error:  # noqa: BLE001 - a reloader that dies must not leave the query silently stale
            for table in self.tables:
                table.fail(f"lookup tables could not be reloaded: {type(error).__name__}: {error}")
            self._stop_query()
        finally:
            self.release()

    def _stop_query(self) -> None:
        query = self.query
        if query is None:
            return
        try:
            if query.isActive:
                query.stop()
        except Exception as error:  # noqa: BLE001 - the JVM may be going away; the rule refuses the snapshot anyway
            log.warning(f"could not stop the query: {error}", extra=self.label)

    def failure(self) -> str | None:
        """Why the query was failed by its lookup tables, if it was."""
        return next((t.fatal for t in self.tables if t.fatal is not None), None)

    def statuses(self) -> list[LookupStatus]:
        return [table.status() for table in self.tables] + [keyed.status() for keyed in self.partials]

    def degraded(self) -> bool:
        return any(table.error is not None for table in self.tables)

    def stop(self) -> None:
        self.stopping.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=30)
        self.release()

    def release(self) -> None:
        for table in self.tables:
            table.release()
        for keyed in self.partials:
            keyed.release()


def _active(query: StreamingQuery) -> bool:
    try:
        return bool(query.isActive)
    except Exception:  # noqa: BLE001 - Spark is gone
        return False


def lookups_of(query: StreamingQuery) -> Lookups | None:
    return getattr(query, _ATTRIBUTE, None)


def failure(query: StreamingQuery) -> str | None:
    """Why ``query`` was failed by its lookup tables (it was stopped, not failed, by Spark), if it was."""
    lookups = lookups_of(query)
    return lookups.failure() if lookups is not None else None
