"""What the console's query page shows of one query, read from the state store.

The deployed manifest next to the desired one with their difference, the history as a timeline,
the savepoints with their age and size, the streaming plan from source to sink with each stateful
operator's rows and state size, the latest dead letters with their reasons, and where its log is.
The plan's verdict on the desired manifest needs Spark and is computed apart (``runner/console/app.py``).
"""

from __future__ import annotations

import difflib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from runner.console import figures
from runner.core.manifest import Manifest
from runner.core.protocol.history import HistoryEntry, read_history
from runner.core.protocol.status import JobStatus
from runner.core.yamltext import readable
from runner.deploy.status import JobView
from runner.state import deadletters, savepoints
from runner.state.store import Store

LATEST_DEAD_LETTERS = 20
RAW_SHOWN = 500  # characters of a rejected record shown
LOG_TAIL = 200  # lines


def manifest_yaml(manifest: Manifest) -> str:
    """A manifest as its fields read, without what the runner adds (``meta``), for comparing two of them."""
    data = manifest.to_dict()
    data.pop("meta", None)
    return readable(data)


def diff(deployed: str, desired: str) -> list[dict[str, str]]:
    """The lines that differ, with context: ``{"kind": "same" | "add" | "del" | "hunk", "text": ...}``."""
    lines = []
    for text in difflib.unified_diff(deployed.splitlines(), desired.splitlines(), "deployed", "desired", n=3):
        if text.startswith(("---", "+++")):
            continue
        kind = {"@": "hunk", "+": "add", "-": "del"}.get(text[:1], "same")
        lines.append({"kind": kind, "text": text})
    return lines


def timeline(entries: list[HistoryEntry]) -> list[dict[str, Any]]:
    """The history, newest first, as the page shows it."""
    shown = []
    for entry in reversed(entries):
        outcome = entry.outcome
        detail = []
        if outcome.savepoint is not None:
            detail.append(f"savepoint {outcome.savepoint.key}")
        if outcome.restored_from:
            detail.append(f"restored from {outcome.restored_from}")
        if outcome.job:
            detail.append(f"job {outcome.job}")
        shown.append(
            {
                "at": entry.at,
                "at_iso": figures.iso(entry.at),
                "at_shown": figures.moment(entry.at),
                "decision": entry.decision,
                "summary": entry.summary,
                "version": entry.version,
                "reasons": [reason.render() for reason in entry.reasons],
                "sources": [f"{s.table}: {s.detail or s.how}" for s in entry.sources],
                "result": outcome.result.value,
                "error": outcome.error,
                "detail": ", ".join(detail),
                "requested_by": entry.requested_by,
                "seconds": entry.seconds,
            }
        )
    return shown


def savepoint_list(store: Store, name: str, latest_version: int, at: datetime) -> list[dict[str, Any]]:
    """Every version's complete savepoints, newest first, with their age and size."""
    shown = []
    for version in range(latest_version, 0, -1):
        for ref in reversed(savepoints.savepoints(store, name, version)):
            sizes = store.savepoints.sizes(ref.key)
            shown.append(
                {
                    "key": ref.key,
                    "version": version,
                    "created": ref.created.isoformat() if ref.created else None,
                    "age": figures.duration((at - ref.created).total_seconds()) if ref.created else figures.NONE,
                    "files": len(sizes),
                    "bytes": sum(sizes.values()),
                    "size": figures.size(sum(sizes.values())),
                }
            )
    return shown


def graph(status: JobStatus | None) -> dict[str, Any] | None:
    """The streaming plan of the last micro-batch (after a savepoint or a restart, until the new run has one,
    the one it continues from), from its sources through its stateful operators to its sink, with the
    figures Spark gave for each, as the page writes them."""
    progress = status.last_progress if status else None
    if progress is None:
        return None
    sources = []
    for source in progress.sources:
        parts = [figures.count(source.input_rows, "row")]
        if source.input_rows_per_second is not None:
            parts.append(f"{figures.number(source.input_rows_per_second)} rows/s")
        if source.offsets_behind is not None:
            parts.append(f"{figures.count(source.offsets_behind, 'record')} behind")
        sources.append({"description": source.description, "figures": ", ".join(parts)})
    operators = [
        {
            "name": operator.name,
            "rows": f"{figures.count(operator.rows, 'row')} in state "
            f"({figures.number(operator.rows_updated, 0)} updated)",
            "memory": figures.size(operator.memory_bytes),
        }
        for operator in progress.operators
    ]
    return {
        "batch": progress.batch,
        "sources": sources,
        "operators": operators,
        "sink": progress.sink,
        "figures": f"{figures.count(progress.input_rows, 'row')} in, "
        f"{figures.milliseconds(progress.batch_duration_ms)}",
        "at_iso": figures.iso(progress.timestamp),
        "at_shown": figures.moment(progress.timestamp),
        "previous_run": status is not None and status.progress is None,
    }


def dead_letter_rows(store: Store, name: str) -> list[dict[str, Any]]:
    """The latest rejected records, newest first, with their reasons (the raw record cut short)."""
    files = deadletters.files(store.checkpoints, name, datetime.fromtimestamp(0, UTC))
    rows = deadletters.records(store.checkpoints, files, LATEST_DEAD_LETTERS)
    for row in rows:
        raw = str(row.get("raw") or "")
        row["raw"] = raw if len(raw) <= RAW_SHOWN else raw[:RAW_SHOWN] + "…"
        seen = row.get("error_time")
        row["seen_iso"], row["seen_shown"] = (figures.iso(seen), figures.moment(seen)) if seen else ("", figures.NONE)
    return rows


def log_path(view: JobView, session_log: Path | None) -> Path | None:
    """The job's log file on this machine, if it has one here: an application job's own (local targets),
    the session application's for a query it hosts."""
    if view.job is not None and view.job.detail.startswith("log "):
        path = Path(view.job.detail.removeprefix("log "))
        if path.is_file():
            return path
    if view.record.target == "session" and session_log is not None and session_log.is_file():
        return session_log
    return None


def log_tail(path: Path, name: str, lines: int = LOG_TAIL) -> str:
    """The last ``lines`` lines of the log (for a session's log, the lines about this query first)."""
    with open(path, "rb") as handle:
        handle.seek(0, 2)
        size = handle.tell()
        handle.seek(max(0, size - 4 * 1024 * 1024))
        text = handle.read().decode("utf-8", "replace")
    every = text.splitlines()
    about = [line for line in every if f"[{name} v" in line]
    return "\n".join((about or every)[-lines:])


def details(store: Store, view: JobView, desired: tuple[str, Manifest] | None, at: datetime) -> dict[str, Any]:
    """The query page's content, but for the verdict."""
    record, status = view.record, view.status
    deployed_text = manifest_yaml(record.manifest)
    desired_text = manifest_yaml(desired[1]) if desired is not None else None
    name = record.name
    return {
        "name": name,
        "version": record.version,
        "description": record.manifest.description,
        "target": record.target,
        "deployed_at": record.deployed_at.isoformat(),
        "deployed_iso": figures.iso(record.deployed_at),
        "deployed_shown": figures.moment(record.deployed_at),
        "deployed": deployed_text,
        "desired_file": desired[0] if desired is not None else None,
        "desired": desired_text,
        "diff": diff(deployed_text, desired_text) if desired_text is not None else [],
        "history": timeline(read_history(store.manifests, name)),
        "savepoints": savepoint_list(store, name, record.version, at),
        "graph": graph(status),
        "dead_letters": dead_letter_rows(store, name),
        "status": {
            "state": view.state,
            "why": view.why,
            "job": view.job.job_id if view.job else None,
            "restarts": status.restarts if status else 0,
            "lookups": [lookup.model_dump(mode="json") for lookup in status.lookups] if status else [],
        },
    }
