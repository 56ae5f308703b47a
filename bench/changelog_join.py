"""Changes per second through a three-table LEFT JOIN of changelog tables into PostgreSQL, on both engines and
beside a hand-written job.

    .venv/bin/python bench/changelog_join.py [--keys 1000000] [--changes 200000] [--rounds 4]

The query is each user with their favourite colour and cheese, keyed by the user:

    SELECT u.uid, u.accountId, c.favoriteColor, ch.favoriteCheese
    FROM users u
    LEFT JOIN user_favorite_color c ON u.uid = c.userUid
    LEFT JOIN user_favorite_cheese ch ON u.uid = ch.userUid

over three debezium-json tables, each of up to ``--keys`` keys (the warm-up inserts every user and a colour
and a cheese for nine in ten of them), into a PostgreSQL table keyed by ``uid``. Every side is a long-running
job (``bench/steady.py``) fed the same files; each round hands over ``--changes`` changes spread over the
three tables at random (a user moved to another account, deleted, or inserted again; a colour or cheese set,
changed or deleted, for users that exist or not). A side's figure is the round's changes over its
micro-batches' time.

- incremental: ``sql-runner run`` of the manifest, on the incremental operators (each join's two sides kept by
  ``uid`` in RocksDB state, each table's side taking the table's changes itself, as every join here is on its
  tables' PRIMARY KEY; a micro-batch joins only the changed keys);
- recomputed: the same manifest with ``spark.sqlrunner.changelog.engine: recompute``;
- by hand: what an engineer would write with Spark and PostgreSQL alone: one query over the three folders,
  ``foreachBatch`` takes each key's last change per table and, in one transaction (with the same batch-id
  fence), stages them with ``COPY``, applies them to the three tables kept in PostgreSQL and rewrites the
  joined rows of the users touched.

At the end every target is compared with the rows the changes leave; a difference fails the benchmark.
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
from bench.changelog import (  # noqa: E402
    PG_METADATA,
    TRIGGER,
    engine_records,
    measure,
    on_engine,
    resident_mb,
    table_files,
)
from bench.overhead import METADATA, PRINT_PROGRESS, postgres_job  # noqa: E402
from demo.postgres_server import PostgresServer  # noqa: E402

TABLES = ("users", "color", "cheese")
QUERY = (
    "SELECT u.uid, u.accountId, c.favoriteColor, ch.favoriteCheese FROM users u "
    "LEFT JOIN user_favorite_color c ON u.uid = c.userUid "
    "LEFT JOIN user_favorite_cheese ch ON u.uid = ch.userUid"
)

HANDWRITTEN = (
    """
import json, os, sys, time, uuid
from datetime import datetime
import psycopg
from pyspark.sql import SparkSession, Window, functions as F
data, checkpoint, trigger, port = sys.argv[1:5]
spark = SparkSession.builder.getOrCreate()
images = {"users": ("uid", "accountId"), "color": ("userUid", "favoriteColor"), "cheese": ("userUid", "favoriteCheese")}
def read(table):
    key, value = images[table]
    image = f"struct<{key}:string,{value}:string>"
    record = F.from_json("value", f"before {image}, after {image}, op string")
    raw = spark.readStream.format("text").load(f"{data}/{table}")
    rows = raw.select(record.alias("r"), F.col("_metadata.file_path").alias("file")).where("r.op IS NOT NULL")
    return rows.select(F.lit(table).alias("t"), F.coalesce(f"r.after.{key}", f"r.before.{key}").alias("k"),
                       F.col(f"r.after.{value}").alias("v"), F.col("r.op").alias("op"), "file")
changes = read("users").unionByName(read("color")).unionByName(read("cheese"))
query_id, created = str(uuid.uuid4()), datetime(2026, 1, 1)
def connect():
    return psycopg.connect(host="127.0.0.1", port=int(port), dbname="runner", user="runner",
                           password=os.environ["PG_PASSWORD"])
def upsert(batch, batch_id):
    ordered = batch.withColumn("o", F.monotonically_increasing_id())
    newest = Window.partitionBy("t", "k").orderBy(F.col("file").desc(), F.col("o").desc())
    last = ordered.withColumn("n", F.row_number().over(newest)).where("n = 1").select("t", "k", "v", "op")
    with connect() as conn, conn.transaction():
        conn.execute("INSERT INTO fence VALUES ('by-hand', -1) ON CONFLICT DO NOTHING")
        (done,) = conn.execute("SELECT batch_id FROM fence WHERE query = 'by-hand' FOR UPDATE").fetchone()
        if done >= batch_id:
            return
        conn.execute("CREATE TEMP TABLE stage (t TEXT, k TEXT, v TEXT, op TEXT) ON COMMIT DROP")
        with conn.cursor().copy("COPY stage FROM STDIN") as copy:
            for row in last.toLocalIterator():
                copy.write_row(row)
        for table in images:
            conn.execute(f"DELETE FROM {table} x USING stage s WHERE s.t = '{table}' AND s.op = 'd' AND x.k = s.k")
            conn.execute(f"INSERT INTO {table} SELECT k, v FROM stage WHERE t = '{table}' AND op <> 'd' "
                         "ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v")
        conn.execute("CREATE TEMP TABLE touched ON COMMIT DROP AS SELECT DISTINCT k FROM stage")
        conn.execute("DELETE FROM by_hand_joined j USING touched t WHERE j.uid = t.k")
        conn.execute("INSERT INTO by_hand_joined SELECT u.k, u.v, c.v, ch.v, now(), 'q', 'bench query', %s, 1, %s "
                     "FROM touched t JOIN users u ON u.k = t.k LEFT JOIN color c ON c.k = u.k "
                     "LEFT JOIN cheese ch ON ch.k = u.k", (query_id, created))
        conn.execute("UPDATE fence SET batch_id = %s WHERE query = 'by-hand'", (batch_id,))
query = (changes.writeStream.foreachBatch(upsert).option("checkpointLocation", checkpoint)
         .trigger(processingTime=trigger).start())
"""
    + PRINT_PROGRESS
)


class Tables:
    """The rows the changes leave in each table: uid -> value (account, colour, cheese), None once deleted."""

    COLUMNS = {
        "users": ("uid", "accountId"),
        "color": ("userUid", "favoriteColor"),
        "cheese": ("userUid", "favoriteCheese"),
    }

    def __init__(self, keys: int, seed: int):
        self.rng = random.Random(seed)
        self.keys = keys
        self.rows: dict[str, list[str | None]] = {table: [None] * keys for table in TABLES}
        self.versions = 0

    def _value(self, table: str) -> str:
        self.versions += 1
        if table == "users":
            return f"a{self.rng.randrange(max(1, self.keys // 10))}"
        return f"{table}-{self.versions}"

    def _line(self, table: str, uid: int, old: str | None, new: str | None) -> str:
        key, column = self.COLUMNS[table]
        before = {key: f"u{uid}", column: old} if old is not None else None
        if new is None:
            return json.dumps({"op": "d", "before": before})
        return json.dumps({"op": "u" if before else "c", "before": before, "after": {key: f"u{uid}", column: new}})

    def insert_all(self) -> dict[str, list[str]]:
        lines: dict[str, list[str]] = {table: [] for table in TABLES}
        for table in TABLES:
            for uid in range(self.keys):
                if table != "users" and self.rng.random() >= 0.9:
                    continue
                self.rows[table][uid] = value = self._value(table)
                lines[table].append(self._line(table, uid, None, value))
        return lines

    def changes(self, count: int) -> dict[str, list[str]]:
        lines: dict[str, list[str]] = {table: [] for table in TABLES}
        for _ in range(count):
            table = self.rng.choice(TABLES)
            uid = self.rng.randrange(self.keys)
            old = self.rows[table][uid]
            new = None if old is not None and self.rng.random() < 0.25 else self._value(table)
            self.rows[table][uid] = new
            lines[table].append(self._line(table, uid, old, new))
        return lines

    def joined(self) -> list[tuple[str, str, str | None, str | None]]:
        users, color, cheese = (self.rows[t] for t in TABLES)
        return sorted((f"u{uid}", users[uid], color[uid], cheese[uid]) for uid in range(self.keys) if users[uid])


def tranche(folder: Path, name: str, lines: dict[str, list[str]]) -> steady.Tranche:
    files = {table: table_files(folder, f"{table}-{name}", rows) for table, rows in lines.items() if rows}
    return steady.Tranche(files, {table: len(rows) for table, rows in lines.items()})


def ours(folder: Path, server: PostgresServer, name: str, engine: str, table: str) -> steady.Side:
    """``sql-runner run`` of the join on ``engine`` into PostgreSQL's ``table``."""
    project = folder / name
    (project / "manifests" / "tables").mkdir(parents=True)
    ddl = [
        f"CREATE TABLE {sql} ({key} STRING, {column} STRING, PRIMARY KEY ({key}) NOT ENFORCED) WITH ("
        f"'connector' = 'filesystem', 'path' = '{project / 'in' / short}', 'format' = 'debezium-json');"
        for short, sql, (key, column) in zip(
            TABLES, ("users", "user_favorite_color", "user_favorite_cheese"), Tables.COLUMNS.values(), strict=True
        )
    ]
    ddl.append(
        f"CREATE TABLE joined (uid STRING, accountId STRING, favoriteColor STRING, favoriteCheese STRING{METADATA}, "
        f"PRIMARY KEY (uid) NOT ENFORCED) WITH ('connector' = 'jdbc', 'url' = '{server.url}', "
        f"'table-name' = '{table}', 'username' = 'runner', 'password' = '${{PG_PASSWORD}}');"
    )
    (project / "manifests" / "tables" / "tables.sql").write_text("\n".join(ddl) + "\n")
    (project / "manifests" / "job-template.yaml").write_text((ROOT / "manifests" / "job-template.yaml").read_text())
    (project / "manifests" / "q.yaml").write_text(
        f"name: q\ndescription: bench query\ntarget-table: joined\nsql: {QUERY}\n"
        f"trigger-interval: {TRIGGER}\nsparkProperties:\n  spark.driver.memory: 2g\n"
        f"  spark.sqlrunner.changelog.engine: {engine}\n"
    )
    inputs = {table: project / "in" / table for table in TABLES}
    return steady.runner_job(name, project, "q", inputs, env={"PG_PASSWORD": server.password})


def by_hand(folder: Path, server: PostgresServer) -> steady.Side:
    return postgres_job(folder, HANDWRITTEN, TABLES, TRIGGER, server)


def compare(server: PostgresServer, table: str, tables: Tables) -> None:
    found = server.execute(f"SELECT uid, accountid, favoritecolor, favoritecheese FROM {table} ORDER BY uid")
    if sorted(found) != tables.joined():
        raise steady.BenchError(f"{table} differs from the rows the changes leave")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--changes", type=int, default=200_000)
    # the first round is every side's JVM compiling the paths of changes (the warm-up only inserts): four rounds put
    # the median among the warm ones
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=1800)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="bench-changelog-join-"))
    server = PostgresServer().start()
    try:
        joined = "uid TEXT PRIMARY KEY, accountid TEXT, favoritecolor TEXT, favoritecheese TEXT"
        for table in ("incremental_joined", "recomputed_joined"):
            server.execute(f"CREATE TABLE {table} ({joined}, {PG_METADATA})")
        server.execute(f"CREATE TABLE by_hand_joined ({joined}, {PG_METADATA})")
        for table in TABLES:
            server.execute(f"CREATE TABLE {table} (k TEXT PRIMARY KEY, v TEXT)")
        server.execute("CREATE TABLE fence (query TEXT PRIMARY KEY, batch_id BIGINT)")
        tables = Tables(args.keys, seed=17)
        print(f"generating {args.keys:,} keys a table and {args.rounds} rounds of {args.changes:,} changes", flush=True)
        warm_up = tranche(folder / "tranches", "load", tables.insert_all())
        rounds = [tranche(folder / "tranches", f"round{r}", tables.changes(args.changes)) for r in range(args.rounds)]
        incremental = ours(folder, server, "incremental", "incremental", "incremental_joined")
        recomputed = ours(folder, server, "recomputed", "recompute", "recomputed_joined")
        hand = by_hand(folder, server)
        sides = [incremental, recomputed, hand]
        try:
            steady.launch(sides, warm_up, args.timeout, timed=False)
            on_engine(folder, "incremental", "incremental")
            on_engine(folder, "recomputed", "recompute")
            measured = measure(sides, rounds, args.changes, args.timeout)
            millions = args.keys / 1_000_000
            memory = {side.name: resident_mb(side) / millions for side in sides}
            for table in ("incremental_joined", "recomputed_joined", "by_hand_joined"):
                compare(server, table, tables)
        finally:
            steady.stop_all(sides)
        label = f"{args.keys:,} keys a table, {args.changes:,} mixed changes a round"
        name = "changelog three-table LEFT JOIN into PostgreSQL"
        records = [
            *engine_records(name, label, measured),
            results.record(
                f"changelog LEFT JOIN: resident memory per million keys a table, incremental against by hand, {label}",
                [(memory["incremental"], memory["by hand"])],
                "MiB",
                higher_is_better=False,
            ),
        ]
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)
    path = results.write("changelog-join" if args.keys == 1_000_000 else f"changelog-join-{args.keys}", records)
    print(f"\n{results.table(records)}\nwritten to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
