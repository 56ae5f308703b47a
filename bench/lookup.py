"""The cost of fresh reference data: a stream enriched by a 100 k-row PostgreSQL lookup table, reloaded while
it runs, beside the same stream joined with a static broadcast DataFrame written by hand; and one reload.

    .venv/bin/python bench/lookup.py [--rows 100000] [--events 400000] [--rounds 3] [--interval 10]

Both sides are long-running jobs (``bench/steady.py``) fed the same files of events (an id, a user id,
an amount; one user id in twenty names no user) and write to Spark's noop sink:

- ours: ``sql-runner run`` of ``SELECT ... FROM events e LEFT JOIN users FOR SYSTEM_TIME AS OF
  e.proc_time AS u ON u.id = e.user_id``, ``users`` a ``jdbc`` lookup table reloaded every
  ``--interval`` seconds (``jobs/lookup/``): the rounds run through several reloads;
- by hand: what an engineer writes for a static dimension table: the table read once from PostgreSQL
  when the job starts (psycopg, ``createDataFrame``, cached), joined with ``F.broadcast``; it is never
  refreshed.

A side's figure is the round's events over its micro-batches' time. One reload is timed apart, in this
process on local Spark: ``jobs/lookup/load.py`` loading the table (the ``SELECT``, the rows into Spark,
cached and counted), ``--reloads`` times.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import results, steady  # noqa: E402
from bench.overhead import METADATA, PRINT_PROGRESS, postgres_job  # noqa: E402
from demo.postgres_server import PostgresServer  # noqa: E402

TRIGGER = "1 second"
FILES = 4  # per tranche: Spark reads them in parallel
SQL = (
    "SELECT e.id, e.amount, u.name, u.region FROM events AS e "
    "LEFT JOIN users FOR SYSTEM_TIME AS OF e.proc_time AS u ON u.id = e.user_id"
)

HANDWRITTEN = (
    """
import json, os, sys, time
import psycopg
from pyspark.sql import SparkSession, functions as F
data, checkpoint, trigger, port = sys.argv[1:5]
spark = SparkSession.builder.getOrCreate()
with psycopg.connect(host="127.0.0.1", port=int(port), dbname="runner", user="runner",
                     password=os.environ["PG_PASSWORD"]) as conn:
    rows = conn.execute("SELECT id, name, region FROM users").fetchall()
users = spark.createDataFrame(rows, "id BIGINT, name STRING, region STRING").cache()
users.count()
events = spark.readStream.schema("id BIGINT, user_id BIGINT, amount DOUBLE").json(data)
enriched = events.alias("e").join(F.broadcast(users).alias("u"), F.col("u.id") == F.col("e.user_id"), "left")
out = enriched.select("e.id", "e.amount", "u.name", "u.region", F.current_timestamp().alias("at"))
query = (out.writeStream.format("noop").option("checkpointLocation", checkpoint)
         .trigger(processingTime=trigger).start())
"""
    + PRINT_PROGRESS
)


def tranche(folder: Path, name: str, count: int, users: int, rng: random.Random, first: int) -> steady.Tranche:
    folder.mkdir(parents=True, exist_ok=True)
    files = []
    size = -(-count // FILES)
    for part in range(FILES):
        lines = []
        for n in range(part * size, min(count, (part + 1) * size)):
            user = rng.randrange(users) if rng.random() >= 0.05 else users + rng.randrange(users)
            lines.append(json.dumps({"id": first + n, "user_id": user, "amount": round(rng.random() * 1000, 2)}))
        path = folder / f"{name}-{part}.json"
        path.write_text("\n".join(lines) + "\n")
        files.append(path)
    return steady.Tranche({"events": files}, {"events": count})


def ours(folder: Path, server: PostgresServer, interval: int) -> steady.Side:
    project = folder / "ours"
    (project / "manifests" / "tables").mkdir(parents=True)
    (project / "manifests" / "tables" / "tables.sql").write_text(
        f"CREATE TABLE events (id BIGINT, user_id BIGINT, amount DOUBLE, proc_time AS PROCTIME()) WITH ("
        f"'connector' = 'filesystem', 'path' = '{project / 'in'}', 'format' = 'json');\n"
        f"CREATE TABLE users (id BIGINT, name STRING, region STRING) WITH ('connector' = 'jdbc', "
        f"'url' = '{server.url}', 'table-name' = 'users', 'username' = 'runner', 'password' = '${{PG_PASSWORD}}', "
        f"'lookup.full-cache.periodic-reload.interval' = '{interval} s');\n"
        f"CREATE TABLE out (id BIGINT, amount DOUBLE, name STRING, region STRING{METADATA}) "
        "WITH ('connector' = 'blackhole');\n"
    )
    (project / "manifests" / "job-template.yaml").write_text((ROOT / "manifests" / "job-template.yaml").read_text())
    (project / "manifests" / "q.yaml").write_text(
        f"name: q\ndescription: bench query\ntarget-table: out\nsql: {SQL}\n"
        f"trigger-interval: {TRIGGER}\nsparkProperties:\n  spark.driver.memory: 2g\n"
    )
    return steady.runner_job("ours", project, "q", {"events": project / "in"}, env={"PG_PASSWORD": server.password})


def by_hand(folder: Path, server: PostgresServer) -> steady.Side:
    return postgres_job(folder, HANDWRITTEN, "events", TRIGGER, server)


def reload_seconds(server: PostgresServer, reloads: int) -> list[float]:
    """Seconds of each of ``reloads`` loads of the users table, as a running query reloads it."""
    from jobs.lookup.load import Loader
    from runner.analysis.session import local_session
    from runner.core import datatypes as T
    from runner.core.tables import Column, TableDef

    table = TableDef(
        parts=("users",),
        columns=(
            Column(name="id", type=T.Primitive("long")),
            Column(name="name", type=T.STRING),
            Column(name="region", type=T.STRING),
        ),
        options={
            "connector": "jdbc",
            "url": server.url,
            "table-name": "users",
            "username": "runner",
            "password": "${PG_PASSWORD}",
        },
    )
    spark = local_session("bench-lookup-reload")
    try:
        loader = Loader(spark, table, {"PG_PASSWORD": server.password})
        took = []
        for _ in range(reloads + 1):  # the first warms the JVM up, and is left out
            loaded = loader.load()
            took.append(loaded.seconds)
            loaded.frame.unpersist()
        return took[1:]
    finally:
        spark.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--events", type=int, default=400_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--interval", type=int, default=10)
    parser.add_argument("--reloads", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=900)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="bench-lookup-"))
    server = PostgresServer().start()
    try:
        server.execute("CREATE TABLE users (id BIGINT PRIMARY KEY, name TEXT, region TEXT)")
        server.execute(
            "INSERT INTO users SELECT n, 'user ' || n, 'region ' || (n %% 50) FROM generate_series(0, %s) AS n",
            (args.rows - 1,),
        )
        rng = random.Random(7)
        print(f"generating {args.rounds} rounds of {args.events:,} events over {args.rows:,} users", flush=True)
        warm_up = tranche(folder / "tranches", "warm", args.events // 4, args.rows, rng, 0)
        rounds = [
            tranche(folder / "tranches", f"round{r}", args.events, args.rows, rng, (r + 1) * args.events)
            for r in range(args.rounds)
        ]
        sides = [ours(folder, server, args.interval), by_hand(folder, server)]
        try:
            steady.launch(sides, warm_up, args.timeout, timed=False)
            measured: list[tuple[float, float]] = []
            for number, events in enumerate(rounds):
                order = sides if number % 2 == 0 else list(reversed(sides))
                took = {side.name: steady.feed(side, events, args.timeout) for side in order}
                pair = (args.events / took["ours"], args.events / took["by hand"])
                measured.append(pair)
                print(f"round {number + 1}: ours {pair[0]:,.0f} events/s, by hand {pair[1]:,.0f} events/s", flush=True)
        finally:
            steady.stop_all(sides)
        reloads = reload_seconds(server, args.reloads)
        records = [
            results.record(
                f"lookup join, {args.rows:,}-row PostgreSQL table reloaded every {args.interval} s "
                "(by hand: a static broadcast DataFrame)",
                measured,
                "events/s",
            ),
            results.measured(f"lookup: one reload of the {args.rows:,}-row table", reloads, "s"),
        ]
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)
    path = results.write("lookup", records)
    print(f"\n{results.table(records)}\nwritten to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
