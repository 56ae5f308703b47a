"""``make run``: the local demo, end to end, with no AWS.

1. writes card-transaction events (with a few malformed lines) into demo-data/events/;
2. validates the example project in manifests/;
3. runs every example manifest once over the events (spark-submit, local Spark);
4. shows the output rows with their metadata columns, and where every record went;
5. writes more events and runs the jobs again: each resumes its checkpoint and adds
   exactly the new rows.

Everything it writes lives in demo-data/ (gitignored), which it resets first, so it
can be run any number of times.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console
from rich.panel import Panel
from rich.table import Table

from runner.events import MALFORMED_LINES, transactions, write_batch
from runner.project import load_project
from runner.sinkfiles import committed_json_rows

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "demo-data"
STATE = DEMO / "state"
EVENTS = DEMO / "events" / "card-transactions"
START = datetime(2026, 1, 1, 9, 0, tzinfo=UTC)
console = Console(highlight=False, width=max(shutil.get_terminal_size((150, 40)).columns, 130))
SQL_RUNNER = str(Path(sys.executable).parent / "sql-runner")


def say(message: str) -> None:
    console.print(f"[bold cyan]==>[/bold cyan] {message}")


def run_jobs(names: list[str]) -> None:
    """Run the manifests side by side with ``--once`` and print what each one did."""
    processes = {
        name: subprocess.Popen(
            [SQL_RUNNER, "run", f"manifests/{name}.yaml", "--once", "--state", str(STATE)],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        for name in names
    }
    logs: dict[str, list[str]] = {}
    started = time.monotonic()
    with console.status(f"running {len(names)} jobs on local Spark (each starts its own JVM)") as status:
        for name, process in processes.items():
            output, _ = process.communicate()
            logs[name] = output.splitlines()
            status.update(f"{name} done after {time.monotonic() - started:.0f}s; waiting for the others")
            if process.returncode != 0:
                console.print("\n".join(logs[name]), markup=False)
                raise SystemExit(f"job {name} failed (exit code {process.returncode})")
    for name in names:
        for line in logs[name]:
            if "] finished:" in line or "] new checkpoint" in line or "] resuming" in line:
                console.print(f"   {line.split(' ', 1)[1]}", markup=False)


def output_table(title: str, rows: list[dict], columns: list[str], limit: int = 6) -> Table:
    table = Table(title=title, title_justify="left", show_lines=False)
    for column in columns:
        table.add_column(column, overflow="fold", max_width=26 if column.startswith("__") else None)
    ordered = sorted(rows, key=lambda r: [str(r.get(c)) for c in columns if not c.startswith("__")])
    for row in ordered[:limit]:
        table.add_row(*[_cell(row.get(c)) for c in columns])
    if len(rows) > limit:
        table.caption = f"... and {len(rows) - limit} more rows"
    return table


def _cell(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, float):
        return f"{value:.2f}"
    text = str(value)
    if len(text) == 24 and text[10] == "T" and text.endswith("Z"):  # 2026-01-01T09:03:00.000Z
        return text[:10] + " " + text[11:19]
    if len(text) == 36 and text.count("-") == 4:  # a query id: the first block is enough to tell them apart
        return text[:8] + "…"
    return text


def main() -> None:
    console.print(Panel.fit(
        "spark-sql-runner demo: streaming SQL from YAML manifests on local Spark\n"
        "events -> demo-data/events/   outputs -> demo-data/output/   state -> demo-data/state/",
        border_style="cyan",
    ))
    if DEMO.exists():
        say("resetting demo-data/ from the previous run")
        shutil.rmtree(DEMO)
    project = load_project(ROOT)
    manifests = {p.stem: project.load_manifest(p) for p in project.manifest_paths()}
    targets = {name: project.catalog.lookup_name(m.target_table) for name, m in manifests.items()}

    first = transactions(60, start=START, seed=42)
    write_batch(EVENTS, "batch-001", first, MALFORMED_LINES)
    say(f"wrote {len(first)} card transactions + {len(MALFORMED_LINES)} malformed lines to "
        f"{EVENTS.relative_to(ROOT)}/batch-001.json (event time {START:%H:%M} to {first[-1].ts:%H:%M:%S})")

    say("sql-runner validate  (manifests and DDL, then each query analysed on Spark without reading data)")
    result = subprocess.run([SQL_RUNNER, "validate"], cwd=ROOT, capture_output=True, text=True, check=False)
    for line in result.stdout.splitlines():
        console.print(f"   {line}", markup=False)
    if result.returncode != 0:
        console.print(result.stderr, markup=False)
        raise SystemExit("validation failed")

    names = sorted(manifests)
    say(f"round 1: sql-runner run <manifest> --once for {', '.join(names)}")
    run_jobs(names)
    before = {}
    for name in names:
        target = targets[name]
        assert target is not None
        rows = committed_json_rows(Path(target.options["path"]))
        before[name] = len(rows)
        columns = [c.name for c in target.columns if c.name != "__query_description"]
        console.print(output_table(f"{name} -> {target.name} ({len(rows)} rows; first few)", rows, columns))

    second = transactions(40, start=START, seed=43, first_id=len(first))
    write_batch(EVENTS, "batch-002", second)
    say(f"round 2: wrote {len(second)} more transactions; running the jobs again (each resumes its checkpoint)")
    run_jobs(names)

    summary = Table(title="Where every record went", title_justify="left")
    for column in ("job", "version", "target", "rows (round 1)", "new rows (round 2)", "duplicates",
                   "dead-lettered"):
        summary.add_column(column)
    dead_reasons: set[str] = set()
    for name in names:
        target = targets[name]
        assert target is not None
        rows = committed_json_rows(Path(target.options["path"]))
        key_columns = [c.name for c in target.columns if not c.name.startswith("__")]
        keys = [tuple(r.get(c) for c in key_columns) for r in rows]
        dead_dir = STATE / "checkpoints" / "dead-letter" / name
        dead = [r for folder in sorted(dead_dir.glob("*")) for r in committed_json_rows(folder)]
        dead_reasons |= {r["reason"] for r in dead}
        versions = sorted({r["__query_version"] for r in rows})
        summary.add_row(name, ",".join(map(str, versions)), target.name, str(before[name]),
                        str(len(rows) - before[name]), str(len(keys) - len(set(keys))), str(len(dead)))
    console.print(summary)
    console.print("Dead-letter reasons (raw record kept next to each, under "
                  "demo-data/state/checkpoints/dead-letter/):")
    for reason in sorted(dead_reasons):
        console.print(f"  - {reason}", markup=False)
    say("done. Try: .venv/bin/sql-runner preview manifests/high-value-transactions.yaml   "
        "or   .venv/bin/sql-runner --help")


if __name__ == "__main__":
    main()
