"""Changes per second through a changelog query into PostgreSQL, on both engines and beside a hand-written job.

    .venv/bin/python bench/changelog.py [--keys 1000000] [--changes 200000] [--rounds 3] [--flat-keys 100000]
        [--without-recomputed]

The query is the user count per account, ``SELECT accountId, COUNT(*) FROM users GROUP BY accountId``,
over a debezium-json table of ``--keys`` users in ``--keys / 10`` accounts, into a keyed PostgreSQL table.
Every side is a long-running job (``bench/steady.py``) fed the same files: a warm-up tranche inserts every
user, then each round hands over ``--changes`` changes (updates that move a user to another account,
deletes, inserts of users deleted before), mixed at random. A side's figure is the round's changes over its
micro-batches' time.

- incremental: ``sql-runner run`` of the manifest, on the incremental operators (``jobs/changelog/
  incremental.py``: each user's row and each account's count kept in RocksDB state, a micro-batch touching
  the users and accounts its changes touch), the difference written in one transaction with the batch id;
- recomputed: the same manifest with ``spark.sqlrunner.changelog.engine: recompute`` (each user's row kept
  as Parquet in the checkpoint, the query recomputed over all of them every micro-batch); left out with
  ``--without-recomputed``, as at 10 million keys, where each of its micro-batches rewrites them all;
- by hand: what an engineer would write with Spark and PostgreSQL alone: ``foreachBatch`` takes each
  user's last change, and in one transaction (with the same batch-id fence) stages them with ``COPY``,
  finds the accounts touched, applies the changes to a ``users`` table in PostgreSQL (indexed by account)
  and recounts those accounts into the target (``MERGE``-like upsert and delete). Its state is in the
  database.

Flat cost: the incremental side's micro-batch of 1,000 changes with ``--keys`` users held, against the same
with ``--flat-keys`` held (a second incremental job, started once the rounds are over), three tranches each.

Memory per million keys: each side's processes' resident memory at the end of the rounds (the JVM, its
Python driver and workers), and the state each keeps on disk (incremental: its RocksDB state in the
checkpoint; recomputed: the users' Parquet in the checkpoint; by hand: the ``users`` table and its index),
all divided by the millions of keys. At the end every target is compared with the counts the changes
leave; a difference fails the benchmark.
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
from runner.core.engine_record import ENGINE_FILE  # noqa: E402
from runner.targets.base import group_processes  # noqa: E402

TRIGGER = "1 second"
PG_METADATA = (
    "__create_timestamp TIMESTAMP, __query_name TEXT, __query_description TEXT, __query_id TEXT, "
    "__query_version INTEGER, __query_create_timestamp TIMESTAMP"
)
FILES = 4  # per tranche: Spark reads them in parallel

HANDWRITTEN = (
    """
import json, os, sys, time, uuid
from datetime import datetime
import psycopg
from pyspark.sql import SparkSession, Window, functions as F
data, checkpoint, trigger, port = sys.argv[1:5]
spark = SparkSession.builder.getOrCreate()
image = "struct<uid:string,accountId:string>"
schema = f"before {image}, after {image}, op string"
raw = spark.readStream.format("text").load(data)
record = F.from_json("value", schema)
changes = raw.select(record.alias("r"), F.col("_metadata.file_path").alias("file")).where("r.op IS NOT NULL")
query_id, created = str(uuid.uuid4()), datetime(2026, 1, 1)
def connect():
    return psycopg.connect(host="127.0.0.1", port=int(port), dbname="runner", user="runner",
                           password=os.environ["PG_PASSWORD"])
def upsert(batch, batch_id):
    ordered = batch.withColumn("o", F.monotonically_increasing_id())
    last = ordered.select(
        F.coalesce("r.after.uid", "r.before.uid").alias("uid"), F.col("r.after.accountId").alias("account"),
        F.col("r.op").alias("op"), "file", "o")
    newest = Window.partitionBy("uid").orderBy(F.col("file").desc(), F.col("o").desc())
    last = last.withColumn("n", F.row_number().over(newest)).where("n = 1").select("uid", "account", "op")
    with connect() as conn, conn.transaction():
        conn.execute("INSERT INTO fence VALUES ('by-hand', -1) ON CONFLICT DO NOTHING")
        (done,) = conn.execute("SELECT batch_id FROM fence WHERE query = 'by-hand' FOR UPDATE").fetchone()
        if done >= batch_id:
            return
        conn.execute("CREATE TEMP TABLE stage (uid TEXT, account TEXT, op TEXT) ON COMMIT DROP")
        with conn.cursor().copy("COPY stage FROM STDIN") as copy:
            for row in last.toLocalIterator():
                copy.write_row(row)
        conn.execute("CREATE TEMP TABLE touched ON COMMIT DROP AS SELECT u.account FROM users u JOIN stage s "
                     "USING (uid) UNION SELECT account FROM stage WHERE op <> 'd'")
        conn.execute("DELETE FROM users u USING stage s WHERE u.uid = s.uid AND s.op = 'd'")
        conn.execute("INSERT INTO users SELECT uid, account FROM stage WHERE op <> 'd' "
                     "ON CONFLICT (uid) DO UPDATE SET account = EXCLUDED.account")
        conn.execute("DELETE FROM by_hand_counts WHERE account IN (SELECT account FROM touched)")
        conn.execute("INSERT INTO by_hand_counts SELECT account, count(*), now(), 'q', 'bench query', %s, 1, %s "
                     "FROM users WHERE account IN (SELECT account FROM touched) GROUP BY account",
                     (query_id, created))
        conn.execute("UPDATE fence SET batch_id = %s WHERE query = 'by-hand'", (batch_id,))
query = (changes.writeStream.foreachBatch(upsert).option("checkpointLocation", checkpoint)
         .trigger(processingTime=trigger).start())
"""
    + PRINT_PROGRESS
)


class Users:
    """The users the changes leave: account of each user, or None once deleted."""

    def __init__(self, keys: int, seed: int):
        self.rng = random.Random(seed)
        self.accounts = max(1, keys // 10)
        self.account: list[str | None] = [None] * keys

    def insert_all(self) -> list[str]:
        lines = []
        for uid in range(len(self.account)):
            self.account[uid] = f"a{self.rng.randrange(self.accounts)}"
            lines.append(json.dumps({"op": "r", "after": {"uid": f"u{uid}", "accountId": self.account[uid]}}))
        return lines

    def changes(self, count: int) -> list[str]:
        lines = []
        for _ in range(count):
            uid = self.rng.randrange(len(self.account))
            old = self.account[uid]
            before = {"uid": f"u{uid}", "accountId": old}
            if old is not None and self.rng.random() < 0.25:
                self.account[uid] = None
                lines.append(json.dumps({"op": "d", "before": before}))
                continue
            self.account[uid] = f"a{self.rng.randrange(self.accounts)}"
            after = {"uid": f"u{uid}", "accountId": self.account[uid]}
            op = "c" if old is None else "u"
            lines.append(json.dumps({"op": op, "before": before if old else None, "after": after}))
        return lines

    def counts(self) -> dict[str, int]:
        found: dict[str, int] = {}
        for account in self.account:
            if account is not None:
                found[account] = found.get(account, 0) + 1
        return found


def table_files(folder: Path, name: str, lines: list[str]) -> list[Path]:
    """``lines`` in ``FILES`` files named ``<name>-<part>.json`` in ``folder``, in order: a key's last change is
    in the last file by name, on its last line."""
    folder.mkdir(parents=True, exist_ok=True)
    files = []
    size = -(-len(lines) // FILES)
    for part in range(FILES):
        path = folder / f"{name}-{part}.json"
        path.write_text("\n".join(lines[part * size : (part + 1) * size]) + "\n")
        files.append(path)
    return files


def tranche(folder: Path, name: str, lines: list[str]) -> steady.Tranche:
    return steady.Tranche({"users": table_files(folder, name, lines)}, {"users": len(lines)})


def ours(folder: Path, server: PostgresServer, name: str, engine: str, table: str) -> steady.Side:
    """``sql-runner run`` of the count on ``engine`` into PostgreSQL's ``table``."""
    project = folder / name
    (project / "manifests" / "tables").mkdir(parents=True)
    (project / "manifests" / "tables" / "tables.sql").write_text(
        f"CREATE TABLE users (uid STRING, accountId STRING, PRIMARY KEY (uid) NOT ENFORCED) WITH ("
        f"'connector' = 'filesystem', 'path' = '{project / 'in'}', 'format' = 'debezium-json');\n"
        f"CREATE TABLE counts (accountId STRING, users BIGINT{METADATA}, PRIMARY KEY (accountId) NOT ENFORCED) "
        f"WITH ('connector' = 'jdbc', 'url' = '{server.url}', 'table-name' = '{table}', "
        "'username' = 'runner', 'password' = '${PG_PASSWORD}');\n"
    )
    (project / "manifests" / "job-template.yaml").write_text((ROOT / "manifests" / "job-template.yaml").read_text())
    (project / "manifests" / "q.yaml").write_text(
        "name: q\ndescription: bench query\ntarget-table: counts\n"
        "sql: SELECT accountId, COUNT(*) AS users FROM users GROUP BY accountId\n"
        f"trigger-interval: {TRIGGER}\nsparkProperties:\n  spark.driver.memory: 2g\n"
        f"  spark.sqlrunner.changelog.engine: {engine}\n"
    )
    return steady.runner_job(name, project, "q", {"users": project / "in"}, env={"PG_PASSWORD": server.password})


def by_hand(folder: Path, server: PostgresServer) -> steady.Side:
    return postgres_job(folder, HANDWRITTEN, "users", TRIGGER, server)


def resident_mb(side: steady.Side) -> float:
    """The resident memory of ``side``'s processes (its process group), in MiB."""
    assert side.process is not None
    total = 0
    for entry, _fields in group_processes(side.process.pid):
        try:
            for line in (entry / "status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024


def folder_mb(path: Path, pattern: str = "*") -> float:
    return sum(p.stat().st_size for p in path.rglob(pattern) if p.is_file()) / (1 << 20)


def flat_cost(
    folder: Path, server: PostgresServer, big: steady.Side, big_users: Users, keys: int, timeout: float
) -> list[tuple[float, float]]:
    """Seconds of the incremental side's micro-batches of 1,000 changes with ``keys`` users held (a new job), and
    with ``big``'s held (``big_users``' changes), three tranches each, one after the other: (few held, many held)."""
    server.execute(f"CREATE TABLE flat_counts (accountid TEXT PRIMARY KEY, users BIGINT, {PG_METADATA})")
    small, few = ours(folder, server, "flat", "incremental", "flat_counts"), Users(keys, seed=13)
    pairs = []
    try:
        steady.launch([small], tranche(folder / "tranches", "flat-load", few.insert_all()), timeout)
        on_engine(folder, "flat", "incremental")
        for number in range(3):
            changes = tranche(folder / "tranches", f"flat{number}", few.changes(1000))
            held_few = steady.feed(small, changes, timeout)
            held_many = steady.feed(big, tranche(folder / "tranches", f"big{number}", big_users.changes(1000)), timeout)
            pairs.append((held_few, held_many))
            print(f"1,000 changes: {held_few:.2f} s with {keys:,} keys held, {held_many:.2f} s with more", flush=True)
    finally:
        small.stop()
    return pairs


def measure(sides: list[steady.Side], rounds: list[steady.Tranche], changes: int, timeout: float) -> list[dict]:
    """Each round handed to every side in turn (the side that goes first alternates): per round, each side's
    changes per second."""
    measured: list[dict[str, float]] = []
    for number, tranche_ in enumerate(rounds):
        order = sides if number % 2 == 0 else list(reversed(sides))
        took = {side.name: steady.feed(side, tranche_, timeout) for side in order}
        rates = {name: changes / seconds for name, seconds in took.items()}
        measured.append(rates)
        shown = ", ".join(f"{n} {r:,.0f} changes/s" for n, r in rates.items())
        print(f"round {number + 1}: {shown}", flush=True)
    return measured


def engine_records(name: str, label: str, measured: list[dict]) -> list[results.Record]:
    """The incremental side's changes/s against the hand-written job's and against the recomputing engine's."""
    return [
        results.record(
            f"{name}, incremental against {other}, {label}",
            [(r["incremental"], r[other]) for r in measured],
            "changes/s",
        )
        for other in ("by hand", "recomputed")
        if other in measured[0]  # a run without the recomputing engine (--without-recomputed) has no such side
    ]


def on_engine(folder: Path, name: str, engine: str) -> None:
    """Fail the bench unless side ``name`` (of ``ours``) runs on ``engine`` (``incremental``, ``recompute``), as its
    checkpoint records it: a job whose application lacks the runner's jar is recomputed, and would be measured as
    the incremental engine."""
    records = (folder / name / ".sql-runner" / "checkpoints").glob(f"**/{ENGINE_FILE}")
    found = [path.read_text().split()[0] for path in records]
    if found != [engine]:
        raise steady.BenchError(
            f"the {name} side runs on {', '.join(found) or 'no recorded engine'}, not on the {engine} engine "
            "(make jars builds the runner's jar)"
        )


def compare(server: PostgresServer, table: str, column: str, users: Users) -> None:
    found = server.execute(f"SELECT {column}, users FROM {table} ORDER BY {column}")
    if sorted(found) != sorted(users.counts().items()):
        raise steady.BenchError(f"{table} differs from the counts the changes leave")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--changes", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--flat-keys", type=int, default=100_000)
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument(
        "--without-recomputed",
        action="store_true",
        help="leave the recomputing engine out (each of its micro-batches rewrites every key held)",
    )
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="bench-changelog-"))
    server = PostgresServer().start()
    try:
        for table in ("incremental_counts", "recomputed_counts"):
            server.execute(f"CREATE TABLE {table} (accountid TEXT PRIMARY KEY, users BIGINT, {PG_METADATA})")
        server.execute(f"CREATE TABLE by_hand_counts (account TEXT PRIMARY KEY, users BIGINT, {PG_METADATA})")
        server.execute("CREATE TABLE users (uid TEXT PRIMARY KEY, account TEXT)")
        server.execute("CREATE INDEX users_by_account ON users (account)")
        server.execute("CREATE TABLE fence (query TEXT PRIMARY KEY, batch_id BIGINT)")
        users = Users(args.keys, seed=11)
        print(f"generating {args.keys:,} users and {args.rounds} rounds of {args.changes:,} changes", flush=True)
        warm_up = tranche(folder / "tranches", "load", users.insert_all())
        rounds = [tranche(folder / "tranches", f"round{r}", users.changes(args.changes)) for r in range(args.rounds)]
        incremental = ours(folder, server, "incremental", "incremental", "incremental_counts")
        hand = by_hand(folder, server)
        sides = [incremental, hand]
        if not args.without_recomputed:
            sides.insert(1, ours(folder, server, "recomputed", "recompute", "recomputed_counts"))
        records: list[results.Record] = []
        try:
            steady.launch(sides, warm_up, args.timeout, timed=False)
            on_engine(folder, "incremental", "incremental")
            if not args.without_recomputed:
                on_engine(folder, "recomputed", "recompute")
            measured = measure(sides, rounds, args.changes, args.timeout)
            millions = args.keys / 1_000_000
            memory = {side.name: resident_mb(side) / millions for side in sides}
            compare(server, "incremental_counts", "accountid", users)
            if not args.without_recomputed:
                compare(server, "recomputed_counts", "accountid", users)
            compare(server, "by_hand_counts", "account", users)
            flat = flat_cost(folder, server, incremental, users, args.flat_keys, args.timeout)
            compare(server, "incremental_counts", "accountid", users)
        finally:
            steady.stop_all(sides)
        checkpoints = {name: folder / name / ".sql-runner" / "checkpoints" for name in ("incremental", "recomputed")}
        incremental_disk = max((folder_mb(p) for p in checkpoints["incremental"].glob("**/state")), default=0.0)
        recomputed_disk = max(
            (folder_mb(p, "*.parquet") for p in checkpoints["recomputed"].glob("**/changelog/b*/t0")), default=0.0
        )
        by_hand_disk = server.execute("SELECT pg_total_relation_size('users')")[0][0] / (1 << 20)
        label = f"{args.keys:,} keys, {args.changes:,} mixed changes a round"
        name = "changelog COUNT GROUP BY into PostgreSQL"
        records = [
            *engine_records(name, label, measured),
            results.record(
                f"changelog: a micro-batch of 1,000 changes, {args.flat_keys:,} keys held against {args.keys:,}",
                flat,
                "s",
                higher_is_better=False,
            ),
            results.record(
                "changelog: resident memory per million keys, incremental against by hand",
                [(memory["incremental"], memory["by hand"])],
                "MiB",
                higher_is_better=False,
            ),
            results.record(
                "changelog: state on disk per million keys, incremental against by hand",
                [(incremental_disk / millions, by_hand_disk / millions)],
                "MiB",
                higher_is_better=False,
            ),
        ]
        if not args.without_recomputed:
            records += [
                results.record(
                    "changelog: resident memory per million keys, incremental against recomputed",
                    [(memory["incremental"], memory["recomputed"])],
                    "MiB",
                    higher_is_better=False,
                ),
                results.record(
                    "changelog: state on disk per million keys, incremental against recomputed",
                    [(incremental_disk / millions, recomputed_disk / millions)],
                    "MiB",
                    higher_is_better=False,
                ),
            ]
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)
    # a run at another size than make bench's is kept beside it
    path = results.write("changelog" if args.keys == 1_000_000 else f"changelog-{args.keys}", records)
    print(f"\n{results.table(records)}\nwritten to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
