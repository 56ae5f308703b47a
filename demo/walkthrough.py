"""``make run``: the local demo, end to end, with no AWS.

On a copy of the example project (demo-data/project/, so the demo's edits never touch
manifests/), it walks through a deployment's life with detached jobs on local Spark:

1. writes card-transaction events (with a few malformed lines), validates, deploys
   every example manifest, and shows their output and status;
2. changes high-value-transactions' filter: state-compatible, restored from a savepoint,
   no input re-read;
3. changes spend-per-account's window: incompatible, version 2 with clean state that
   continues after the files version 1 read;
4. a whitespace-and-case-only edit: no action;
5. deletes payee-bands' manifest: stopped with a savepoint, marked removed;
6. Kafka: starts a local Kafka broker (Apache Kafka's own, KRaft), writes the events into a
   topic and deploys a count per payee into a keyed topic, read back as a consumer sees it;
7. session mode: starts the team's session, pushes three session manifests, changes
   one compatibly and one incompatibly, removes one, and shows how long each took to
   take effect (no deploy command: the session watches the manifests folder);
8. prints where the web console is (the session serves it) and a token to sign in, and waits for Enter
   when run at a terminal.

It prints the plan before each step, then stops the jobs it started (with savepoints).
Everything lives in demo-data/ (gitignored), which it resets first.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import yaml
from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from demo.committed_rows import committed_json_rows
from demo.kafka_broker import KafkaBroker, free_port
from demo.transactions import MALFORMED_LINES, Transaction, transactions, write_batch

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "demo-data"
PROJECT = DEMO / "project"
STATE = PROJECT / ".sql-runner"
EVENTS = PROJECT / "demo-data" / "events" / "card-transactions"
OUTPUT = PROJECT / "demo-data" / "output"
START = datetime(2026, 1, 1, 9, 0, tzinfo=UTC)
WATERMARK_DELAY = timedelta(seconds=5)  # the DDL's WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
WIDTH = max(shutil.get_terminal_size((150, 40)).columns, 130)
console = Console(highlight=False, width=WIDTH)
SQL_RUNNER = str(Path(sys.executable).parent / "sql-runner")
BROKER: KafkaBroker | None = None  # step 6's, stopped with the jobs at the end

HIGH_VALUE = PROJECT / "manifests" / "high-value-transactions.yaml"
SPEND = PROJECT / "manifests" / "spend-per-account.yaml"
BANDS = PROJECT / "manifests" / "payee-bands.yaml"
METADATA = """,
  __create_timestamp TIMESTAMP(3), __query_name STRING, __query_description STRING,
  __query_id STRING, __query_version INT, __query_create_timestamp TIMESTAMP(3)"""
SESSION_DDL = "".join(
    f"CREATE TABLE `demo`.`{name}` ({columns}{METADATA}\n) WITH ('connector' = 'filesystem', "
    f"'path' = 'demo-data/output/{name}', 'format' = 'json');\n"
    for name, columns in (
        ("big-spends", "transaction_id STRING, account_id STRING, amount DOUBLE"),
        ("first-payment-per-payee", "payee STRING, account_id STRING, amount DOUBLE"),
        ("card-ids", "transaction_id STRING, account_id STRING"),
    )
)
SESSION_MANIFESTS = {
    "big-spends": (
        "big-spends",
        'sql: "SELECT transaction_id, account_id, amount FROM `demo`.`card-transactions` WHERE amount > 900"',
    ),
    "first-payment-per-payee": (
        "first-payment-per-payee",
        "code: |\n"
        '  execution_output = table("`demo`.`card-transactions`").dropDuplicates(["payee"])'
        '.select("payee", "account_id", "amount")',
    ),
    "card-ids": ("card-ids", 'sql: "SELECT transaction_id, account_id FROM `demo`.`card-transactions`"'),
}


def say(message: str) -> None:
    console.print(f"\n[bold cyan]==>[/bold cyan] {message}")


def cli(*args: str, terminal: bool = False) -> subprocess.CompletedProcess:
    """Run ``sql-runner``; ``terminal``: its output as at a terminal of the demo's width (rich takes
    ``TTY_COMPATIBLE=1`` as one), not the plain lines a pipe gets; print that with :func:`shown`."""
    env = {**os.environ, "COLUMNS": str(WIDTH), "SPARK_LOCAL_IP": "127.0.0.1"}
    if terminal:
        env["TTY_COMPATIBLE"] = "1"
    result = subprocess.run([SQL_RUNNER, *args], cwd=PROJECT, capture_output=True, text=True, check=False, env=env)
    if result.returncode != 0:
        console.print(result.stdout + result.stderr, markup=False)
        raise SystemExit(f"sql-runner {' '.join(args)} failed (exit code {result.returncode})")
    return result


def shown(result: subprocess.CompletedProcess) -> Text:
    """What a command printed for a terminal, its styles kept."""
    return Text.from_ansi(result.stdout.rstrip())


def show_plan() -> None:
    console.print("   $ sql-runner plan", style="dim")
    console.print(cli("plan").stdout.rstrip(), markup=False)


def deploy(*args: str) -> None:
    console.print(f"   $ sql-runner deploy {' '.join(args)}".rstrip(), style="dim")
    for line in cli("deploy", *args).stdout.splitlines():
        if " -> " in line and line[:1].isalnum():  # the outcome lines, not the plan table's
            console.print(f"   {line}", markup=False)


def show_status() -> None:
    console.print("   $ sql-runner status", style="dim")
    console.print(shown(cli("status", terminal=True)))


def status_of(name: str) -> dict:
    rows = [json.loads(line) for line in cli("status", "--json").stdout.splitlines()]
    return next(row for row in rows if row["name"] == name)


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    if old not in text:
        raise SystemExit(f"the demo expected {old!r} in {path}")
    path.write_text(text.replace(old, new), encoding="utf-8")
    console.print(f"   edited {path.relative_to(DEMO)}: {old!r} -> {new!r}", markup=False)


def wait(condition: Callable[[], bool], what: str, timeout: float = 240.0) -> None:
    deadline = time.monotonic() + timeout
    with console.status(f"waiting for {what}"):
        while time.monotonic() < deadline:
            if condition():
                return
            time.sleep(0.1)  # the session step prints seconds to effect to a tenth
    logs = sorted((STATE / "logs").glob("*.log"), key=lambda p: p.stat().st_mtime)
    if logs:
        console.print(f"last lines of {logs[-1]}:", markup=False)
        console.print("\n".join(logs[-1].read_text(errors="replace").splitlines()[-30:]), markup=False)
    raise SystemExit(f"timed out after {timeout:.0f}s waiting for {what}")


def rows(table: str) -> list[dict]:
    return committed_json_rows(OUTPUT / table)


def closed(events: list[Transaction], minutes: int) -> list[Transaction]:
    """Events whose ``minutes``-long window the watermark has closed (it trails the newest event by 5 s)."""
    watermark = max(t.ts for t in events) - WATERMARK_DELAY
    size = minutes * 60
    boundary = datetime.fromtimestamp(int(watermark.timestamp()) // size * size, UTC)
    return [t for t in events if t.ts < boundary]


def counted(version: int) -> int:
    return sum(r["tx_count"] for r in rows("spend-per-account") if r["__query_version"] == version)


def table_of(title: str, data: list[dict], columns: list[str], limit: int = 6) -> Table:
    table = Table(title=title, title_justify="left")
    for column in columns:
        table.add_column(column, overflow="fold")
    ordered = sorted(data, key=lambda r: [str(r.get(c)) for c in columns])
    for row in ordered[:limit]:
        table.add_row(*[_cell(row.get(c)) for c in columns])
    if len(data) > limit:
        table.caption = f"... and {len(data) - limit} more rows"
    return table


def _cell(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, float):
        return f"{value:.2f}"
    text = str(value)
    if len(text) == 24 and text[10] == "T" and text.endswith("Z"):  # 2026-01-01T09:03:00.000Z
        return text[11:19]
    return text


def main() -> None:
    console.print(
        Panel.fit(
            "spark-sql-runner demo: a streaming SQL deployment's life, on local Spark with no AWS\n"
            "project copy -> demo-data/project/   events -> demo-data/project/demo-data/events/\n"
            "outputs -> demo-data/project/demo-data/output/   state -> demo-data/project/.sql-runner/",
            border_style="cyan",
        )
    )
    if DEMO.exists():
        say("resetting demo-data/ from the previous run")
        shutil.rmtree(DEMO)
    shutil.copytree(ROOT / "manifests", PROJECT / "manifests")
    edit(PROJECT / "manifests" / "job-template.yaml", "trigger-interval: 5 seconds", "trigger-interval: 2 seconds")
    try:
        run_demo()
        offer_console()
    finally:
        stop_everything()


def run_demo() -> None:
    written: list[Transaction] = []

    def add_events(name: str, count: int, seed: int, malformed: tuple[str, ...] = ()) -> list[Transaction]:
        batch = transactions(count, start=START, seed=seed, first_id=len(written))
        written.extend(batch)
        write_batch(EVENTS, name, batch, malformed)
        bad = f" + {len(malformed)} malformed lines" if malformed else ""
        console.print(
            f"   wrote {len(batch)} transactions{bad} to events/{name}.json "
            f"(event time {batch[0].ts:%H:%M:%S} to {batch[-1].ts:%H:%M:%S})",
            markup=False,
        )
        return batch

    # 1. deploy ------------------------------------------------------------------------------
    say("step 1: deploy every example manifest as a detached job")
    first = add_events("batch-001", 60, 42, MALFORMED_LINES)
    console.print("   $ sql-runner validate", style="dim")
    console.print(cli("validate").stdout.rstrip(), markup=False)
    show_plan()
    deploy("--all")
    high_value = sorted(t.transaction_id for t in first if t.amount > 500)
    wait(
        lambda: (
            sorted(r["transaction_id"] for r in rows("high-value-tx")) == high_value
            and len(rows("payee-bands")) == len(first)
            and counted(1) == len(closed(first, 1))
        ),
        "the three jobs to process the first events",
    )
    console.print(
        table_of(
            f"high-value-tx ({len(high_value)} rows; first few)",
            rows("high-value-tx"),
            ["transaction_id", "account_id", "payee", "amount", "__query_version"],
        )
    )
    console.print(
        table_of(
            f"spend-per-account ({len(rows('spend-per-account'))} closed windows; first few)",
            rows("spend-per-account"),
            ["window_start", "account_id", "tx_count", "total_amount", "__query_version"],
        )
    )
    show_status()

    # 2. compatible filter change ---------------------------------------------------------------
    say("step 2: change high-value-transactions' filter (a stateless query: state-compatible)")
    edit(HIGH_VALUE, "WHERE amount > 500", "WHERE amount > 500 AND payee <> 'airline'")
    show_plan()
    deploy()
    second = add_events("batch-002", 40, 43)
    high_value += [t.transaction_id for t in second if t.amount > 500 and t.payee != "airline"]
    wait(
        lambda: (
            sorted(r["transaction_id"] for r in rows("high-value-tx")) == sorted(high_value)
            and counted(1) == len(closed(first + second, 1))
        ),
        "the new events to be processed",
    )
    output = rows("high-value-tx")
    console.print(
        f"   high-value-tx: {len(output)} rows, {len(output) - len({r['transaction_id'] for r in output})} "
        f"duplicates, versions {sorted({r['__query_version'] for r in output})}: restored from the "
        "savepoint, so batch-001 was not read again; the new filter applies from batch-002 on",
        markup=False,
    )

    # 3. incompatible grouping change -----------------------------------------------------------
    say("step 3: change spend-per-account's window from 1 to 2 minutes (changed grouping: incompatible)")
    edit(SPEND, "window(ts, '1 minute')", "window(ts, '2 minutes')")
    show_plan()
    deploy()
    before = first + second
    third = add_events("batch-003", 40, 44)
    v2_expected = len(closed(third, 2))
    wait(lambda: counted(2) == v2_expected, "version 2 to count the new events")
    v1, v2 = counted(1), counted(2)
    summary = Table(title="spend-per-account: every event counted at most once", title_justify="left")
    for column in ("", "events", "counted by v1", "counted by v2", "still in an open window"):
        summary.add_column(column)
    summary.add_row(
        "written before the change",
        str(len(before)),
        str(v1),
        "0",
        f"{len(before) - v1} (held in v1's state when it stopped; dropped, as the plan said)",
    )
    summary.add_row("written after the change", str(len(third)), "0", str(v2), f"{len(third) - v2} (v2's open window)")
    console.print(summary)
    console.print(
        "   v2 read only batch-003 (it skipped batch-001 and batch-002, which v1 had read); history says so:",
        markup=False,
    )
    history = json.loads(cli("history", "spend-per-account", "--json").stdout)
    for note in history[-1]["outcome"].get("continuation", []):
        console.print(f"   - {note}", markup=False)

    # 4. whitespace-only edit -------------------------------------------------------------------
    say("step 4: reformat high-value-transactions' SQL (whitespace, keyword case, a comment): no change")
    job = status_of("high-value-transactions")["job"]
    edit(
        HIGH_VALUE,
        "WHERE amount > 500 AND payee <> 'airline'",
        "where amount>500   and payee<>'airline'  -- big spends, airlines excluded",
    )
    show_plan()
    deploy()
    console.print(
        f"   the same job keeps running: {job} -> {status_of('high-value-transactions')['job']}", markup=False
    )

    # 5. manifest deleted -----------------------------------------------------------------------
    say("step 5: delete payee-bands' manifest")
    BANDS.unlink()
    console.print(f"   deleted {BANDS.relative_to(DEMO)}", markup=False)
    show_plan()
    deploy("--all")
    show_status()

    # 6. Kafka ----------------------------------------------------------------------------------
    run_kafka_demo(first + second + third)

    # 7. session mode ---------------------------------------------------------------------------
    run_session_demo(add_events)


KAFKA_DDL = (
    """
CREATE TABLE `kafka`.`card-transactions` (
  transaction_id STRING, account_id STRING NOT NULL, payee STRING, amount DOUBLE, ts TIMESTAMP(3)
) WITH ('connector' = 'kafka', 'topic' = 'card-transactions', 'format' = 'json',
        'properties.bootstrap.servers' = '${KAFKA_BOOTSTRAP_SERVERS}', 'scan.startup.mode' = 'earliest-offset');

CREATE TABLE `kafka`.`spend-per-payee` (
  payee STRING, tx_count BIGINT, total_amount DOUBLE"""
    + METADATA
    + """,
  PRIMARY KEY (payee) NOT ENFORCED
) WITH ('connector' = 'kafka', 'topic' = 'spend-per-payee', 'format' = 'json',
        'properties.bootstrap.servers' = '${KAFKA_BOOTSTRAP_SERVERS}');
"""
)
KAFKA_MANIFEST = """name: spend-per-payee
description: "Spend per payee, kept up to date in a keyed topic"
target-table: "`kafka`.`spend-per-payee`"
sql: |
  SELECT payee, COUNT(*) AS tx_count, ROUND(SUM(amount), 2) AS total_amount
  FROM `kafka`.`card-transactions`
  GROUP BY payee
"""


def run_kafka_demo(events: list[Transaction]) -> None:
    """Kafka in and out, on a real broker started here (Apache Kafka's own, KRaft, on 127.0.0.1)."""
    global BROKER
    say("step 6: Kafka: the same events in a topic, a keyed count per payee into another topic")
    BROKER = KafkaBroker(DEMO / "kafka", port=free_port())
    BROKER.start(log=lambda message: console.print(f"   {message}", markup=False))
    kafka = BROKER.client()
    os.environ["KAFKA_BOOTSTRAP_SERVERS"] = BROKER.bootstrap
    kafka.create_topic("card-transactions", 3)
    kafka.create_topic("spend-per-payee", 2)
    kafka.produce("card-transactions", [*(t.to_json() for t in events), *MALFORMED_LINES])
    console.print(
        f"   wrote {len(events)} transactions + {len(MALFORMED_LINES)} malformed records to topic card-transactions "
        "(3 partitions)",
        markup=False,
    )
    (PROJECT / "manifests" / "tables" / "kafka.sql").write_text(KAFKA_DDL, encoding="utf-8")
    (PROJECT / "manifests" / "spend-per-payee.yaml").write_text(KAFKA_MANIFEST, encoding="utf-8")
    deploy("manifests/spend-per-payee.yaml")
    expected: dict[str, list] = {}
    for t in events:
        entry = expected.setdefault(t.payee, [0, 0.0])
        entry[0] += 1
        entry[1] += t.amount

    def latest() -> dict[str, dict]:
        return {r.key: json.loads(r.value) for r in kafka.records("spend-per-payee")}

    def exact() -> bool:
        got = {row["payee"]: (row["tx_count"], row["total_amount"]) for row in latest().values()}
        return got == {payee: (n, round(total, 2)) for payee, (n, total) in expected.items()}

    wait(exact, "the count per payee in topic spend-per-payee")
    records = kafka.records("spend-per-payee")
    console.print(
        table_of(
            f"topic spend-per-payee: the latest record per key ({len(records)} records written, update mode)",
            [{"key": key.decode(), **row} for key, row in latest().items()],
            ["key", "tx_count", "total_amount", "__query_version"],
            limit=8,
        )
    )
    dead = committed_json_rows(STATE / "checkpoints" / "dead-letter" / "spend-per-payee" / "kafka-card-transactions")
    for row in sorted(dead, key=lambda r: (r["partition"], r["offset"])):
        console.print(
            f"   dead letter: partition {row['partition']} offset {row['offset']}: {row['reason']}", markup=False
        )
    console.print(
        "   output: " + status_of("spend-per-payee")["output"] + " (a replayed batch writes the same latest value "
        "per key); input exactly once, from the checkpoint's offsets",
        markup=False,
    )


def published(name: str) -> dict:
    path = STATE / "manifests" / "status" / f"{name}.json"
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def push(name: str, text: str, then: Callable[[], object] | None = None) -> float:
    """Write a session manifest and wait for the first micro-batch of its new run; seconds. ``then`` runs once
    the new run is up: a run restored from where the old one stopped has a micro-batch only when data
    arrives after it (an idle query's progress is not a batch), so its events must come after the stop."""
    old_run = published(name).get("run-id")
    began = time.monotonic()
    (PROJECT / "manifests" / f"{name}.yaml").write_text(text, encoding="utf-8")
    if then is not None:
        wait(lambda: published(name).get("run-id") not in (None, old_run), f"{name}'s new run to start")
        then()
    wait(
        lambda: published(name).get("run-id") not in (None, old_run) and bool(published(name).get("progress")),
        f"{name} to take effect",
    )
    return time.monotonic() - began


def session_manifest(name: str, query: str) -> str:
    target, body = SESSION_MANIFESTS[name][0], query
    return f'name: {name}\nmode: session\ntarget-table: "`demo`.`{target}`"\n{body}\n'


def run_session_demo(add_events: Callable[..., list[Transaction]]) -> None:
    say("step 7: session mode: one Spark application hosts the queries and applies manifest edits itself")
    (PROJECT / "manifests" / "tables" / "session.sql").write_text(SESSION_DDL, encoding="utf-8")
    console.print("   $ sql-runner session start", style="dim")
    console.print(f"   {cli('session', 'start').stdout.strip()}", markup=False)
    timings = Table(title="time to effect: manifest saved -> first micro-batch of the new run", title_justify="left")
    for column in ("change", "seconds", "version", "rows in the output"):
        timings.add_column(column)

    def note(change: str, name: str, seconds: float) -> None:
        timings.add_row(change, f"{seconds:.1f}", str(published(name).get("version")), str(len(rows(name))))

    for name, (_, query) in SESSION_MANIFESTS.items():
        note(f"new: {name}", name, push(name, session_manifest(name, query)))
    add_events("batch-004", 30, 45)
    big = session_manifest("big-spends", SESSION_MANIFESTS["big-spends"][1].replace("> 900", "> 800"))
    # the restored run reads what arrives after v1 stopped
    restored = push("big-spends", big, lambda: add_events("batch-005", 30, 46))
    note("big-spends: filter > 900 -> > 800 (compatible: restored)", "big-spends", restored)
    payees = SESSION_MANIFESTS["first-payment-per-payee"][1].replace('["payee"]', '["payee", "account_id"]')
    note(
        "first-payment-per-payee: dedup keys + account_id (incompatible: v2)",
        "first-payment-per-payee",
        # v2 continues after the files v1 read: new events give it something to read
        push(
            "first-payment-per-payee",
            session_manifest("first-payment-per-payee", payees),
            lambda: add_events("batch-006", 30, 47),
        ),
    )
    began = time.monotonic()
    (PROJECT / "manifests" / "card-ids.yaml").unlink()
    deployed = STATE / "manifests" / "deployed" / "card-ids.yaml"
    wait(lambda: yaml.safe_load(deployed.read_text())["deployment"]["status"] == "removed", "card-ids to be removed")
    timings.add_row(
        "card-ids: manifest deleted (stopped with a savepoint)", f"{time.monotonic() - began:.1f}", "-", "-"
    )
    console.print(timings)
    console.print(
        table_of(
            f"big-spends ({len(rows('big-spends'))} rows; first few)",
            rows("big-spends"),
            ["transaction_id", "account_id", "amount", "__query_version"],
        )
    )
    console.print("   $ sql-runner session status", style="dim")
    console.print(shown(cli("session", "status", terminal=True)))


def offer_console() -> None:
    """Say where the session's web console is, with a token to sign in; keep everything running until Enter
    when someone is at the terminal."""
    control = STATE / "manifests" / "session" / "control.json"
    if not control.exists():
        return
    url = json.loads(control.read_text())["url"]
    token = cli("console", "--print-token").stdout.strip()
    say("the web console (served by the session): every query's state, its plan's verdict, history, live previews")
    console.print(f"   open {url}/ and sign in with this token: {token}", markup=False, soft_wrap=True)
    console.print(f"   Prometheus figures: curl -H 'Authorization: Bearer <token>' {url}/metrics", markup=False)
    if sys.stdin.isatty():
        console.print("   press Enter to stop the demo's jobs (the console stops with the session)")
        with contextlib.suppress(EOFError, KeyboardInterrupt):
            input()
    else:
        console.print(
            "   (no terminal to wait at: stopping now; to look later, cd demo-data/project and run "
            "../../.venv/bin/sql-runner console, which serves it over the same state)",
            markup=False,
        )


def stop_everything() -> None:
    """Leave no job running: stop each one at a batch boundary, with a savepoint; then the Kafka broker."""
    try:
        stop_jobs()
    finally:
        if BROKER is not None:
            console.print("   stopping the Kafka broker", markup=False)
            BROKER.stop()


def stop_jobs() -> None:
    if not (STATE / "manifests" / "jobs").is_dir():
        return
    say("stopping the demo's jobs (each with a savepoint; `sql-runner deploy` would restore them)")
    if (STATE / "manifests" / "jobs" / "_session.json").exists():
        console.print("   $ sql-runner session stop", style="dim")
        console.print(f"   {cli('session', 'stop').stdout.strip()}", markup=False)
    for record in sorted((STATE / "manifests" / "jobs").glob("*.json")):
        name = record.stem
        if name.startswith("_"):  # the session application, stopped above
            continue
        try:
            if status_of(name)["state"] in ("running", "removed (still running)"):
                for line in cli("stop", name).stdout.splitlines():
                    console.print(f"   {line}", markup=False)
        except (SystemExit, StopIteration) as error:
            console.print(f"   could not stop {name}: {error}", markup=False)
    show_status()
    say("done. The project copy is yours to try: cd demo-data/project && ../../.venv/bin/sql-runner --help")
