"""Runner overhead: the same query through the runner and as a hand-written PySpark job, side by side.

    .venv/bin/python bench/overhead.py [--events 2000000] [--rounds 3] [--queries filter,window,join]
                                       [--sinks noop,parquet]

The same seeded JSON card transactions (and refunds, for the join) are read by both
sides: ``sql-runner run --once`` of a manifest (dead-lettering on, the default), and a
hand-written PySpark job reading the same files with the same schema, the same query,
the same six metadata columns and the same sink, both through spark-submit with the same
settings (local[2], and the repository's job template's Spark settings). Each round runs
the sides one after the other (which goes first alternates), each on fresh state.
Throughput is the events in the input files over the query's batches' trigger time,
from its progress (ours: the job's status; the reference: its query's recent progress).
Not Spark's "input rows": a filter Spark pushes into the JSON reader makes the skipped
rows uncounted there, though they were read. Wall time is the whole process.

A query with a filter gets a third side (into noop): the hand-written job with Spark's
JSON filter pushdown off, so that it converts every field of every record, as checking
each record against the declared schema (dead-lettering) must; the hand-written job
with pushdown skips converting the rest of a record once the filter fails.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import results  # noqa: E402
from jobs import localfs  # noqa: E402
from runner.deploy import submit  # noqa: E402

SQL_RUNNER = str(Path(sys.executable).parent / "sql-runner")
TEMPLATE = ROOT / "manifests" / "job-template.yaml"
START = datetime(2026, 1, 1, tzinfo=UTC)
FILES = 20
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
# The hand-written job: what a Spark user writes for the same query, sink and output columns.
HANDWRITTEN = """
import json, sys
from datetime import datetime, timezone
from pyspark.sql import SparkSession, functions as F
data, out, checkpoint, sink, sql = sys.argv[1:6]
spark = SparkSession.builder.getOrCreate()
tx = (spark.readStream.schema("transaction_id STRING, account_id STRING, payee STRING, amount DOUBLE, ts TIMESTAMP")
      .json(f"{data}/tx").withWatermark("ts", "5 seconds"))
refunds = (spark.readStream.schema("refund_id STRING, transaction_id STRING, refunded_at TIMESTAMP")
           .json(f"{data}/refunds").withWatermark("refunded_at", "5 seconds"))
tx.createOrReplaceTempView("tx")
refunds.createOrReplaceTempView("refunds")
created = datetime(2026, 1, 1, tzinfo=timezone.utc)
result = spark.sql(sql.replace("`bench`.", "")).select(
    "*",
    F.current_timestamp().alias("__create_timestamp"),
    F.lit("q").alias("__query_name"),
    F.lit("hand-written").alias("__query_description"),
    F.lit("id").alias("__query_id"),
    F.lit(1).alias("__query_version"),
    F.lit(created).alias("__query_create_timestamp"),
)
writer = result.writeStream.option("checkpointLocation", checkpoint).trigger(availableNow=True)
writer = writer.outputMode("update" if "GROUP BY" in sql and sink == "noop" else "append")
query = (writer.format("noop") if sink == "noop" else writer.format("parquet").option("path", out)).start()
query.awaitTermination()
print("PROGRESS " + json.dumps([
    {"input-rows": p["numInputRows"], "batch-duration-ms": p["durationMs"].get("triggerExecution")}
    for p in (json.loads(p.json) for p in query.recentProgress)
]))
"""


def generate(data: Path, events: int, seed: int) -> dict[str, int]:
    """``events`` transactions over ``FILES`` files, a refund for every tenth, seeded; the events each query reads."""
    rng = random.Random(seed)
    accounts = [f"acct-{i:05d}" for i in range(5000)]
    payees = ("grocer", "airline", "bookshop", "cafe", "electronics", "pharmacy", "hotel", "taxi")
    (data / "tx").mkdir(parents=True)
    (data / "refunds").mkdir(parents=True)
    per_file = events // FILES
    for f in range(FILES):
        tx_lines, refund_lines = [], []
        for i in range(f * per_file, (f + 1) * per_file):
            ts = START + timedelta(milliseconds=i * 30)
            stamp = ts.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
            tx_lines.append(
                f'{{"transaction_id":"t{i}","account_id":"{rng.choice(accounts)}","payee":"{rng.choice(payees)}",'
                f'"amount":{rng.randint(1, 100000) / 100},"ts":"{stamp}"}}\n'
            )
            if i % 10 == 0:
                later = (ts + timedelta(seconds=rng.randint(1, 300))).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
                refund_lines.append(f'{{"refund_id":"r{i}","transaction_id":"t{i}","refunded_at":"{later}"}}\n')
        (data / "tx" / f"part-{f:03d}.json").write_text("".join(tx_lines))
        (data / "refunds" / f"part-{f:03d}.json").write_text("".join(refund_lines))
    transactions = per_file * FILES
    refunds = (transactions + 9) // 10
    return {"filter": transactions, "window": transactions, "join": transactions + refunds}


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
        **template_properties(),
        "spark.driver.memory": "2g",
    }
    return [arg for key, value in merged.items() for arg in ("--conf", f"{key}={value}")]


def timed(args: list[str], cwd: Path) -> tuple[subprocess.CompletedProcess, float]:
    """Run one side's whole process; its result and wall seconds."""
    began = time.monotonic()
    result = subprocess.run(
        args,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
        env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"},
    )
    return result, time.monotonic() - began


def ours(work: Path, data: Path, query: str, sink: str) -> tuple[float, float]:
    """(batch s, wall s) of ``sql-runner run --once`` on a fresh project."""
    project = work / "project"
    shutil.rmtree(project, ignore_errors=True)
    (project / "manifests" / "tables").mkdir(parents=True)
    sql, columns = QUERIES[query]
    target = (
        "WITH ('connector' = 'blackhole')"
        if sink == "noop"
        else f"WITH ('connector' = 'filesystem', 'path' = '{work}/out-ours', 'format' = 'parquet')"
    )
    key = ", PRIMARY KEY (account_id, window_start) NOT ENFORCED" if query == "window" and sink == "noop" else ""
    (project / "manifests" / "tables" / "tables.sql").write_text(
        SOURCES.format(data=data) + f"CREATE TABLE `bench`.`out` ({columns}{METADATA}{key}) {target};\n"
    )
    shutil.copy(TEMPLATE, project / "manifests" / "job-template.yaml")
    (project / "manifests" / "q.yaml").write_text(
        f'name: q\ntarget-table: "`bench`.`out`"\nsql: "{sql}"\nsparkProperties:\n  spark.driver.memory: 2g\n'
    )
    shutil.rmtree(work / "out-ours", ignore_errors=True)
    result, wall = timed([SQL_RUNNER, "run", "manifests/q.yaml", "--once"], cwd=project)
    if result.returncode != 0:
        raise SystemExit(f"ours failed ({query}, {sink}): {result.stderr[-3000:]}")
    status = json.loads((project / ".sql-runner" / "manifests" / "status" / "q.json").read_text())
    return results.batch_seconds(status.get("recent-progress") or []), wall


def reference(work: Path, data: Path, query: str, sink: str, *, full: bool = False) -> tuple[float, float]:
    """(batch s, wall s) of the hand-written job (``full``: every record read in full, no JSON filter pushdown)."""
    script = work / "handwritten.py"
    script.write_text(HANDWRITTEN)
    checkpoint = work / "checkpoint-ref"
    shutil.rmtree(checkpoint, ignore_errors=True)
    shutil.rmtree(work / "out-ref", ignore_errors=True)
    args = [
        str(submit.spark_submit_path()),
        "--master",
        "local[2]",
        *properties(str(checkpoint)),
        "--conf",
        f"spark.pyspark.python={sys.executable}",
        "--conf",
        f"spark.sql.json.filterPushdown.enabled={str(not full).lower()}",
        str(script),
        str(data),
        str(work / "out-ref"),
        str(checkpoint),
        sink,
        QUERIES[query][0],
    ]
    result, wall = timed(args, cwd=work)
    lines = [line for line in result.stdout.splitlines() if line.startswith("PROGRESS ")]
    if result.returncode != 0 or not lines:
        raise SystemExit(f"reference failed ({query}, {sink}): {result.stderr[-3000:]}")
    return results.batch_seconds(json.loads(lines[-1][len("PROGRESS ") :])), wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=2_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--queries", default="filter,window,join")
    parser.add_argument("--sinks", default="noop,parquet")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    records: list[results.Record] = []
    with tempfile.TemporaryDirectory(prefix="overhead-bench-") as tmp:
        work = Path(tmp)
        data = work / "data"
        began = time.monotonic()
        events = generate(data, args.events, args.seed)
        print(f"generated {args.events:,} events in {time.monotonic() - began:.0f}s", flush=True)
        for query in args.queries.split(","):
            for sink in args.sinks.split(","):
                rates: list[tuple[float, float]] = []
                full_rates: list[tuple[float, float]] = []
                walls: list[tuple[float, float]] = []
                sides = {
                    "ours": functools.partial(ours, work, data, query, sink),
                    "reference": functools.partial(reference, work, data, query, sink),
                }
                if "WHERE" in QUERIES[query][0] and sink == "noop":
                    sides["reference, every record in full"] = functools.partial(
                        reference, work, data, query, sink, full=True
                    )
                for round_ in range(args.rounds):
                    order = list(sides) if round_ % 2 == 0 else list(reversed(sides))
                    measured = {side: sides[side]() for side in order}
                    rate = {side: events[query] / seconds for side, (seconds, _) in measured.items()}
                    rates.append((rate["ours"], rate["reference"]))
                    if "reference, every record in full" in rate:
                        full_rates.append((rate["ours"], rate["reference, every record in full"]))
                    walls.append((measured["ours"][1], measured["reference"][1]))
                    print(f"{query}/{sink} round {round_ + 1}: {measured}", flush=True)
                records.append(results.record(f"{query} -> {sink}: events/s", rates, "events/s"))
                if full_rates:
                    name = f"{query} -> {sink}: events/s, reference reading every record in full"
                    records.append(results.record(name, full_rates, "events/s"))
                records.append(results.record(f"{query} -> {sink}: wall time", walls, "s", higher_is_better=False))
    print(results.table(records))
    print(f"written to {results.write('overhead', records)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
