"""How decisions, outcomes, status and history look to people: rich tables and one-line summaries."""

from __future__ import annotations

import json
from typing import Any

from rich.table import Table

from runner.deploy.deployer import Decision

STATUS_COLUMNS = (
    "name",
    "version",
    "target",
    "state",
    "restarts",
    "last progress",
    "input rows/s",
    "batch ms",
    "watermark",
    "latest savepoint",
    "output",
    "why",
)


def plan_table(decisions: list[Decision]) -> Table:
    table = Table(title="plan", title_justify="left", show_lines=True)
    for column in ("manifest", "decision", "why", "sources"):
        table.add_column(column, overflow="fold")
    for decision in decisions:
        action = decision.action
        sources = "\n".join(f"{s.table}: {s.detail}" for s in action.sources) or "-"
        table.add_row(decision.name, action.summary, "\n".join(action.reasons), sources)
    return table


def plan_json(decision: Decision) -> str:
    action = decision.action
    return json.dumps(
        {
            "name": decision.name,
            "decision": action.kind,
            "summary": action.summary,
            "version": action.version,
            "reasons": list(action.reasons),
            "sources": [{"table": s.table, "how": s.how, "detail": s.detail} for s in action.sources],
        }
    )


def outcome(result: dict[str, Any]) -> str:
    """``ok, job 123@host, savepoint savepoints/... (graceful)``."""
    parts = [result.get("result", "ok")]
    if "job" in result:
        parts.append(f"job {result['job']}")
    if "savepoint" in result:
        savepoint = result["savepoint"]
        parts.append(f"savepoint {savepoint['key']} ({'graceful' if savepoint['graceful'] else 'after kill'})")
    return ", ".join(parts)


def status_table(rows: list[dict[str, Any]]) -> Table:
    table = Table(title="status", title_justify="left")
    for column in STATUS_COLUMNS:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*[str(row[c]) if row[c] is not None else "-" for c in STATUS_COLUMNS])
    return table


def history_table(name: str, entries: list[dict[str, Any]]) -> Table:
    table = Table(title=f"history of {name}", title_justify="left", show_lines=True)
    for column in ("at", "decision", "version", "why", "sources", "outcome", "seconds"):
        table.add_column(column, overflow="fold")
    for entry in entries:
        sources = "\n".join(f"{s['table']}: {s['detail']}" for s in entry.get("sources", []))
        result = entry.get("outcome", {})
        detail = outcome(result) + ("\n" + result["error"] if "error" in result else "")
        if result.get("continuation"):
            detail += "\n" + "\n".join(result["continuation"])
        table.add_row(
            entry["at"][:19],
            entry.get("summary", entry["decision"]),
            str(entry.get("version")),
            "\n".join(entry.get("reasons", [])),
            sources or "-",
            detail,
            str(entry.get("seconds")),
        )
    return table


def session_health(health: dict[str, Any] | None) -> str:
    """One line about the team's session: up for how long, and its queries by state."""
    if health is None:
        return "session: not running"
    queries = health.get("queries") or {}
    counts = ", ".join(f"{queries.get(k, 0)} {k}" for k in ("running", "failing", "parked"))
    invalid = health.get("invalid") or {}
    line = (
        f"session {health.get('run-id')}: {health.get('state')}, up {health.get('uptime-seconds', 0):.0f}s, "
        f"queries {counts}"
    )
    if queries.get("stuck-builds"):
        line += f", {queries['stuck-builds']} query build(s) stuck (code that never returned)"
    if invalid:
        line += f"; not deployed (invalid): {', '.join(sorted(invalid))}"
    if health.get("control-url"):
        line += f"; previews at {health['control-url']} (token in the state store)"
    return line
