"""The question lookup tables answer, end to end: a stream that never ends (a Kafka topic), some of its data
from a database and some from static files, refreshed without restarting the job (the real ``sql-runner``
commands, a detached job, Kafka and PostgreSQL).

Events name a user; the users table is in PostgreSQL and names a region; the regions are a folder of JSON
files. While the job runs, a user is renamed and moved to a region added as a new file: both reach the
output with no deploy. Then the users table's reload interval changes: the plan restarts the job with its
state (the same version), and every event is written once across the restart.
"""

from __future__ import annotations

import json
import threading
import time

import pytest

from demo.kafka_broker import KafkaClient
from tests.clihelpers import cli, edit, history, status, wait_for
from tests.conftest import METADATA_DDL, ProjectDir
from tests.tablehelpers import PG_METADATA_TZ, refs

pytestmark = [pytest.mark.spark, pytest.mark.e2e]


class Producer:
    """Produces one event per user every ``every`` seconds, ids counting up, until stopped."""

    def __init__(self, kafka: KafkaClient, topic: str, users: list[int], every: float = 0.3):
        self.kafka, self.topic, self.users, self.every = kafka, topic, users, every
        self.sent = 0
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stopping.wait(self.every):
            batch = []
            for user in self.users:
                self.sent += 1
                batch.append(json.dumps({"id": self.sent, "user_id": user}))
            self.kafka.produce(self.topic, batch)

    def __enter__(self) -> Producer:
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stopping.set()
        self.thread.join()


def test_a_kafka_stream_enriched_from_postgres_and_files_stays_fresh_without_a_deploy(
    project: ProjectDir, kafka: KafkaClient, topic, postgres
):
    source = topic("events", partitions=2)
    users, out = "users_e2e", f"enriched_{source[-6:]}"
    postgres.execute(f"DROP TABLE IF EXISTS {users}")
    postgres.execute(f"CREATE TABLE {users} (id BIGINT PRIMARY KEY, name TEXT, region_code TEXT)")
    postgres.execute(f"INSERT INTO {users} VALUES (1, 'ann', 'eu'), (2, 'bob', 'us'), (3, 'cy', 'eu')")
    columns = f"event_id BIGINT, user_id BIGINT, user_name TEXT, region TEXT{PG_METADATA_TZ}"
    postgres.execute(f"CREATE TABLE {out} ({columns})")
    regions = project.root / "data" / "regions"
    refs(regions, "a.json", [{"code": "eu", "name": "Europe"}, {"code": "us", "name": "Americas"}])
    database = f"'url' = '{postgres.url}', 'username' = 'runner', 'password' = '${{PG_PASSWORD}}'"
    ddl = project.ddl(
        "tables",
        f"""
        CREATE TABLE events (id BIGINT, user_id BIGINT, proc_time AS PROCTIME())
        WITH ('connector' = 'kafka', 'topic' = '{source}', 'properties.bootstrap.servers' = '{kafka.bootstrap}',
              'format' = 'json', 'scan.startup.mode' = 'earliest-offset');

        CREATE TABLE users (id BIGINT, name STRING, region_code STRING)
        WITH ('connector' = 'jdbc', 'table-name' = '{users}', {database},
              'lookup.full-cache.periodic-reload.interval' = '2 s');

        CREATE TABLE regions (code STRING, name STRING)
        WITH ('connector' = 'filesystem', 'path' = '{regions}', 'format' = 'json',
              'lookup.cache' = 'FULL', 'lookup.full-cache.periodic-reload.interval' = '2000 ms');

        CREATE TABLE enriched (event_id BIGINT, user_id BIGINT, user_name STRING, region STRING{METADATA_DDL})
        WITH ('connector' = 'jdbc', 'table-name' = '{out}', {database});
        """,
    )
    project.template('sparkProperties: {spark.sql.shuffle.partitions: "2"}\n')
    project.manifest(
        "enrich",
        """
        name: enrich
        target-table: enriched
        trigger-interval: 500 milliseconds
        sql: |
          SELECT e.id AS event_id, e.user_id, u.name AS user_name, r.name AS region
          FROM events AS e
          JOIN users FOR SYSTEM_TIME AS OF e.proc_time AS u ON u.id = e.user_id
          LEFT JOIN regions FOR SYSTEM_TIME AS OF e.proc_time AS r ON r.code = u.region_code
        """,
    )
    env = {"PG_PASSWORD": postgres.password}
    validated = cli(project, "validate", env=env).stdout
    assert "reads `events`; looks up `users`, `regions`; writes `enriched`" in validated, validated

    def latest() -> dict[int, tuple[str, str | None]]:
        """Each user's name and region in the newest micro-batch that wrote one of its events."""
        found = postgres.execute(
            f"SELECT DISTINCT ON (user_id) user_id, user_name, region FROM {out} "
            "ORDER BY user_id, __create_timestamp DESC"
        )
        return {user: (name, region) for user, name, region in found}

    with Producer(kafka, source, [1, 2, 3]) as producer:
        cli(project, "deploy", env=env)
        wait_for(
            lambda: latest() == {1: ("ann", "Europe"), 2: ("bob", "Americas"), 3: ("cy", "Europe")},
            "the events enriched from the database and the files",
            180,
            explain=latest,
        )
        refs(regions, "b.json", [{"code": "ap", "name": "Asia Pacific"}])  # a file added
        postgres.execute(f"UPDATE {users} SET name = 'cyd', region_code = 'ap' WHERE id = 3")
        postgres.execute(f"UPDATE {users} SET name = 'anna' WHERE id = 1")
        wait_for(
            lambda: latest() == {1: ("anna", "Europe"), 2: ("bob", "Americas"), 3: ("cyd", "Asia Pacific")},
            "the renamed and moved users, with no deploy",
            60,
            explain=latest,
        )
        shown = status(project, "enrich")
        assert shown["state"] == "running" and shown["version"] == 1
        assert "`users` 3 rows" in shown["lookups"] and "`regions` 3 rows" in shown["lookups"], shown

        edit(
            ddl,
            "'lookup.full-cache.periodic-reload.interval' = '2 s'",
            "'lookup.full-cache.periodic-reload.interval' = '3 s'",
        )
        lines = cli(project, "plan", "--json", env=env).stdout.splitlines()
        action = next(json.loads(line) for line in lines if json.loads(line)["name"] == "enrich")
        assert action["decision"] == "restore" and action["version"] == 1, action
        assert action["summary"].startswith("stop with savepoint, then restore v1"), action
        assert "LOOKUP_OPTIONS_CHANGED" in [r["code"] for r in action["reasons"]], action
        cli(project, "deploy", env=env)
        restored = time.time()
        wait_for(
            lambda: (
                postgres.execute(
                    f"SELECT count(*) FROM {out} WHERE extract(epoch FROM __create_timestamp) > %s", (restored + 2,)
                )[0][0]
                > 0
            ),
            "the restored job writing again",
            180,
        )
        assert status(project, "enrich")["version"] == 1
    sent = producer.sent
    wait_for(lambda: postgres.execute(f"SELECT count(*) FROM {out}")[0][0] >= sent, "every event written", 120)
    rows, distinct = postgres.execute(f"SELECT count(*), count(DISTINCT event_id) FROM {out}")[0]
    assert (rows, distinct) == (sent, sent), "each event written once, across the restart"
    decisions = [entry.decision for entry in history(project, "enrich")]
    assert decisions[:1] == ["start"] and "restore" in decisions, decisions
