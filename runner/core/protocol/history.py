"""``history/<name>/<timestamp>.json``: one entry per decision about a job, or per event of its own.

The runner records every deploy decision (inputs, reasons, outcome); a job or the session records
what happened to it that nobody decided (Spark refusing its restored state, a restart, parking).
Entries are never overwritten and sort by time. ``write_history`` is the one writer, ``read_history``
the one reader.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from pydantic import ConfigDict

from runner.core import layout
from runner.core.bucket import Bucket, PreconditionFailed
from runner.core.protocol.document import Document, Part, read
from runner.core.protocol.planned import PlannedAction


class SavepointTaken(Part):
    """The savepoint a stop took."""

    key: str
    graceful: bool  # stopped at a batch boundary (else killed: the savepoint is its latest checkpoint)
    files: int = 0
    last_committed_batch: int | None = None


class Result(StrEnum):
    OK = "ok"
    FAILED = "failed"


class Outcome(Part):
    """What carrying a decision out did; filled in step by step, so it is not frozen."""

    model_config = ConfigDict(frozen=False)

    result: Result = Result.OK
    error: str | None = None
    job: str | None = None  # the started job's id on its target
    run_id: str | None = None
    checkpoint: str | None = None
    savepoint: SavepointTaken | None = None
    graceful: bool | None = None  # a stop without a savepoint: whether it stopped at a batch boundary
    restored_from: str | None = None
    resumed_checkpoint: str | None = None
    continuation: list[str] = []  # where each source of a new version continues
    retention_deleted: list[str] = []

    @property
    def failed(self) -> bool:
        return self.result == Result.FAILED


class HistoryEntry(PlannedAction, Document):
    """A planned action as it was carried out (``decision``: start, update, restore, ...), or what was done or
    happened outside a plan (stop, refused, failing, parked, ...): when, where, on what, and its outcome. A
    reason recorded as text by the first release reads as ``RECORDED_TEXT``."""

    at: str  # ISO time of the decision
    team: str | None = None
    target: str | None = None
    inputs: dict[str, Any] = {}  # what the decision was made on, as recorded for people
    outcome: Outcome = Outcome()
    seconds: float | None = None
    requested_by: str | None = None  # who asked, when someone did through the console (its token's name)


def _stamp(now: datetime) -> str:
    """Sortable, filename-safe UTC time with milliseconds."""
    return now.astimezone(UTC).strftime("%Y%m%dT%H%M%S.%f")[:-3] + "Z"


def write_history(bucket: Bucket, entry: HistoryEntry, now: datetime) -> str:
    """``history/<name>/<timestamp>.json``; never overwrites an earlier entry. Returns its key."""
    for attempt in range(100):
        key = f"{layout.history(entry.name)}{_stamp(now)}{'' if attempt == 0 else f'-{attempt}'}.json"
        try:
            bucket.write(key, entry.encode(), if_absent=True)
            return key
        except PreconditionFailed:  # two entries in the same millisecond: take the next name
            continue
    raise RuntimeError(f"could not write a history entry for {entry.name}")


def read_history(bucket: Bucket, name: str) -> list[HistoryEntry]:
    """Every entry of ``name``'s history, oldest first."""
    entries = []
    for key in bucket.keys(layout.history(name)):
        entry = read(bucket, key, HistoryEntry)
        if entry is not None:
            entries.append(entry)
    return entries
