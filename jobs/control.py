"""The running job's side of the control plane, through the state store.

- It publishes its progress to ``status/<name>.json`` after every micro-batch, so
  ``sql-runner status`` works the same on every target: the last micro-batch as
  ``progress``, and the run's recent ones (oldest first) as ``recent-progress``, so rates
  and the time the run's first batch completed can be read over more than one batch.
  Progress is polled (``POLL_SECONDS``), with the query's own JSON of it: a Python
  ``StreamingQueryListener`` would have Spark call into Python for every event and build
  each progress object field by field over Py4J, which cost a 100 k-event micro-batch
  about a seventh of its time on a 2-core machine (bench/results/NOTEBOOK.md).
- Every status carries where the run stands as its restart state machine says
  (``runner/core/restart_machine.py``): state, restarts, consecutive failures, the next
  retry, whether it gave up. Each transition of the machine is published at once; the
  machine is the only writer of those fields, in application jobs and session queries alike.
- When Spark refuses to start from the restored state (``refused_restore``), it says so
  in its status and in ``history/<name>/``, and stops: restoring the same state again
  would fail the same way, so the next ``plan`` proposes a new version instead.
- It watches ``control/<name>/stop.json``. On a stop request for its version it waits
  until no micro-batch is in flight, stops its queries, and acknowledges with
  ``control/<name>/stopped.json`` — the runner then takes the savepoint.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from pyspark.sql.streaming import StreamingQuery

from jobs import boundary
from jobs.changelog.engine import BatchOutcome, changelog_of
from jobs.lookup.refresh import Lookups, lookups_of
from jobs.query import first_line
from runner.core import logs, restarts
from runner.core.bucket import Bucket, bucket_from
from runner.core.protocol.control import StopAck, StopRequest, read_stop_request, write_stop_ack
from runner.core.protocol.document import now
from runner.core.protocol.history import HistoryEntry, Outcome, Result, write_history
from runner.core.protocol.jobspec import JobSpec
from runner.core.protocol.status import (
    BatchProgress,
    JobStatus,
    OperatorProgress,
    SourceProgress,
    known_watermark,
    read_status,
    write_status,
)
from runner.core.reasons import Reason
from runner.core.restart_machine import RestartMachine

log = logging.getLogger(__name__)

POLL_SECONDS = 0.5
RECENT_BATCHES = 20  # micro-batches of the run kept in its status, oldest first

# Spark's words for "this checkpoint cannot serve this query" (state schema or operator
# checks, or the checkpoint's sources). Anything else is an ordinary failure.
_REFUSALS = (
    "STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE",
    "STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE",
    "STATE_STORE_INVALID_VALUE_SCHEMA_EVOLUTION",
    "STATE_STORE_COLUMN_FAMILY_SCHEMA_INCOMPATIBLE",
    "STATE_STORE_INVALID_CONFIG_AFTER_RESTART",
    "STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA",
    "STREAMING_STATEFUL_OPERATOR_MISSING_STATE_DIRECTORY",
    "StateSchemaNotCompatible",
    "sources in the checkpoint offsets and now there are",
    "CHANGELOG_ENGINE_OF_CHECKPOINT",  # jobs/changelog/incremental.py: the checkpoint is the other engine's
)


def refused_restore(error: BaseException) -> str | None:
    """Spark's reason when ``error`` is its refusal to run the query from the checkpoint's state."""
    text = str(error)
    if not any(marker in text for marker in _REFUSALS):
        return None
    return re.sub(r"^.*?terminated with exception: ", "", first_line(text))


# Exceptions that only wrap the one that explains a failure.
_WRAPPERS = (
    "Py4JJavaError",
    "PythonException",
    "StreamingQueryException",
    "ForeachBatchUserFuncException",
    "SparkException",
    "CapturedException",
)
_EXCEPTION_LINE = re.compile(r"^\s*(?:[\w.]+\.)?(\w+(?:Error|Exception)):\s*(.+)$")


def failure_reason(text: str) -> str:
    """One line that explains a query's failure: the innermost exception a wrapper quotes
    (a ``code`` snippet's ``ValueError: ...``), else the first line of the message."""
    for line in text.splitlines():
        match = _EXCEPTION_LINE.match(line.removeprefix(": "))  # Py4J quotes the Java exception after ": "
        if match and match.group(1) not in _WRAPPERS and "Traceback" not in match.group(2):
            return f"{match.group(1)}: {match.group(2).strip()}"
    return re.sub(r"^.*?terminated with exception: ", "", first_line(text))


@dataclass(frozen=True)
class Labels:
    """What every status of the run carries besides where it stands: its launch, or the session it runs in."""

    launch_id: str | None = None
    mode: str | None = None
    session_run: str | None = None


class JobControl:
    """A run's status and stop requests. Its restart state machine (``machine``) says where the run stands:
    every transition of it is published here, and every status carries it."""

    def __init__(self, spec: JobSpec, machine: RestartMachine | None = None, *, session_run: str | None = None):
        self.spec = spec
        self.label = logs.job(spec.manifest.name, spec.manifest.version)  # extra= for its log lines
        self.bucket: Bucket | None = bucket_from(spec.store["manifests"]) if spec.store else None
        self.version = spec.manifest.version
        self.started = now()
        self.stop_requested = threading.Event()
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._recent: deque[BatchProgress] = deque(maxlen=RECENT_BATCHES)
        self.labels = (
            Labels(mode="session", session_run=session_run) if session_run else Labels(launch_id=spec.launch_id)
        )
        self.machine = machine or RestartMachine(spec.manifest.restart_strategy or restarts.DEFAULT)
        self.machine.listen(lambda _transition: self.publish())
        self._watcher: threading.Thread | None = None
        self._progress_lock = threading.Lock()
        self.published_batch: int | None = None  # the last micro-batch whose progress was published
        self.lookups: Lookups | None = None  # the running query's lookup tables, shown in every status
        self.changelog_engine: str | None = None  # a changelog query's engine, shown in every status
        self._previous: BatchProgress | None = None  # the previous run's last micro-batch (same version)
        self._previous_read = False

    def publish(self, progress: Sequence[BatchProgress] = ()) -> None:
        """Write the job's status: where its restart state machine says it stands, with ``progress``:
        micro-batches completed since the last call (oldest first); failures to publish never stop the job.

        Progress may be polled after the run stopped or failed: it updates the progress shown, and the
        machine keeps the run's end.
        """
        if self.bucket is None:
            return
        with self._lock:
            self._recent.extend(progress)
            standing = self.machine.standing
            if standing.state is None:  # not started: nothing to say yet
                return
            previous = None if self._recent else self._previous_progress()
            status = JobStatus(
                name=self.spec.manifest.name,
                version=self.version,
                run_id=self.spec.run_id,
                state=standing.state,
                started_at=self.started,
                updated_at=now(),
                **asdict(self.labels),
                restarts=standing.restarts,
                failures=standing.failures,
                failure_times=list(standing.failure_times),
                retry_at=_time(standing.retry_at),
                gave_up=standing.gave_up,
                error=standing.error,
                state_refused=standing.state_refused,
                reason=standing.reason,
                # a stopped or failed job still shows where it got to
                progress=self._recent[-1] if self._recent else None,
                recent_progress=list(self._recent),
                previous_progress=previous,
                lookups=self.lookups.statuses() if self.lookups is not None else [],
                changelog_engine=self.changelog_engine,
            )
            try:
                write_status(self.bucket, status)
            except Exception as failure:  # noqa: BLE001 - status is best effort; the data path matters more
                log.warning(f"could not publish status: {failure}", extra=self.label)

    def _previous_progress(self) -> BatchProgress | None:
        """The last micro-batch of the run (or attempt) this one continues: the status found when this one
        first publishes, if it is of the same version (a new version starts from clean state or from where
        the previous version stopped, so its batches are not this state's)."""
        if not self._previous_read:
            self._previous_read = True
            try:
                found = read_status(self.bucket, self.spec.manifest.name) if self.bucket is not None else None
            except Exception as failure:  # noqa: BLE001 - status is best effort
                log.warning(f"could not read the previous run's status: {failure}", extra=self.label)
                found = None
            if found is not None and found.version == self.version:  # also a YARN re-attempt of this very run
                self._previous = found.last_progress
        return self._previous

    def publish_progress(self, queries: Sequence[StreamingQuery]) -> bool:
        """Publish the output query's micro-batches completed since the last call; True if there were any.

        Polled rather than pushed by a listener: with many queries (a session), Python listeners on
        Spark's shared listener queue fall behind and Spark drops events. Usually one batch completed
        since the last call (the query's last progress); its first batches, or several between two
        calls, come from its recent progress."""
        if self.bucket is None or not queries:
            return False
        with self._progress_lock:
            self.lookups = lookups_of(queries[0])
            engine = changelog_of(queries[0])
            self.changelog_engine = engine.engine if engine is not None else None
            try:
                new = progress_since(queries[0], self.published_batch)
            except Exception:  # noqa: BLE001 - published on the next round
                return False
            if not new:
                lookups = self.lookups
                if lookups is not None and lookups.changed.is_set() and lookups.failure() is None:  # failed, recovered
                    lookups.changed.clear()
                    self.publish()
                return False
            self.published_batch = new[-1].batchId
            self.publish([progress_record(p, engine.outcome(p.batchId) if engine else None) for p in new])
            return True

    def refused(self, reason: str) -> None:
        """Spark refused the restored state: the run ends, and its status and history say so."""
        self.machine.refused(reason)
        if self.bucket is None:
            return
        entry = HistoryEntry(
            name=self.spec.manifest.name,
            at=now(),
            decision="refused",
            summary="Spark refused the restored state: the job stopped",
            reasons=[
                Reason.of("SPARK_REFUSED_STATE", refusal=reason),
                Reason.of("NEXT_PLAN_STARTS_CLEAN", version=self.version, next=self.version + 1),
            ],
            version=self.version,
            inputs={"run-id": self.spec.run_id, "checkpoint": self.spec.checkpoint},
            outcome=Outcome(result=Result.FAILED, error=reason),
        )
        try:
            write_history(self.bucket, entry, datetime.now(UTC))
        except Exception as error:  # noqa: BLE001 - the status already says why; keep stopping
            log.warning(f"could not record the refusal in history: {error}", extra=self.label)

    def watch(self, queries: list[StreamingQuery]) -> threading.Thread:
        """Start the thread that turns a stop request into a stop at a batch boundary."""
        thread = threading.Thread(target=self._watch, args=(queries,), name="sql-runner-control", daemon=True)
        thread.start()
        self._watcher = thread
        return thread

    def finish_stop(self, timeout: float = 150.0) -> None:
        """While a stop request is carried out, wait until it is acknowledged: the queries end (and the
        job's main thread wakes) before the watcher writes the acknowledgement, and Spark must outlive it."""
        watcher = self._watcher
        if watcher is not None and self.stop_requested.is_set() and watcher is not threading.current_thread():
            watcher.join(timeout)

    def close(self) -> None:
        self._done.set()

    def answer_stop(self, act: Callable[[StopRequest], object]) -> StopRequest | None:
        """The stop responder of application jobs and session queries alike: if a stop request for this
        job's version is pending, carry it out with ``act`` and acknowledge it (the runner then takes the
        savepoint). Returns the request answered, if any."""
        if self.bucket is None:
            return None
        request = read_stop_request(self.bucket, self.spec.manifest.name)
        if request is None or not request.meant_for(self.version):
            return None
        self.stop_requested.set()
        act(request)
        write_stop_ack(
            self.bucket, self.spec.manifest.name, StopAck(id=request.id, version=self.version, run_id=self.spec.run_id)
        )
        return request

    def _watch(self, queries: list[StreamingQuery]) -> None:
        def stop(request: StopRequest) -> None:
            log.info(f"stop requested ({request.id}): stopping after the current micro-batch", extra=self.label)
            stop_between_batches(queries)

        while not self._done.is_set():
            if self.publish_progress(queries):
                recovered = self.machine.progressed()
                if recovered is not None:
                    log.info(
                        f"running again after {recovered.recovered_from} failure(s): a micro-batch completed",
                        extra=self.label,
                    )
            try:
                if self.answer_stop(stop) is not None:
                    return
            except Exception as error:  # noqa: BLE001 - a store hiccup must not kill the job
                log.warning(f"could not answer stop requests: {error}", extra=self.label)
            self._done.wait(POLL_SECONDS)


def _time(epoch: float | None) -> str | None:
    """Epoch seconds as a status says a time (UTC, ISO 8601, milliseconds)."""
    return None if epoch is None else datetime.fromtimestamp(epoch, UTC).isoformat(timespec="milliseconds")


def stop_between_batches(queries: list[StreamingQuery], timeout: float = 120.0) -> bool:
    """Stop each query between micro-batches, so that no batch is left half written.

    Every query's boundary (``jobs/boundary.py``) closes first, all together: from then on no
    batch begins writing. A query whose last batch to begin is committed is stopped at once; one
    still writing it (or committing it) is stopped as soon as that batch completes. A batch that
    meanwhile comes to the closed boundary ends its query unwritten (it runs on restore). True if
    every query stopped so within ``timeout`` (after it, a query is stopped regardless: its batch
    in flight, if any, is replayed by whoever restores the checkpoint).
    """
    deadline = time.monotonic() + timeout
    waiting = [(query, boundary.of(query).close()) for query in queries]
    while waiting and time.monotonic() < deadline:
        still = []
        for query, began in waiting:
            if query.isActive and began is not None and not _committed(query, began):
                still.append((query, began))
            elif query.isActive:
                query.stop()
        waiting = still
        if waiting:
            time.sleep(0.02)
    for query, _ in waiting:
        if query.isActive:
            query.stop()
    return not waiting


def _committed(query: StreamingQuery, batch_id: int) -> bool:
    """Whether the query reported batch ``batch_id`` (or a later one) as run, which it does once committed."""
    progress = query.lastProgress
    if progress is None:
        return False
    return progress.batchId > batch_id or (progress.batchId == batch_id and ran(progress))


def ran(progress: Any) -> bool:
    """Whether ``progress`` is a micro-batch that ran. A query with nothing to do reports itself idle
    now and then (every ``spark.sql.streaming.noDataProgressEventInterval``, 10 s) in a progress of
    its own: no rows, no batch run, and the id of the batch it will run next."""
    return "addBatch" in (progress.durationMs or {})


def progress_since(query: StreamingQuery, published: int | None) -> list[Any]:
    """The query's micro-batches completed after batch ``published`` (None: all it keeps), oldest first.

    Usually one batch completed since the last look (the query's last progress); its first
    batches, or several between two looks, come from its recent progress. An idle query's
    progress is not a batch: it names the batch to come, which is published once it has run."""
    last = query.lastProgress
    if last is None or last.batchId == published:
        return []
    if published is not None and last.batchId == published + 1:
        return [last] if ran(last) else []
    new: list[Any] = []
    for progress in query.recentProgress:
        if not ran(progress) or (published is not None and progress.batchId <= published):
            continue
        if not new or progress.batchId > new[-1].batchId:
            new.append(progress)
    return new


def progress_record(progress: Any, changes: BatchOutcome | None = None) -> BatchProgress:
    """What the status shows of one micro-batch (a ``StreamingQueryProgress``; ``changes``: what a changelog
    query's engine did in it). A source table's changes/s is its share of the batch's input rate. Spark
    reports the start of the epoch as the watermark of a query that has none yet: the status says none."""
    event_time = progress.eventTime or {}
    rates = None
    if changes is not None:
        total = sum(changes.changes.values())
        rate = progress.inputRowsPerSecond or 0.0
        rates = {table: (rate * n / total if total else 0.0) for table, n in changes.changes.items()}
    return BatchProgress(
        changes=changes.changes if changes else None,
        changes_per_second=rates,
        keys=changes.keys if changes else None,
        batch=progress.batchId,
        timestamp=progress.timestamp,
        input_rows=progress.numInputRows,
        input_rows_per_second=progress.inputRowsPerSecond,
        processed_rows_per_second=progress.processedRowsPerSecond,
        batch_duration_ms=(progress.durationMs or {}).get("triggerExecution"),
        watermark=known_watermark(event_time.get("watermark")),
        sources=[_source(source) for source in progress.sources or ()],
        operators=[
            OperatorProgress(
                name=operator.operatorName,
                rows=operator.numRowsTotal,
                rows_updated=operator.numRowsUpdated,
                memory_bytes=operator.memoryUsedBytes,
            )
            for operator in progress.stateOperators or ()
        ],
        sink=progress.sink.description if progress.sink is not None else None,
    )


def _source(source: Any) -> SourceProgress:
    """One source of a micro-batch; a Kafka source's lag is Spark's ``maxOffsetsBehindLatest``."""
    behind = (source.metrics or {}).get("maxOffsetsBehindLatest")
    return SourceProgress(
        description=source.description,
        input_rows=source.numInputRows,
        input_rows_per_second=source.inputRowsPerSecond,
        offsets_behind=int(float(behind)) if behind not in (None, "") else None,
    )
