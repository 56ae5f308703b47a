"""Runner overhead: the same query through the runner and as a hand-written PySpark job, side by side.

    .venv/bin/python bench/overhead.py [--events 1000000] [--per-round filter=3,window=1,join=1]
                                       [--warm-up 1000000] [--settle filter=2,window=1,join=1]
                                       [--forks 2] [--rounds 3] [--queries filter,window,join]
                                       [--sinks noop,parquet] [--references checked,again]
                                       [--others-with filter]

The same seeded JSON card transactions (and refunds, for the join) are read by every
side: ``sql-runner run`` of a manifest (dead-lettering on, the default), and hand-written
PySpark jobs reading the same files with the same schema, the same query, the same six
metadata columns and the same sink, all through spark-submit with the same settings
(local[2], the repository's job template's Spark settings, a micro-batch every second).

The hand-written job comes in variants (``--references``; the first runs with every query
and sink, the others with the noop sink of the ``--others-with`` queries only):

- ``checked`` ("by hand, same checks"): the runner's job's work, as a Spark user writes it.
  Dead-lettering means every record is checked against the declared schema and a malformed
  one is caught whether or not it would pass the query's filter; the job does that with
  Spark's corrupt-record column (PERMISSIVE mode), keeps the records that parsed and reads
  every record in full (no JSON filter pushdown, which would skip the rest of a record once
  the filter fails, malformed or not). Spark's reader then parses only the columns the query
  uses, where the runner's job parses every declared column (so that every query over a
  table sets the same records aside): the runner does a little more, and its ratio against
  this job errs against it.
- ``plain`` ("by hand, no checks"): what a Spark user writes who does not look for
  malformed records, with Spark's defaults (a filter pushed into the JSON reader).
- ``full`` ("by hand, no checks, no pushdown"): plain, with that pushdown off; it tells the
  two costs of checking apart.
- ``again`` ("by hand, same checks, another JVM"): ``checked`` once more, in JVMs of its
  own. Its row is the two against each other (A/A), over the same forks: what this bench
  reads between two identical jobs, the band around any ratio it reports.

Each side is a long-running streaming job, started on a warm-up tranche, then handed
``--settle`` more rounds, not measured: a JVM keeps compiling hot code over its first
micro-batches, and a first round after the warm-up took up to half again as long as the
later ones. Each round then hands every side the next ``--per-round`` tranches of
``--events`` events (as one micro-batch), one side after another, and waits for each to
process it (bench/steady.py). The filter takes three tranches a round and settles over two
rounds (``PER_ROUND``, ``SETTLE``: a batch of one tranche took under a second, and its
rounds varied more and kept getting faster for many more of them).

A query and sink's sides run ``--forks`` times, each time in new processes, ``--rounds``
rounds each, as JMH forks a benchmark: a JVM keeps what its compilers made of the hot code
for its life, and one pair of JVMs ran the same hand-written job x0.908 to x1.066 of itself
(seven pairs here, filter into noop, six rounds each), a spread no number of rounds in the
same two JVMs narrows. The rows' ratios are over every fork's rounds; each fork's own
median is printed. Two forks of three rounds keep ``make bench`` under 30 minutes here
(three of two took 34 minutes: a fork's start, warm-up and stop cost about 45 seconds; with
``plain`` among the defaults, two forks of three rounds took 29 min 7 s: too close, so
``plain`` runs on request). The order of the sides rotates by one every measured round,
over the forks, so with two sides each goes first, and last, equally often. Rounds of one
side differ by up to 15 % on a 2-core machine.

Throughput is the events handed in the round over the query's batches' trigger time, from its progress
(ours: the job's status; by hand: its query's progress, printed). Not Spark's "input rows": a filter Spark
pushes into the JSON reader makes the skipped rows uncounted there, though they were read.
Beside it, the events over the CPU seconds the side's processes used in the round (every
thread: tasks, the JVM's compilers and garbage collector, the drivers): what the work costs.
It moves with the batch time (within two hundredths of its ratio in a run here), so a slow
round is one whose work took more CPU, not one that waited for a core; it is no steadier.
Start-up is launch to the warm-up tranche processed, per query with the first of ``--sinks`` in its
first fork (its sides started one after another); the other forks' and sinks' sides start at once.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import results, steady  # noqa: E402
from jobs import localfs  # noqa: E402
from runner.core import platform  # noqa: E402
from runner.deploy import submit  # noqa: E402

TEMPLATE = ROOT / "manifests" / "job-template.yaml"
START = datetime(2026, 1, 1, tzinfo=UTC)
FILES = 20
SINKS = ("noop", "parquet")
TRIGGER = "1 second"  # both sides: a micro-batch as soon as a tranche's files are there
TIMEOUT = 900.0  # seconds a side may take over one round
# Tranches a round hands each query, and rounds handed after the warm-up, not measured, each by default.
# The filter's batch of one tranche took under a second here and varied by about 5 % (sd) between rounds
# once steady, against about 3 % for a batch of three. It also kept getting faster over its first rounds
# (a batch of one: from about 1.0 to 0.8 s over 15 to 20 of them, its JVM's C2 compiler still at work
# throughout; of three: two rounds), so its sides settle over two. The window and join take 3 to 7 s a
# tranche already.
PER_ROUND = {"filter": 3, "window": 1, "join": 1}
SETTLE = {"filter": 2, "window": 1, "join": 1}
METADATA = """, __create_timestamp TIMESTAMP(3), __query_name STRING, __query_description STRING,
  __query_id STRING, __query_version INT, __query_create_timestamp TIMESTAMP(3)"""
SOURCES = """
CREATE TABLE `bench`.`tx` (transaction_id STRING, account_id STRING, payee STRING, amount DOUBLE, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND)
WITH ('connector' = 'filesystem', 'path' = '{data}/tx', 'format' = 'json');
CREATE TABLE `bench`.`refunds` (refund_id STRING, transaction_id STRING, refunded_at TIMESTAMP(3),
  WATERMARK FOR refunded_at AS refunded_at - INTERVAL '5' SECOND)
WITH ('connector' = 'filesystem', 'path' = '{data}/refunds', 'format' = 'json');
"""
QUERIES = {
    "filter": (
        "SELECT transaction_id, account_id, amount, ts FROM `bench`.`tx` WHERE amount > 500",
        "transaction_id STRING, account_id STRING, amount DOUBLE, ts TIMESTAMP(3)",
    ),
    "window": (
        "SELECT account_id, window(ts, '1 minute').start AS window_start, count(*) AS n "
        "FROM `bench`.`tx` GROUP BY account_id, window(ts, '1 minute')",
        "account_id STRING, window_start TIMESTAMP(3), n BIGINT",
    ),
    "join": (
        "SELECT t.transaction_id, t.amount, r.refund_id FROM `bench`.`tx` t JOIN `bench`.`refunds` r "
        "ON t.transaction_id = r.transaction_id "
        "AND r.refunded_at BETWEEN t.ts AND t.ts + INTERVAL 10 MINUTES",
        "transaction_id STRING, amount DOUBLE, refund_id STRING",
    ),
}
# The end of every hand-written job: its progress, as the runner's job publishes it (polled twice a second).
PRINT_PROGRESS = """\
printed = -1
ran = lambda p: "addBatch" in p.durationMs  # not an idle query's progress (which names the batch to come)
while query.isActive:  # its progress, as the runner's job publishes it: polled, twice a second
    last = query.lastProgress
    if last is not None and last.batchId > printed:
        new = [last] if last.batchId == printed + 1 else query.recentProgress
        for p in (json.loads(p.json) for p in new if p.batchId > printed and ran(p)):
            printed = p["batchId"]
            row = {"batch": p["batchId"], "input-rows": p["numInputRows"],
                   "batch-duration-ms": p["durationMs"].get("triggerExecution")}
            print("PROGRESS " + json.dumps(row), flush=True)
    time.sleep(0.5)
"""
HANDWRITTEN = (
    """
import json, sys, time, uuid
from datetime import datetime, timezone
from pyspark.sql import SparkSession, functions as F
data, out, checkpoint, sink, sql, trigger, checked = sys.argv[1:8]
spark = SparkSession.builder.getOrCreate()
def read(schema, folder):  # checked: each record against the schema, malformed ones left out
    if checked != "checked":
        return spark.readStream.schema(schema).json(folder)
    frame = (spark.readStream.schema(schema + ", _corrupt_record STRING").option("mode", "PERMISSIVE")
             .option("columnNameOfCorruptRecord", "_corrupt_record").json(folder))
    return frame.where("_corrupt_record IS NULL").drop("_corrupt_record")
tx = read("transaction_id STRING, account_id STRING, payee STRING, amount DOUBLE, ts TIMESTAMP", f"{data}/tx")
tx = tx.withWatermark("ts", "5 seconds")
refunds = read("refund_id STRING, transaction_id STRING, refunded_at TIMESTAMP", f"{data}/refunds")
refunds = refunds.withWatermark("refunded_at", "5 seconds")
tx.createOrReplaceTempView("tx")
refunds.createOrReplaceTempView("refunds")
created = datetime(2026, 1, 1, tzinfo=timezone.utc)
result = spark.sql(sql.replace("`bench`.", "")).select(
    "*",
    F.current_timestamp().alias("__create_timestamp"),
    F.lit("q").alias("__query_name"),
    F.lit("bench query").alias("__query_description"),  # the same values as the runner's job writes:
    F.lit(str(uuid.uuid4())).alias("__query_id"),  # a query id is a UUID (in parquet, longer strings cost)
    F.lit(1).alias("__query_version"),
    F.lit(created).alias("__query_create_timestamp"),
)
writer = result.writeStream.option("checkpointLocation", checkpoint).trigger(processingTime=trigger)
writer = writer.outputMode("update" if "GROUP BY" in sql and sink == "noop" else "append")
query = (writer.format("noop") if sink == "noop" else writer.format("parquet").option("path", out)).start()
"""
    + PRINT_PROGRESS
)


def generate(tranches: Path, sizes: list[int], seed: int) -> list[steady.Tranche]:
    """Tranches of seeded transactions (``sizes`` events each, over ``FILES`` files) and a refund for
    every tenth; event time runs on from one tranche to the next, every 30 ms."""
    rng = random.Random(seed)
    accounts = [f"acct-{i:05d}" for i in range(5000)]
    payees = ("grocer", "airline", "bookshop", "cafe", "electronics", "pharmacy", "hotel", "taxi")
    seconds: dict[int, str] = {}

    def stamp(ms: int) -> str:  # START + ms as 2026-01-01T00:00:00.000Z: one strftime a second, not an event
        whole, rest = divmod(ms, 1000)
        prefix = seconds.get(whole)
        if prefix is None:
            prefix = seconds[whole] = (START + timedelta(seconds=whole)).strftime("%Y-%m-%dT%H:%M:%S.")
        return f"{prefix}{rest:03d}Z"

    made, first = [], 0
    for number, size in enumerate(sizes):
        folder = {table: tranches / str(number) / table for table in ("tx", "refunds")}
        files: dict[str, list[Path]] = {"tx": [], "refunds": []}
        rows = {"tx": 0, "refunds": 0}
        per_file = size // FILES
        for f in range(FILES):
            tx_lines, refund_lines = [], []
            for i in range(first + f * per_file, first + (f + 1) * per_file):
                tx_lines.append(
                    f'{{"transaction_id":"t{i}","account_id":"{rng.choice(accounts)}","payee":"{rng.choice(payees)}",'
                    f'"amount":{rng.randint(1, 100000) / 100},"ts":"{stamp(i * 30)}"}}\n'
                )
                if i % 10 == 0:
                    later = stamp(i * 30 + rng.randint(1, 300) * 1000)
                    refund_lines.append(f'{{"refund_id":"r{i}","transaction_id":"t{i}","refunded_at":"{later}"}}\n')
            for table, lines in (("tx", tx_lines), ("refunds", refund_lines)):
                folder[table].mkdir(parents=True, exist_ok=True)
                path = folder[table] / f"part-{number:02d}-{f:03d}.json"
                path.write_text("".join(lines))
                files[table].append(path)
                rows[table] += len(lines)
        made.append(steady.Tranche(files, rows))
        first += per_file * FILES
    return made


def joined(tranches: list[steady.Tranche]) -> steady.Tranche:
    """Several tranches handed as one: every table's files of each, in order, and the rows they hold."""
    tables = tranches[0].files
    return steady.Tranche(
        {table: [path for tranche in tranches for path in tranche.files[table]] for table in tables},
        {table: sum(tranche.rows[table] for tranche in tranches) for table in tables},
    )


def counts(option: str, text: str, defaults: dict[str, int], least: int) -> dict[str, int]:
    """Per query counts from ``--per-round``/``--settle``: ``n`` for every query, or ``query=n,...`` over
    the defaults. Raises ValueError, naming the option, for anything else."""
    text = text.strip()
    if text.isdigit():
        found = dict.fromkeys(defaults, int(text))
    else:
        found = dict(defaults)
        for part in text.split(","):
            query, sep, value = part.strip().partition("=")
            if not sep or query not in defaults or not value.strip().isdigit():
                raise ValueError(
                    f"{option} takes a count or query=count pairs over {', '.join(defaults)} (got {part.strip()!r})"
                )
            found[query] = int(value)
    low = {query: n for query, n in found.items() if n < least}
    if low:
        raise ValueError(f"{option} must be {least} or more (got {low})")
    return found


def events_read(query: str, tranche: steady.Tranche) -> int:
    """The events ``query`` reads of ``tranche``: every transaction, and every refund for the join."""
    return tranche.rows["tx"] + (tranche.rows["refunds"] if query == "join" else 0)


def template_properties() -> dict[str, str]:
    """The Spark settings of the repository's job template: what every manifest gets, so both sides get them."""
    text = TEMPLATE.read_text()
    return {str(k): str(v) for k, v in (yaml.safe_load(text).get("sparkProperties") or {}).items()}


def properties(checkpoint: str) -> list[str]:
    """The spark-submit settings both sides share: local[2], the runner's quiet defaults, local file I/O
    and the template's Spark settings."""
    merged = {
        **submit.DEFAULT_PROPERTIES,
        **localfs.properties(checkpoint),
        **platform.properties(os.environ),  # the jar set on the classpath, as every job the runner starts has it
        **template_properties(),
        "spark.driver.memory": "2g",
    }
    return [arg for key, value in merged.items() for arg in ("--conf", f"{key}={value}")]


def hand_written_submit(checkpoint: str) -> list[str]:
    """spark-submit of a hand-written job, up to its script: local[2], the shared settings, this Python."""
    return [
        str(submit.spark_submit_path()),
        "--master",
        "local[2]",
        *properties(checkpoint),
        "--conf",
        f"spark.pyspark.python={sys.executable}",
    ]


def postgres_job(folder: Path, script: str, table: str | tuple[str, ...], trigger: str, server: Any) -> steady.Side:
    """A hand-written job over PostgreSQL (``server``, a ``demo/postgres_server.py`` server): ``script`` run by
    spark-submit with 2 GiB of driver memory, reading ``folder/by-hand/in`` as ``table``'s folder (several
    tables: each one's folder in it, by name), given its checkpoint, the trigger and the server's port; its
    password in the environment only."""
    here = folder / "by-hand"
    here.mkdir(parents=True)
    (here / "handwritten.py").write_text(script)
    checkpoint = here / "checkpoint"
    args = [
        *hand_written_submit(str(checkpoint)),
        "--driver-memory",
        "2g",
        str(here / "handwritten.py"),
        str(here / "in"),
        str(checkpoint),
        trigger,
        str(server.port),
    ]
    return steady.Side(
        "by hand",
        args,
        here,
        {table: here / "in"} if isinstance(table, str) else {name: here / "in" / name for name in table},
        lambda: checkpoint if (checkpoint / "commits").exists() else None,
        steady.printed_progress,
        env={"PG_PASSWORD": server.password},
    )


def ours(combo: Path, query: str, sink: str) -> steady.Side:
    """``sql-runner run`` of the query's manifest (dead-lettering on), running until stopped."""
    project, data = combo / "ours", combo / "ours" / "in"
    (project / "manifests" / "tables").mkdir(parents=True)
    sql, columns = QUERIES[query]
    target = (
        "WITH ('connector' = 'blackhole')"
        if sink == "noop"
        else f"WITH ('connector' = 'filesystem', 'path' = '{project}/out', 'format' = 'parquet')"
    )
    key = ", PRIMARY KEY (account_id, window_start) NOT ENFORCED" if query == "window" and sink == "noop" else ""
    (project / "manifests" / "tables" / "tables.sql").write_text(
        SOURCES.format(data=data) + f"CREATE TABLE `bench`.`out` ({columns}{METADATA}{key}) {target};\n"
    )
    shutil.copy(TEMPLATE, project / "manifests" / "job-template.yaml")
    (project / "manifests" / "q.yaml").write_text(
        f'name: q\ndescription: bench query\ntarget-table: "`bench`.`out`"\nsql: "{sql}"\n'
        f"trigger-interval: {TRIGGER}\n"
        "sparkProperties:\n  spark.driver.memory: 2g\n"
    )
    inputs = {table: data / table for table in ("tx", "refunds")}
    return steady.runner_job("ours", project, "q", inputs)


VARIANTS = {  # the hand-written job's variants: side name, JSON filter pushdown, records checked
    "checked": ("by hand, same checks", False, True),
    "plain": ("by hand, no checks", True, False),
    "full": ("by hand, no checks, no pushdown", False, False),
    "again": ("by hand, same checks, another JVM", False, True),
}


def reference(combo: Path, query: str, sink: str, variant: str) -> steady.Side:
    """The hand-written job, running until stopped: ``checked``, doing the same work as the runner (each
    record checked against its schema through Spark's corrupt-record column, the malformed ones left out,
    every record read in full: a malformed record must be caught whether or not it passes the query's
    filter); ``plain``, as a Spark user writes it who does not look for malformed records (Spark's
    defaults: a filter is pushed into the JSON reader, which then skips converting the rest of a record
    that fails it); ``full``, plain but with that pushdown off."""
    name, pushdown, checked = VARIANTS[variant]
    folder = combo / f"reference-{variant}"
    folder.mkdir(parents=True)
    script = folder / "handwritten.py"
    script.write_text(HANDWRITTEN)
    checkpoint = folder / "checkpoint"
    args = [
        *hand_written_submit(str(checkpoint)),
        "--conf",
        f"spark.sql.json.filterPushdown.enabled={str(pushdown).lower()}",
        str(script),
        str(folder / "in"),
        str(folder / "out"),
        str(checkpoint),
        sink,
        QUERIES[query][0],
        TRIGGER,
        "checked" if checked else "as read",
    ]
    inputs = {table: folder / "in" / table for table in ("tx", "refunds")}

    def found() -> Path | None:
        return checkpoint if (checkpoint / "commits").is_dir() else None

    return steady.Side(name, args, folder, inputs, found, steady.printed_progress)


def row_records(
    query: str, sink: str, rates: dict[str, list[float]], per_cpu: dict[str, list[float]], rounds: int
) -> list[results.Record]:
    """The rows of one query and sink: ours against each hand-written variant (events/s and events per CPU
    second), and ``again`` against ``checked`` (A/A), each over every fork's rounds. Each fork's own median
    of the events/s ratio is printed beside them: how far one pair of JVMs alone would have put it."""
    made = []
    checked, again = VARIANTS["checked"][0], VARIANTS["again"][0]
    for name in rates:
        if name == "ours":
            continue
        same_job = name == again and checked in rates  # A/A: the same job in two JVMs
        if same_job:
            label = f"{query} -> {sink}: events/s, {checked} vs the same in another JVM (A/A)"
            pairs = list(zip(rates[checked], rates[name], strict=True))
        else:
            label = f"{query} -> {sink}: events/s vs {name}"
            pairs = list(zip(rates["ours"], rates[name], strict=True))
        forks = [pairs[start : start + rounds] for start in range(0, len(pairs), rounds)]
        medians = ", ".join(f"x{statistics.median(a / b for a, b in fork):.3f}" for fork in forks)
        print(f"{label}: each fork's median {medians}", flush=True)
        made.append(results.record(label, pairs, "events/s"))
        if not same_job:
            label = f"{query} -> {sink}: events per CPU second vs {name}"
            made.append(results.record(label, list(zip(per_cpu["ours"], per_cpu[name], strict=True)), "events/CPU s"))
    return made


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000, help="events per tranche")
    parser.add_argument(
        "--per-round",
        default=",".join(f"{q}={n}" for q, n in PER_ROUND.items()),
        help="tranches a measured round hands each query: a count for all, or query=count pairs",
    )
    parser.add_argument("--warm-up", type=int, default=1_000_000, help="events of the warm-up tranche")
    parser.add_argument(
        "--references",
        default="checked,again",
        help=f"hand-written variants ({', '.join(VARIANTS)}): the first with every query and sink, "
        "the others with the noop sink of the --others-with queries only",
    )
    parser.add_argument(
        "--others-with",
        default="filter",
        help="queries the other variants run with (the filter, where skipping the checks shows most: "
        "its filter pushed into the JSON reader)",
    )
    parser.add_argument("--forks", type=int, default=2, help="pairs of JVMs (new processes) per query and sink")
    parser.add_argument("--rounds", type=int, default=3, help="measured rounds per fork")
    parser.add_argument(
        "--settle",
        default=",".join(f"{q}={n}" for q, n in SETTLE.items()),
        help="rounds handed to every side after the warm-up, not measured: a count for all, or query=count pairs",
    )
    parser.add_argument("--queries", default="filter,window,join")
    parser.add_argument("--sinks", default="noop,parquet")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    if args.forks < 1 or args.rounds < 1:
        parser.error(f"--forks and --rounds must be 1 or more (got {args.forks} and {args.rounds})")
    try:
        per_round = counts("--per-round", args.per_round, PER_ROUND, 1)
        settle = counts("--settle", args.settle, SETTLE, 0)
    except ValueError as error:
        parser.error(str(error))
    first, *others = args.references.split(",")
    unknown = sorted({first, *others} - set(VARIANTS))
    if unknown:
        parser.error(f"unknown --references {', '.join(unknown)}: choose from {', '.join(VARIANTS)}")
    for option, value, known in (
        ("--queries", args.queries, list(QUERIES)),
        ("--others-with", args.others_with, list(QUERIES)),
        ("--sinks", args.sinks, list(SINKS)),
    ):
        unknown = sorted(set(value.split(",")) - set(known))
        if unknown:
            parser.error(f"unknown {option} {', '.join(unknown)}: choose from {', '.join(known)}")
    records: list[results.Record] = []
    starts: list[tuple[float, float]] = []
    with tempfile.TemporaryDirectory(prefix="overhead-bench-") as tmp:
        work = Path(tmp)
        began = time.monotonic()
        queries = args.queries.split(",")
        needed = max((settle[query] + args.rounds) * per_round[query] for query in queries)
        sizes = [args.warm_up] + [args.events] * needed
        warm_up, *tranches = generate(work / "tranches", sizes, args.seed)
        print(f"generated {sum(sizes):,} events in {time.monotonic() - began:.0f}s")
        sinks = args.sinks.split(",")
        for query, sink in ((query, sink) for query in queries for sink in sinks):
            per, settling = per_round[query], settle[query]
            handed = [joined(tranches[n * per : (n + 1) * per]) for n in range(settling + args.rounds)]
            variants = [first, *others] if sink == "noop" and query in args.others_with.split(",") else [first]
            names = ["ours", *(VARIANTS[variant][0] for variant in variants)]
            rates: dict[str, list[float]] = {name: [] for name in names}
            per_cpu: dict[str, list[float]] = {name: [] for name in names}
            for fork in range(args.forks):
                combo = work / f"{query}-{sink}" / f"fork-{fork}"
                sides = [ours(combo, query, sink), *(reference(combo, query, sink, variant) for variant in variants)]
                try:
                    # Start-up is timed with the first sink's first fork (the sides one after another, the first
                    # alternating); the other forks' and sinks' sides start at once.
                    timed = sink == sinks[0] and fork == 0
                    order = sides if len(starts) % 2 == 0 else sides[::-1]
                    launched = steady.launch(order, warm_up, TIMEOUT, timed=timed)
                    if timed:
                        starts.append((launched["ours"], launched[VARIANTS[first][0]]))
                        print(f"{query}/{sink} launch to the warm-up tranche processed, s: {launched}", flush=True)
                    for number, tranche in enumerate(handed):  # the first `settling` are not measured
                        round_ = fork * args.rounds + number - settling + 1
                        turn = (round_ - 1) % len(sides)  # measured rounds rotate the order over every fork
                        order = sides[turn:] + sides[:turn]
                        seconds = {side.name: steady.feed(side, tranche, TIMEOUT) for side in order}
                        if number < settling:
                            continue
                        for side in sides:
                            rates[side.name].append(events_read(query, tranche) / seconds[side.name])
                            per_cpu[side.name].append(events_read(query, tranche) / side.cpu)
                        split = {side.name: side.batches for side in sides}
                        cpu = {side.name: round(side.cpu, 2) for side in sides}
                        print(
                            f"{query}/{sink} fork {fork + 1} round {round_}: batches' seconds {seconds}, "
                            f"CPU seconds {cpu}, input rows {split}",
                            flush=True,
                        )
                finally:
                    steady.stop_all(sides)
                shutil.rmtree(combo, ignore_errors=True)
            records.extend(row_records(query, sink, rates, per_cpu, args.rounds))
        name = f"launch to the first {args.warm_up:,} events processed vs {VARIANTS[first][0]} (each query, {sinks[0]})"
        records.append(results.record(name, starts, "s", higher_is_better=False))
    print(results.table(records))
    print(f"written to {results.write('overhead', records)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
