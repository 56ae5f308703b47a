"""How decisions, outcomes, history and the session's health look to people: rich tables and one-line summaries.

The jobs' status has its own layout (runner/cli/status_layout.py).
"""

from __future__ import annotations

import json

from rich.table import Table

from runner.core.protocol.history import HistoryEntry, Outcome
from runner.core.protocol.session import SessionHealth
from runner.core.reasons import rendered
from runner.deploy.deployer import Decision
from runner.targets.base import Attempt


def plan_table(decisions: list[Decision]) -> Table:
    table = Table(title="plan", title_justify="left", show_lines=True)
    for column in ("manifest", "decision", "why", "sources"):
        table.add_column(column, overflow="fold")
    for decision in decisions:
        action = decision.action
        sources = "\n".join(f"{s.table}: {s.detail}" for s in action.sources) or "-"
        table.add_row(decision.name, action.summary, "\n".join(rendered(action.reasons)), sources)
    return table


def plan_json(decision: Decision) -> str:
    """One line of ``plan --json``: the planned action (name, decision, summary, version, reasons with their
    codes, parameters and text, and how each source starts), spaced as ``json.dumps`` spaces it."""
    return json.dumps(decision.action.planned().model_dump(mode="json", by_alias=True))


def outcome(result: Outcome) -> str:
    """``ok, job 123@host, savepoint savepoints/... (graceful)``."""
    parts = [result.result]
    if result.job is not None:
        parts.append(f"job {result.job}")
    if result.savepoint is not None:
        savepoint = result.savepoint
        parts.append(f"savepoint {savepoint.key} ({'graceful' if savepoint.graceful else 'after kill'})")
    return ", ".join(parts)


def history_table(name: str, entries: list[HistoryEntry]) -> Table:
    table = Table(title=f"history of {name}", title_justify="left", show_lines=True)
    for column in ("at", "decision", "version", "why", "sources", "outcome", "seconds"):
        table.add_column(column, overflow="fold")
    for entry in entries:
        sources = "\n".join(f"{s.table}: {s.detail}" for s in entry.sources)
        result = entry.outcome
        detail = outcome(result) + ("\n" + result.error if result.error else "")
        if result.continuation:
            detail += "\n" + "\n".join(result.continuation)
        table.add_row(
            entry.at[:19],
            entry.summary or entry.decision,
            str(entry.version),
            "\n".join(rendered(entry.reasons)),
            sources or "-",
            detail,
            str(entry.seconds),
        )
    return table


def session_health(health: SessionHealth | None, attempt: Attempt | None = None) -> str:
    """One line about the team's session: up for how long, its queries by state, and on YARN which attempt of its
    application runs when it is not the first (its driver died and YARN started it again)."""
    if health is None:
        return "session: not running"
    queries = health.queries
    counts = f"{queries.running} running, {queries.failing} failing, {queries.parked} parked"
    line = f"session {health.run_id}: {health.state}, up {health.uptime_seconds:.0f}s, queries {counts}"
    if queries.stuck_builds:
        line += f", {queries.stuck_builds} query build(s) stuck (code that never returned)"
    if health.invalid:
        line += f"; not deployed (invalid): {', '.join(sorted(health.invalid))}"
    if health.control_url:
        line += f"; previews at {health.control_url} (token in the state store)"
    if attempt is not None and attempt.explained():
        line += f"; {attempt.explained()}"
    return line
