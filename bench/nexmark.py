"""Nexmark-style queries through the runner: throughput per core, every result checked exactly.

    .venv/bin/python bench/nexmark.py [--events 500000] [--rounds 3] [--queries q0,q1,q2,q5,q7,q8]
                                      [--defaults q5,q8] [--defaults-events 100000]

The person / auction / bid event model (one person, three auctions and 46 bids in every
50 events, 10,000 events per second of event time, seeded) is written as JSON files; the
queries are the manifests and DDL under ``bench/nexmark/manifests/``: passthrough (q0),
currency conversion (q1), selection (q2), hot items: bids per auction in sliding windows
(q5), the highest bid per tumbling window (q7), and people who opened an auction in the
window they joined in (q8, a windowed stream-stream join). Each runs as
``sql-runner run --once`` on a fresh copy of that project (the repository's
``manifests/job-template.yaml`` as its template); its throughput is the events it reads
over its batches' trigger time, per core. Its committed output is then compared, row for
row, with the same query computed in plain Python over the same events (windows closed
by the watermark: the generator ends with one event per table a minute later, which
closes every window before it).

``--defaults``: each group of streaming settings (``SETTINGS``) against Spark's own
defaults for it (the template with the group, and without it), on the stateful queries,
in steady state like bench/overhead.py (bench/steady.py): per query, one long-running
job with the template as it is and one with each group toggled (a micro-batch every
second), started once on a warm-up tranche of ``--defaults-events`` events; each of
``--rounds`` rounds hands them the same next tranche (event time running on), one after
another in rotating order, and times their micro-batches. A setting is in the template
only if it wins.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import results, steady  # noqa: E402
from demo.committed_rows import committed_json_rows  # noqa: E402

SQL_RUNNER = str(Path(sys.executable).parent / "sql-runner")
PROJECT = ROOT / "bench" / "nexmark"
TEMPLATE = ROOT / "manifests" / "job-template.yaml"
START = datetime(2026, 1, 1, tzinfo=UTC)
EVENTS_PER_SECOND = 10_000
FILES = 10
WATERMARK_DELAY = timedelta(seconds=4)
FIRST_ID = 1000
CHANNELS = ("apple", "google", "facebook", "baidu")
FIRST_NAMES = ("peter", "paul", "luke", "john", "saul", "vicky", "kate", "julie", "sarah", "deiter", "walter")
LAST_NAMES = ("shultz", "abrams", "spencer", "white", "bartels", "walton", "smith", "jones", "noris")
CITIES = (("phoenix", "az"), ("los angeles", "ca"), ("san francisco", "ca"), ("boise", "id"), ("portland", "or"))
CORES = os.cpu_count() or 1
JSON = (",", ":")
EUROS = Decimal("0.908")


def stamp(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


class Events:
    """The generated events, kept for the batch computations (times as datetimes)."""

    def __init__(self) -> None:
        self.persons: list[dict] = []
        self.auctions: list[dict] = []
        self.bids: list[dict] = []
        self.order: list[tuple[str, dict]] = []  # every event, as generated: (table, row)

    def tables(self) -> dict[str, list[dict]]:
        return {"person": self.persons, "auction": self.auctions, "bid": self.bids}


def generate(data: Path, count: int, seed: int) -> Events:
    """``count`` events in Nexmark's proportions, then one of each kind a minute later (closes every window),
    written as ``FILES`` JSON files per table under ``data``."""
    events = make_events(count, seed, closing=True)
    for table, rows in events.tables().items():
        write_rows(data / table, rows, "part")
    return events


def tranches(folder: Path, sizes: list[int], seed: int) -> list[steady.Tranche]:
    """Consecutive tranches of ``sizes`` events (event time running on from one to the next), each as
    ``FILES`` JSON files per table under ``folder/<n>/<table>``, for long-running jobs."""
    events = make_events(sum(sizes), seed, closing=False)
    made, first = [], 0
    for number, size in enumerate(sizes):
        chunk: dict[str, list[dict]] = {table: [] for table in events.tables()}
        for table, row in events.order[first : first + size]:
            chunk[table].append(row)
        files = {
            table: write_rows(folder / str(number) / table, rows, f"part-{number:02d}") for table, rows in chunk.items()
        }
        made.append(steady.Tranche(files, {table: len(rows) for table, rows in chunk.items()}))
        first += size
    return made


def write_rows(folder: Path, rows: list[dict], prefix: str) -> list[Path]:
    folder.mkdir(parents=True)
    size = -(-len(rows) // FILES)
    paths = []
    for f in range(FILES):
        lines = [
            json.dumps({k: stamp(v) if isinstance(v, datetime) else v for k, v in row.items()}, separators=JSON)
            for row in rows[f * size : (f + 1) * size]
        ]
        paths.append(folder / f"{prefix}-{f:03d}.json")
        paths[-1].write_text("".join(line + "\n" for line in lines))
    return paths


def make_events(count: int, seed: int, *, closing: bool) -> Events:
    """``count`` events in Nexmark's proportions (``closing``: then one of each kind a minute later)."""
    rng = random.Random(seed)
    events = Events()
    next_person, next_auction = FIRST_ID, FIRST_ID

    def person(at: datetime) -> dict:
        nonlocal next_person
        city, state = rng.choice(CITIES)
        name = f"{rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)}"
        row = {
            "id": next_person,
            "name": name,
            "email_address": f"{name.replace(' ', '.')}@example.com",
            "credit_card": " ".join(f"{rng.randint(0, 9999):04d}" for _ in range(4)),
            "city": city,
            "state": state,
            "date_time": at,
            "extra": "",
        }
        next_person += 1
        events.persons.append(row)
        events.order.append(("person", row))
        return row

    def auction(at: datetime) -> dict:
        nonlocal next_auction
        initial = rng.randint(1, 1000)
        row = {
            "id": next_auction,
            "item_name": f"item-{next_auction}",
            "description": "a fine item",
            "initial_bid": initial,
            "reserve": initial + rng.randint(1, 1000),
            "date_time": at,
            "expires": at + timedelta(seconds=rng.randint(2, 20)),
            "seller": max(FIRST_ID, next_person - 1 - rng.randint(0, 9)),
            "category": 10 + rng.randint(0, 4),
            "extra": "",
        }
        next_auction += 1
        events.auctions.append(row)
        events.order.append(("auction", row))
        return row

    def bid(at: datetime) -> dict:
        row = {
            "auction": rng.randint(max(FIRST_ID, next_auction - 50), next_auction - 1),
            "bidder": rng.randint(max(FIRST_ID, next_person - 100), next_person - 1),
            "price": rng.randint(1, 100_000),
            "channel": rng.choice(CHANNELS),
            "url": f"https://www.nexmark.com/item.htm?query=1&channel_id={rng.randint(0, 10_000)}",
            "date_time": at,
            "extra": "",
        }
        events.bids.append(row)
        events.order.append(("bid", row))
        return row

    for i in range(count):
        at = START + timedelta(milliseconds=i * 1000 // EVENTS_PER_SECOND)
        kind = i % 50
        (person if kind == 0 else auction if kind <= 3 else bid)(at)
    if closing:
        last = START + timedelta(milliseconds=count * 1000 // EVENTS_PER_SECOND, minutes=1)
        person(last), auction(last), bid(last)
    return events


# ---- the same queries, computed in plain Python ----------------------------------------------


def epoch_seconds(at: datetime) -> int:
    return int((at - datetime(1970, 1, 1, tzinfo=UTC)).total_seconds() // 1)


def final_watermark(bids: list[dict]) -> datetime:
    """The watermark after the last event: windows that end by then are closed (and written)."""
    return max(b["date_time"] for b in bids) - WATERMARK_DELAY


def expected(query: str, events: Events) -> Counter:
    bids = events.bids
    if query == "q0":
        return Counter((b["auction"], b["bidder"], b["price"], b["date_time"]) for b in bids)
    if query == "q1":
        return Counter((b["auction"], b["bidder"], Decimal(b["price"]) * EUROS, b["date_time"]) for b in bids)
    if query == "q2":
        return Counter((b["auction"], b["price"]) for b in bids if b["auction"] % 123 == 0)
    if query == "q5":
        size, slide = timedelta(seconds=10), timedelta(seconds=2)
        counts: Counter = Counter()
        for b in bids:
            seconds = epoch_seconds(b["date_time"])
            last = datetime.fromtimestamp(seconds - seconds % 2, UTC)
            for k in range(5):
                start = last - k * slide
                if start <= b["date_time"] < start + size:
                    counts[(b["auction"], start)] += 1
        watermark = final_watermark(bids)
        return Counter((auction, start, n) for (auction, start), n in counts.items() if start + size <= watermark)
    if query == "q7":
        size = timedelta(seconds=10)
        top: dict[datetime, tuple] = {}
        for b in bids:
            seconds = epoch_seconds(b["date_time"])
            start = datetime.fromtimestamp(seconds - seconds % 10, UTC)
            top[start] = max(top.get(start, (-1, -1, -1)), (b["price"], b["auction"], b["bidder"]))
        watermark = final_watermark(bids)
        return Counter((start, *best) for start, best in top.items() if start + size <= watermark)
    if query == "q8":
        by_seller: dict[int, list[dict]] = defaultdict(list)
        for a in events.auctions:
            by_seller[a["seller"]].append(a)
        rows: Counter = Counter()
        for p in events.persons:
            window = epoch_seconds(p["date_time"]) // 10
            for a in by_seller[p["id"]]:
                if epoch_seconds(a["date_time"]) // 10 == window:
                    rows[(p["id"], p["name"], a["id"], a["reserve"], datetime.fromtimestamp(window * 10, UTC))] += 1
        return rows
    raise ValueError(query)


def produced(query: str, out: Path) -> Counter:
    rows = committed_json_rows(out / query)
    when = datetime.fromisoformat
    if query in ("q0", "q1"):
        price = (lambda r: Decimal(str(r["price"]))) if query == "q1" else (lambda r: r["price"])
        return Counter((r["auction"], r["bidder"], price(r), when(r["date_time"])) for r in rows)
    if query == "q2":
        return Counter((r["auction"], r["price"]) for r in rows)
    if query == "q5":
        return Counter((r["auction"], when(r["window_start"]), r["bids"]) for r in rows)
    if query == "q7":
        return Counter((when(r["window_start"]), r["price"], r["auction"], r["bidder"]) for r in rows)
    return Counter((r["person_id"], r["name"], r["auction_id"], r["reserve"], when(r["window_start"])) for r in rows)


# The tables each query reads: its throughput counts their events, and a long-running side is handed
# their files of a tranche.
READS = {
    "q0": ("bid",),
    "q1": ("bid",),
    "q2": ("bid",),
    "q5": ("bid",),
    "q7": ("bid",),
    "q8": ("person", "auction"),
}
STATEFUL = ("q5", "q7", "q8")


def events_read(query: str, events: Events) -> int:
    tables = events.tables()
    return sum(len(tables[table]) for table in READS[query])


# ---- running a query ---------------------------------------------------------------------------


# Streaming settings measured against Spark's defaults: each group with it and without it
# (the template as it is, and with the group added or taken out).
SETTINGS = {
    "shuffle partitions 4": {"spark.sql.shuffle.partitions": "4"},
    "RocksDB state store, changelog checkpointing": {
        "spark.sql.streaming.stateStore.providerClass": (
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
        ),
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    },
}


def in_template(group: str) -> bool:
    properties = yaml.safe_load(TEMPLATE.read_text()).get("sparkProperties") or {}
    return all(str(properties.get(k)) == v for k, v in SETTINGS[group].items())


def toggled(group: str) -> str:
    """The repository's template with ``group``'s settings toggled: added if it lacks them, else taken out
    (Spark's defaults)."""
    document = yaml.safe_load(TEMPLATE.read_text())
    properties = {k: str(v) for k, v in (document.get("sparkProperties") or {}).items()}
    adding = not in_template(group)
    for key, value in SETTINGS[group].items():
        if adding:
            properties[key] = value
        else:
            properties.pop(key, None)
    return yaml.safe_dump({**document, "sparkProperties": properties}, sort_keys=False)


def run(work: Path, data: Path, query: str) -> float:
    """Run ``query`` once on a fresh project; its batches' seconds. Output under ``work/out``."""
    project = work / "project"
    shutil.rmtree(project, ignore_errors=True)
    shutil.rmtree(work / "out", ignore_errors=True)
    shutil.copytree(PROJECT, project)
    shutil.copy(TEMPLATE, project / "manifests" / "job-template.yaml")
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "NEXMARK_DATA": str(data), "NEXMARK_OUT": str(work / "out")}
    result = subprocess.run(
        [SQL_RUNNER, "run", f"manifests/{query}.yaml", "--once"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
        env=env,
    )
    if result.returncode != 0:
        raise SystemExit(f"{query} failed: {result.stdout[-2000:]}{result.stderr[-3000:]}")
    status = json.loads((project / ".sql-runner" / "manifests" / "status" / f"{query}.json").read_text())
    return results.batch_seconds(status.get("recent-progress") or [])


TRIGGER = "1 second"  # a micro-batch as soon as a tranche's files are there
TIMEOUT = 900.0  # seconds a side may take over one tranche


def settings_side(folder: Path, query: str, group: str | None) -> steady.Side:
    """``query`` through the runner as a long-running job, with the template as it is (``group`` None) or
    with ``group``'s settings toggled (added if the template lacks them, else taken out)."""
    name = group or "template"
    project = folder / name.replace(" ", "-").replace(",", "") / "project"
    shutil.copytree(PROJECT, project)
    if group is None:
        shutil.copy(TEMPLATE, project / "manifests" / "job-template.yaml")
    else:
        (project / "manifests" / "job-template.yaml").write_text(toggled(group))
    manifest = project / "manifests" / f"{query}.yaml"
    manifest.write_text(manifest.read_text() + f"trigger-interval: {TRIGGER}\n")
    data, out = project.parent / "in", project.parent / "out"
    inputs = {table: data / table for table in READS[query]}
    return steady.runner_job(name, project, query, inputs, {"NEXMARK_DATA": str(data), "NEXMARK_OUT": str(out)})


def compare_settings(work: Path, queries: list[str], events: int, rounds: int, seed: int) -> list[results.Record]:
    """Each group of ``SETTINGS`` against Spark's defaults for it, on long-running jobs of each query: the
    template as it is and with each group toggled, started once on a warm-up tranche of ``events`` events,
    then handed the same next tranche each round, one after another (the order rotating)."""
    warm_up, *measured = tranches(work / "tranches", [events] * (rounds + 1), seed)
    records = []
    for query in queries:

        def read(tranche: steady.Tranche, tables: tuple[str, ...] = READS[query]) -> steady.Tranche:
            return steady.Tranche({t: tranche.files[t] for t in tables}, {t: tranche.rows[t] for t in tables})

        folder = work / f"settings-{query}"
        sides = [settings_side(folder, query, group) for group in (None, *SETTINGS)]
        rates: dict[str, list[float]] = {side.name: [] for side in sides}
        try:
            steady.launch(sides, read(warm_up), TIMEOUT, timed=False)
            for round_, tranche in enumerate(measured):
                shift = round_ % len(sides)
                handed = read(tranche)
                for side in sides[shift:] + sides[:shift]:
                    seconds = steady.feed(side, handed, TIMEOUT)
                    rates[side.name].append(sum(handed.rows.values()) / seconds / CORES)
                print(f"{query} round {round_ + 1}: " + ", ".join(f"{k} {v[-1]:,.0f}" for k, v in rates.items()))
        finally:
            steady.stop_all(sides)
        shutil.rmtree(folder, ignore_errors=True)
        for group in SETTINGS:
            with_, without = (
                (rates["template"], rates[group]) if in_template(group) else (rates[group], rates["template"])
            )
            kept = "in the template" if in_template(group) else "not in the template"
            name = f"nexmark {query}: {group} vs Spark's default ({kept})"
            records.append(results.record(name, list(zip(with_, without, strict=True)), "events/s/core"))
            print(f"{name}: x{statistics.median(o / r for o, r in zip(with_, without, strict=True)):.2f}", flush=True)
    return records


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=500_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--queries", default=",".join(READS))
    parser.add_argument("--defaults", default="q5,q8", help="stateful queries to measure the settings on")
    parser.add_argument("--defaults-events", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    for option, value, known in (("--queries", args.queries, tuple(READS)), ("--defaults", args.defaults, STATEFUL)):
        unknown = sorted(set(value.split(",")) - {"", *known})
        if unknown:
            parser.error(f"unknown {option} {', '.join(unknown)}: choose from {', '.join(known)}")
    records: list[results.Record] = []
    with tempfile.TemporaryDirectory(prefix="nexmark-bench-") as tmp:
        work = Path(tmp)
        data = work / "data"
        began = time.monotonic()
        events = generate(data, args.events, args.seed)
        print(f"generated {args.events:,} events in {time.monotonic() - began:.0f}s", flush=True)
        for query in [q for q in args.queries.split(",") if q]:
            seconds = run(work, data, query)
            got, want = produced(query, work / "out"), expected(query, events)
            if got != want:
                missing, extra = want - got, got - want
                raise SystemExit(
                    f"{query}: the output differs from the batch computation: {sum(missing.values())} rows missing "
                    f"(e.g. {list(missing)[:2]}), {sum(extra.values())} unexpected (e.g. {list(extra)[:2]})"
                )
            rate = events_read(query, events) / seconds / CORES
            print(f"{query}: {sum(got.values()):,} rows, exactly as computed; {rate:,.0f} events/s/core", flush=True)
            records.append(results.measured(f"nexmark {query}: events/s per core (exact)", [rate], "events/s/core"))
        defaults = [q for q in args.defaults.split(",") if q]
        if defaults:
            records += compare_settings(work, defaults, args.defaults_events, args.rounds, args.seed)
    print(results.table(records))
    print(f"written to {results.write('nexmark', records)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
