"""Exactly once into PostgreSQL through kill -9 and a database that goes away (a real session, Kafka and
PostgreSQL).

Two queries read one topic of debezium-json changes while a feeder writes more: a changelog query
keeps per-account counts in a keyed table, and an ordinary query appends every change record to a table
without key. Their session is killed with SIGKILL at random moments and started again, then the database
stops for a while under them; in the end the keyed table
equals the batch answer over the rows the changes leave, and the appended table holds every record once.
"""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import time

import pytest

from demo.kafka_broker import KafkaClient, Message
from demo.postgres_server import PostgresServer
from runner.targets.local import process_start_ticks
from tests.clihelpers import cli, kill_rounds, status, status_file, wait_for
from tests.conftest import METADATA_DDL, ProjectDir
from tests.tablehelpers import PG_METADATA

pytestmark = [pytest.mark.spark, pytest.mark.e2e, pytest.mark.postgres]


class ChangeFeeder:
    """Writes random debezium-json changes to 60 users in 12 accounts, ``count`` every ``every`` seconds, each
    with a sequence number; keeps the rows they leave."""

    def __init__(self, kafka: KafkaClient, topic: str, seed: int, *, count: int = 20, every: float = 0.25):
        self.kafka, self.topic, self.count, self.every = kafka, topic, count, every
        self.rng = random.Random(seed)
        self.rows: dict[str, dict] = {}
        self.sent = 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._feed, daemon=True)

    def change(self) -> tuple[str, dict]:
        uid = f"u{self.rng.randrange(60)}"
        new = {"uid": uid, "account": f"a{self.rng.randrange(12)}"}
        old = self.rows.get(uid)
        self.sent += 1
        if old is None:
            self.rows[uid] = new
            return uid, {"op": "c", "after": new, "seq": self.sent}
        if self.rng.random() < 0.3:
            del self.rows[uid]
            return uid, {"op": "d", "before": old, "seq": self.sent}
        self.rows[uid] = new
        return uid, {"op": "u", "before": old, "after": new, "seq": self.sent}

    def _feed(self) -> None:
        while not self.done.wait(self.every):
            changes = [self.change() for _ in range(self.count)]
            self.kafka.produce(
                self.topic,
                [Message(json.dumps(v), key=uid, partition=int(uid[1:]) % 3) for uid, v in changes],
            )

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.done.set()
        self.thread.join()

    def answer(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for row in self.rows.values():
            counts[row["account"]] = counts.get(row["account"], 0) + 1
        return counts


def project_over(project: ProjectDir, kafka: KafkaClient, topic: str, url: str, counts: str, log: str) -> None:
    database = "'username' = 'runner', 'password' = '${PG_PASSWORD}'"
    project.ddl(
        "tables",
        f"""
        CREATE TABLE users (uid STRING, account STRING, PRIMARY KEY (uid) NOT ENFORCED)
        WITH ('connector' = 'kafka', 'topic' = '{topic}', 'properties.bootstrap.servers' = '{kafka.bootstrap}',
              'format' = 'debezium-json', 'scan.max-offsets-per-trigger' = '1000');

        CREATE TABLE user_changes (seq BIGINT, op STRING)
        WITH ('connector' = 'kafka', 'topic' = '{topic}', 'properties.bootstrap.servers' = '{kafka.bootstrap}',
              'format' = 'json', 'scan.max-offsets-per-trigger' = '1000');

        CREATE TABLE per_account (account STRING, users BIGINT{METADATA_DDL}, PRIMARY KEY (account) NOT ENFORCED)
        WITH ('connector' = 'jdbc', 'url' = '{url}', 'table-name' = '{counts}', {database});

        CREATE TABLE change_log (seq BIGINT, op STRING{METADATA_DDL})
        WITH ('connector' = 'jdbc', 'url' = '{url}', 'table-name' = '{log}', {database});
        """,
    )
    project.template(
        "mode: session\ntrigger-interval: 1 second\nsparkProperties: {spark.sql.shuffle.partitions: '2'}\n"
        "restart-strategy: {attempts: unlimited, delay: 1 second, backoff: 1}\n"
    )
    project.manifest(
        "per-account",
        """
        name: per-account
        target-table: per_account
        sql: SELECT account, COUNT(*) AS users FROM users GROUP BY account
        """,
    )
    project.manifest(
        "change-log",
        """
        name: change-log
        target-table: change_log
        sql: SELECT seq, op FROM user_changes
        """,
    )


def test_kill_minus_nine_at_random_moments_and_a_database_outage_end_exact_with_no_duplicate_row(
    project: ProjectDir, kafka: KafkaClient, topic
):
    """Both queries run in the team's session (one JVM to kill and start again per round); then the database
    stops for a while under them: they are failing, and come back by themselves when it returns."""
    seed, kills = kill_rounds("kill moments and changes")
    rng = random.Random(seed)
    source = topic("users", partitions=3)
    with PostgresServer() as database:  # its own server: this test stops it
        counts, log = "counts", "changes"
        database.execute(f"CREATE TABLE {counts} (account TEXT PRIMARY KEY, users BIGINT{PG_METADATA})")
        database.execute(f"CREATE TABLE {log} (seq BIGINT, op TEXT{PG_METADATA})")
        project_over(project, kafka, source, database.url, counts, log)
        env = {"PG_PASSWORD": database.password}
        feeder = ChangeFeeder(kafka, source, seed)
        jobs = ("per-account", "change-log")
        state = project.root / ".sql-runner" / "manifests"

        def since(run: str | None) -> bool:
            """Both queries finished a micro-batch in a session started after ``run`` (the one killed)."""
            health = json.loads((state / "session" / "health.json").read_text())
            published = [status_file(project, name) for name in jobs]
            return health["run-id"] != run and all(
                p.get("session-run") == health["run-id"] and p.get("progress") is not None for p in published
            )

        def session_pid() -> int:
            return json.loads((state / "jobs" / "_session.json").read_text())["pid"]

        def failing(name: str) -> bool:
            return status_file(project, name).get("state") == "failing"

        cli(project, "session", "start", env=env)
        feeder.start()
        killed: str | None = None
        try:
            for _ in range(kills):
                wait_for(lambda killed=killed: since(killed), "both queries processing changes", 180)
                time.sleep(rng.uniform(0.0, 2.0))  # between micro-batches, or in one (its transaction open or not)
                killed = status_file(project, "per-account")["session-run"]
                pid = session_pid()
                os.killpg(pid, signal.SIGKILL)
                wait_for(lambda pid=pid: process_start_ticks(pid) is None, "the session gone", 30)
                cli(project, "session", "start", env=env)
            wait_for(lambda: since(killed), "both queries processing changes", 180)
            database.pause()
            wait_for(lambda: all(failing(name) for name in jobs), "both queries failing", 120)
            why = status(project, "per-account")["why"]
            assert "PostgreSQL" in why and database.password not in why, why
            database.resume()
            time.sleep(1.0)
        finally:
            feeder.stop()
        expected = sorted(feeder.answer().items())

        def table() -> list[tuple]:
            return database.execute(f"SELECT account, users FROM {counts} ORDER BY account")

        wait_for(lambda: table() == expected, "the counts equal the batch answer", 180, explain=lambda: f"{table()}")
        wait_for(
            lambda: database.execute(f"SELECT count(*) FROM {log}")[0][0] >= feeder.sent, "every change appended", 180
        )
        rows, distinct = database.execute(f"SELECT count(*), count(DISTINCT seq) FROM {log}")[0]
        assert (rows, distinct) == (feeder.sent, feeder.sent), "each change appended exactly once"
        print(
            f"{kills} kills of both queries, then an outage; {feeder.sent} changes; "
            f"{len(expected)} accounts and {rows} log rows compared"
        )
        wait_for(
            lambda: status(project, "per-account")["keys held"] == f"`users` {len(feeder.rows)}",
            "the status to show the keys held",
            60,
        )
        shown = status(project, "per-account")
        assert shown["state"] == "running" and shown["changes/s"].startswith("`users` ")
        assert shown["changelog engine"] == "incremental", shown  # its operators keep each key's row
        cli(project, "session", "stop")
