"""What ``sql-runner status`` shows of a deployed job: its record, its target and its last progress."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from runner.core.catalog import Catalog
from runner.core.protocol.deployed import DeploymentRecord
from runner.core.protocol.status import BatchProgress, JobState, JobStatus, LookupStatus, read_status
from runner.state import records, savepoints
from runner.state.store import Store
from runner.targets.base import Ended, RunningJob
from runner.targets.modes import Targets


def _per_table(values: dict[str, Any] | None, shown) -> str | None:
    """``users 12.5, colors 0.0``: one value per source table of a changelog query."""
    if not values:  # none, or no table has the figure (keys held: see jobs/changelog/incremental.py)
        return None
    return ", ".join(f"{table} {shown(value)}" for table, value in values.items())


def age(iso: str | None, at: datetime) -> str:
    """How long before ``at`` the time ``iso`` was: ``42s``, ``3m05s``, ``2h10m``."""
    if iso is None:
        return "-"
    seconds = max(0, int((at - datetime.fromisoformat(iso)).total_seconds()))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def _lookup(lookup: LookupStatus, at: datetime) -> str:
    """``jdbc.users 1000 rows, 12s old``, and ``, reload failing`` when the last reload failed; a PARTIAL
    table: ``users PARTIAL, 1200 keys, 97% from cache, at most 5000 rows held``."""
    if lookup.cache == "PARTIAL":
        keys = (lookup.hits or 0) + (lookup.misses or 0)
        share = f", {100 * (lookup.hits or 0) / keys:.0f}% from cache" if keys else ""
        return f"{lookup.table} PARTIAL, {keys} keys{share}, at most {lookup.held or 0} rows held"
    rows = "no snapshot" if lookup.rows is None else f"{lookup.rows} rows, {age(lookup.loaded_at, at)} old"
    return f"{lookup.table} {rows}" + (", reload failing" if lookup.error else "")


def ended(status: JobStatus) -> str:
    """How a job that gave up is told apart, in its mode's words: a session parks the query until its manifest
    changes; an application job's restarts are used up until the next deploy."""
    if not status.gave_up:
        return ""
    return " (parked)" if status.parked else " (restarts used up)"


def next_restart(status: JobStatus, at: datetime) -> str:
    """When a failing job restarts: ``restart in 12s``, or ``restarting`` once it is due."""
    if status.retry_at is None:
        return "restarting"
    left = math.ceil((datetime.fromisoformat(status.retry_at) - at).total_seconds())
    return f"restart in {left}s" if left > 0 else "restarting"


@dataclass(frozen=True)
class JobView:
    """What is known of one deployed job: its record, where it runs, its own last word, and its state."""

    record: DeploymentRecord
    job: RunningJob | None
    status: JobStatus | None  # of the deployed version's run (None: it has said nothing yet)
    state: str  # running, degraded, failing, stopped, failed (parked), ..., not running, removed
    why: str | None


# what status says of a job whose YARN application failed all its attempts
GAVE_UP = (
    "YARN made every attempt the job asked for; the runner does not restart it itself: "
    "the next deploy restores it from its latest checkpoint"
)


def gave_up_on(gone: Ended, mine: JobStatus | None) -> bool:
    """Whether YARN gave up on the job's latest application (every attempt's driver died) after the job last said
    anything: no driver was left to say so. A job that said itself that it failed keeps its own words."""
    if not gone.failed:
        return False
    if mine is None:
        return True
    return mine.state != JobState.FAILED and (gone.at is None or datetime.fromisoformat(mine.updated_at) < gone.at)


def observe_job(store: Store, targets: Targets, team: str, name: str, at: datetime) -> JobView:
    """One deployed job's state: running, degraded (a lookup table's reloads fail), stopped, failed, not
    running or removed, and why when it is not well."""
    record, _ = records.read_deployed(store.manifests, name)
    assert record is not None, f"{name} is listed as deployed"
    job = targets.find(team, name)
    published = read_status(store.manifests, name)
    mine = published if published is not None and published.of_run(record.version) else None
    if record.removed:
        state = "removed" + (" (still running)" if job else "")
    elif job is not None:
        # a session query between restarts is still found, but failing
        state = "failing" if mine and mine.state == JobState.FAILING else "running"
        if state == "running" and mine and mine.degraded:
            state = "degraded"
    elif mine and mine.state.final:
        state = mine.state + ended(mine)
    else:
        state = "not running"
    # on YARN: how its latest application ended. One YARN gave up on (every attempt's driver died) had no driver
    # left to say so: what the job said before it ended is superseded, unless it said itself that it failed.
    gone = targets.ended(team, name) if job is None and not record.removed else None
    why = None
    if gone is not None and gave_up_on(gone, mine):
        state, why = "failed", f"{gone.how}; {GAVE_UP}"
    elif gone is not None and state == "not running":
        why = gone.how
    elif job is not None and job.attempt is not None and state == "running":
        why = job.attempt.explained()
    elif mine and state.startswith("failed"):
        why = f"Spark refused the restored state: {mine.state_refused}" if mine.state_refused else mine.error
    elif mine and state == "failing":
        why = f"{mine.error} ({next_restart(mine, at)})" if mine.error else next_restart(mine, at)
    elif mine and state == "degraded":
        why = "; ".join(
            f"{lookup.table}: reloads failing since {lookup.failing_since}, serving the snapshot read "
            f"{age(lookup.loaded_at, at)} ago: {lookup.error}"
            for lookup in mine.lookups
            if lookup.error
        )
    return JobView(record, job, mine, state, why)


def job_status(store: Store, targets: Targets, team: str, name: str) -> dict[str, Any]:
    """One deployed job's line of ``sql-runner status``, with its progress."""
    at = datetime.now(UTC)
    view = observe_job(store, targets, team, name, at)
    record, job, mine = view.record, view.job, view.status
    progress = (mine.progress if mine else None) or BatchProgress(batch=-1)
    latest = savepoints.savepoints(store, name, record.version)
    target = Catalog(record.tables).lookup_name(record.manifest.target_table)
    rate = progress.input_rows_per_second
    return {
        "name": name,
        "version": record.version,
        "target": record.target,
        "state": view.state,
        "restarts": mine.restarts if mine else 0,
        "last progress": progress.timestamp,
        "input rows/s": None if rate is None else round(rate, 1),
        "changes/s": _per_table(progress.changes_per_second, lambda rate: round(rate, 1)),
        "keys held": _per_table(progress.keys, lambda keys: keys),
        "changelog engine": mine.changelog_engine if mine else None,
        "batch ms": progress.batch_duration_ms,
        "watermark": progress.watermark,
        "lookups": "; ".join(_lookup(lookup, at) for lookup in mine.lookups) if mine and mine.lookups else None,
        "latest savepoint": latest[-1].key.rstrip("/").rsplit("/", 1)[-1] if latest else None,
        "output": target.delivery if target is not None else None,
        "job": job.job_id if job else None,
        "detail": job.detail if job else None,
        "attempt": job.attempt.number if job and job.attempt else None,
        "why": view.why,
    }
