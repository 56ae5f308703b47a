"""``status/<name>.json``: what a job (or a session query) last said about itself.

The job's control (``jobs/control.py``) is the one writer; ``read_status`` the one reader, for
``sql-runner status``, the plan's observations, the session target and a YARN re-attempt.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from pydantic import field_validator, model_validator

from runner.core import layout
from runner.core.bucket import Bucket
from runner.core.protocol.document import Document, Part, read


class JobState(StrEnum):
    """A job's own word on its state. ``failing``: between a failure and its restart."""

    RUNNING = "running"
    FAILING = "failing"
    STOPPED = "stopped"
    FAILED = "failed"

    @property
    def final(self) -> bool:
        """Once said, the run's state stays: a later progress report updates the progress only."""
        return self in (JobState.STOPPED, JobState.FAILED)


# Spark's watermark of a query that has none yet: its watermark's 0 ms, the start of the epoch.
_NO_WATERMARK = datetime(1970, 1, 1, tzinfo=UTC)


def known_watermark(value: str | None) -> str | None:
    """A micro-batch's event-time watermark as Spark reports it (ISO 8601), or None when it is Spark's way of
    saying there is none yet (the start of the epoch)."""
    if value is None:
        return None
    try:
        at = datetime.fromisoformat(value)
    except ValueError:
        return value
    return None if at == _NO_WATERMARK else value


class SourceProgress(Part):
    """One source of a micro-batch, as Spark described it."""

    description: str
    input_rows: int | None = None
    input_rows_per_second: float | None = None
    offsets_behind: int | None = None  # Kafka: the partition furthest behind the latest offset (records)


class OperatorProgress(Part):
    """One stateful operator of a micro-batch: the rows its state holds and how much memory they take."""

    name: str
    rows: int | None = None
    rows_updated: int | None = None
    memory_bytes: int | None = None


class BatchProgress(Part):
    """One completed micro-batch; ``timestamp`` is when its trigger began (it ended ``batch-duration-ms`` later)."""

    batch: int
    timestamp: str | None = None
    input_rows: int | None = None
    input_rows_per_second: float | None = None
    processed_rows_per_second: float | None = None
    batch_duration_ms: int | None = None
    watermark: str | None = None  # None: the query has no watermark yet
    # A changelog query (jobs/changelog/): changes read per source table, their rate, and the keys each holds.
    changes: dict[str, int] | None = None
    changes_per_second: dict[str, float] | None = None
    keys: dict[str, int] | None = None
    # The streaming plan's figures, from source to sink (the console draws them as a graph).
    sources: list[SourceProgress] = []
    operators: list[OperatorProgress] = []
    sink: str | None = None

    @field_validator("watermark")
    @classmethod
    def _no_watermark_yet(cls, value: str | None) -> str | None:
        """A status written by an earlier job said "no watermark yet" as Spark does, with the start of the epoch."""
        return known_watermark(value)

    @property
    def offsets_behind(self) -> int | None:
        """Kafka lag: the most records any partition of any source is behind its latest offset."""
        behind = [source.offsets_behind for source in self.sources if source.offsets_behind is not None]
        return max(behind) if behind else None


class LookupStatus(Part):
    """One lookup table of a running query (``jobs/lookup/``): its snapshot, and its last reload's failure."""

    table: str
    cache: str = "FULL"  # FULL: a snapshot reloaded; PARTIAL: keys looked up through bounded caches
    rows: int | None = None  # in the current snapshot
    loaded_at: str | None = None  # when the current snapshot was read
    reload_seconds: float | None = None
    error: str | None = None  # the last reload failed (the snapshot is kept): why
    failing_since: str | None = None
    reloads: int = 0
    failed_reloads: int = 0
    hits: int | None = None  # PARTIAL: keys found in a cache, since the query started
    misses: int | None = None  # PARTIAL: keys read from the database
    held: int | None = None  # PARTIAL: the most rows one cache held


class JobStatus(Document):
    name: str
    version: int
    run_id: str = ""
    state: JobState
    started_at: str
    updated_at: str
    launch_id: str | None = None  # one per start by the runner (a YARN re-attempt keeps it)
    mode: str | None = None  # "session" for a query hosted by the team's session
    session_run: str | None = None  # the session run hosting it
    # Where the run stands, as its restart state machine says (runner/core/restart_machine.py), in either mode:
    restarts: int = 0  # restarts of this run after failures
    failures: int = 0  # consecutive failures: since the run last completed a micro-batch
    failure_times: list[float] = []  # epoch seconds of the failures its restart strategy counts (a YARN re-attempt
    # of the run counts on from them)
    retry_at: str | None = None  # failing: when the restart is due (absent: it is being restarted)
    gave_up: bool = False  # failed, and no restart comes: an application job's until the next deploy, a session
    # query's (parked) until its manifest changes
    error: str | None = None
    state_refused: str | None = None  # Spark's reason for refusing the restored state
    reason: str | None = None  # stopped: why
    progress: BatchProgress | None = None  # the last completed micro-batch
    recent_progress: list[BatchProgress] = []  # the run's recent ones, oldest first
    # Until this run completes a micro-batch: the last one of the run before it, of the same version (this
    # run continues that run's state, restored from its savepoint or checkpoint), so where the query got
    # to stays visible across a savepoint or a restart.
    previous_progress: BatchProgress | None = None

    @model_validator(mode="before")
    @classmethod
    def _last_release(cls, data: Any) -> Any:
        """The last release said a session's query gave up with ``parked``, the wait before a restart in seconds
        after ``updated-at`` (``retry-in``), and an application job's consecutive failures not at all."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        if data.pop("parked", False):
            data["gave-up"] = True
        retry_in = data.pop("retry-in", None)
        if retry_in is not None and data.get("retry-at") is None and isinstance(data.get("updated-at"), str):
            due = datetime.fromisoformat(data["updated-at"]) + timedelta(seconds=float(retry_in))
            data["retry-at"] = due.isoformat(timespec="milliseconds")
        if data.get("failures", 0) is None:
            del data["failures"]
        return data

    @property
    def parked(self) -> bool:
        """A session query that gave up: the session holds it stopped until its manifest changes."""
        return self.gave_up and self.mode == "session"

    @property
    def last_progress(self) -> BatchProgress | None:
        """The query's last micro-batch: this run's, else the one its state continues from."""
        return self.progress or self.previous_progress

    lookups: list[LookupStatus] = []  # its lookup tables' snapshots
    # a changelog query's engine (jobs/changelog/): "incremental", or "recomputed every micro-batch: <why>"
    changelog_engine: str | None = None

    @property
    def degraded(self) -> bool:
        """Running on reference data it could not reload (a lookup table's last reload failed)."""
        return self.state == JobState.RUNNING and any(lookup.error for lookup in self.lookups)

    def of_run(self, version: int, run_id: str | None = None) -> bool:
        """Whether this status is about ``version`` (and, if given, that very run)."""
        return self.version == version and (run_id is None or self.run_id == run_id)


def write_status(bucket: Bucket, status: JobStatus) -> None:
    bucket.write(layout.status(status.name), status.encode())


def read_status(bucket: Bucket, name: str) -> JobStatus | None:
    return read(bucket, layout.status(name), JobStatus)
