"""What the console's overview (and ``/metrics``) shows of each deployed query, read from the state store.

A query's state is ``sql-runner status``'s (``runner/deploy/status.py``), with one more: **stalled**,
a query that runs but has committed no micro-batch for ``Stall.after`` its trigger interval — its
source stopped, or it is stuck. Rates and batch durations over the last minutes come from the
statuses the query published (each carries its recent micro-batches), gathered as the console reads
them, so the charts reach back further than any one status.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from runner.console import figures
from runner.core import layout
from runner.core.protocol.session import read_health
from runner.core.protocol.status import BatchProgress
from runner.deploy.status import JobView, observe_job
from runner.state import deadletters, records
from runner.state.store import Store
from runner.targets.modes import Targets

WINDOW = 600.0  # seconds of rates and batch durations the charts show
DEAD_LETTER_WINDOW = timedelta(hours=1)


@dataclass(frozen=True)
class Stall:
    """A running query is stalled after ``batches`` trigger intervals without a committed micro-batch, and
    never sooner than ``at_least`` seconds (a quiet second is not a stall)."""

    batches: float = 10.0
    at_least: float = 60.0

    def after(self, trigger_seconds: float) -> float:
        return max(self.batches * trigger_seconds, self.at_least)


def _epoch(iso: str | None) -> float | None:
    return None if iso is None else datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def batch_end(progress: BatchProgress) -> float | None:
    """When a micro-batch was committed (its trigger began ``timestamp``, it took ``batch_duration_ms``)."""
    began = _epoch(progress.timestamp)
    return None if began is None else began + (progress.batch_duration_ms or 0) / 1000


class Samples:
    """Each query's micro-batches of the last ``WINDOW`` seconds: (committed at, rows/s, batch ms)."""

    def __init__(self) -> None:
        self._seen: dict[str, tuple[str, int]] = {}  # the last (run, batch) taken per query
        self._samples: dict[str, deque[tuple[float, float, int]]] = {}
        self._lock = threading.Lock()

    def keep(self, names: set[str]) -> None:
        """Forget the queries no longer deployed."""
        with self._lock:
            for gone in set(self._samples) - names:
                del self._samples[gone]
                self._seen.pop(gone, None)

    def take(self, name: str, run_id: str, batches: list[BatchProgress], now: float) -> list[tuple[float, float, int]]:
        with self._lock:
            samples = self._samples.setdefault(name, deque())
            last_run, last_batch = self._seen.get(name, ("", -1))
            for progress in batches:
                if run_id == last_run and progress.batch <= last_batch:
                    continue
                end = batch_end(progress)
                if end is not None:
                    samples.append((end, progress.input_rows_per_second or 0.0, progress.batch_duration_ms or 0))
                last_run, last_batch = run_id, progress.batch
            self._seen[name] = (last_run, last_batch)
            while samples and samples[0][0] < now - WINDOW:
                samples.popleft()
            return list(samples)


def mode_of(target: str) -> str:
    return "session" if target == layout.SESSION_TARGET else "application"


def console_state(view: JobView, stall: Stall, now: float) -> tuple[str, str | None]:
    """The console's word for the query's state (``sql-runner status``'s, parked and stalled told apart),
    and why it is not well."""
    state, why = view.state, view.why
    if state.endswith("(parked)"):
        return "parked", why
    if state.startswith("failed"):
        return "failed", why
    if state.startswith("removed"):
        return "removed", "the manifest was removed" + (" but the job still runs" if view.job else "")
    if state not in ("running", "degraded"):
        return state, why
    status = view.status
    last = batch_end(status.progress) if status and status.progress else None
    since = last if last is not None else _epoch(status.started_at if status else None)
    if since is None:
        since = view.record.deployed_at.timestamp()
    trigger = view.record.manifest.trigger_seconds
    quiet = now - since
    if quiet > stall.after(trigger):
        what = "no micro-batch committed" if last is not None else "no micro-batch committed since it started"
        return "stalled", f"{what} for {quiet:.0f}s ({stall.after(trigger):.0f}s allowed, trigger {trigger:g}s)"
    return state, why


def watermark_delay(progress: BatchProgress | None) -> float | None:
    """Seconds between a micro-batch's start and its event-time watermark (None: it has none yet)."""
    if progress is None or not progress.watermark or progress.timestamp is None:
        return None
    began, watermark = _epoch(progress.timestamp), _epoch(progress.watermark)
    assert began is not None and watermark is not None
    return round(max(0.0, began - watermark), 3)


class Overview:
    """Rows of the overview, each read afresh from the store at most every ``fresh`` seconds."""

    def __init__(self, store: Store, targets: Targets, team: str, stall: Stall, fresh: float = 1.0):
        self.store, self.targets, self.team, self.stall, self.fresh = store, targets, team, stall, fresh
        self.samples = Samples()
        self._rows: list[dict[str, Any]] = []
        self._read_at = 0.0
        self._dead: dict[str, tuple[float, int]] = {}  # per query: (counted at, dead letters in the last hour)
        self._lock = threading.Lock()

    def rows(self) -> list[dict[str, Any]]:
        with self._lock:
            if time.monotonic() - self._read_at >= self.fresh:
                names = records.deployed_names(self.store.manifests)
                self._rows = [self.row(name) for name in names]
                self._read_at = time.monotonic()
                self.samples.keep(set(names))
            return self._rows

    def dead_letters_last_hour(self, name: str) -> int:
        counted_at, count = self._dead.get(name, (0.0, 0))
        if time.monotonic() - counted_at > 10.0:
            since = datetime.now(UTC) - DEAD_LETTER_WINDOW
            files = deadletters.files(self.store.checkpoints, name, since)
            count = len(deadletters.records(self.store.checkpoints, files))
            self._dead[name] = (time.monotonic(), count)
        return count

    def row(self, name: str) -> dict[str, Any]:
        at = datetime.now(UTC)
        now = at.timestamp()
        view = observe_job(self.store, self.targets, self.team, name, at)
        record, status = view.record, view.status
        state, why = console_state(view, self.stall, now)
        # after a savepoint or a restart, the figures of the micro-batch the run continues from
        progress = status.last_progress if status else None
        continued = status is not None and status.progress is None and progress is not None
        samples = self.samples.take(name, status.run_id, status.recent_progress, now) if status else []
        last = batch_end(progress) if progress else None
        delay = watermark_delay(progress)
        rate = None if progress is None else round(progress.input_rows_per_second or 0.0, 1)
        age = None if last is None else round(now - last, 1)
        read = {source.table for source in record.sources}
        event_time = any(t.watermark for t in record.tables if t.name in read)
        return {
            "name": name,
            "description": record.manifest.description,
            "mode": mode_of(record.target),
            "target": record.target,
            "version": record.version,
            "state": state,
            "why": why,
            "rows_per_second": rate,
            "batch_ms": progress.batch_duration_ms if progress else None,
            "series": {
                "t": [round(s[0], 3) for s in samples],
                "rate": [round(s[1], 1) for s in samples],
                "ms": [s[2] for s in samples],
            },
            "watermark_delay_s": delay,
            "kafka_lag": progress.offsets_behind if progress else None,
            "dead_letters_hour": self.dead_letters_last_hour(name),
            "restarts": status.restarts if status else 0,
            "last_batch": progress.batch if progress else None,
            "last_batch_age_s": age,
            "trigger_seconds": record.manifest.trigger_seconds,
            "job": view.job.job_id if view.job else None,
            "shown": {  # the figures as the page writes them
                "rate": figures.number(rate),
                "batch": figures.milliseconds(progress.batch_duration_ms if progress else None),
                "watermark": figures.duration(delay)
                if delay is not None
                else ("no watermark yet" if event_time else figures.NONE),
                "kafka_lag": figures.number(progress.offsets_behind if progress else None, 0),
                "last_batch": "no micro-batch yet"
                if progress is None
                else f"#{progress.batch}, {figures.duration(age)} ago" + (" (before the restart)" if continued else ""),
            },
        }

    def session(self) -> dict[str, Any] | None:
        """The team's session's health, if one has published it."""
        health = read_health(self.store.manifests)
        if health is None:
            return None
        updated = _epoch(health.updated_at)
        updated_age = None if updated is None else round(time.time() - updated, 1)
        return {
            "state": health.state.value,
            "run_id": health.run_id,
            "uptime_s": round(health.uptime_seconds),
            "running": health.queries.running,
            "failing": health.queries.failing,
            "parked": health.queries.parked,
            "stuck_builds": health.queries.stuck_builds,
            "invalid": health.invalid,
            "updated_age_s": updated_age,
            "shown": {"uptime": figures.duration(health.uptime_seconds), "updated": figures.duration(updated_age)},
        }
