"""Kafka jobs as users run them: the real `sql-runner` commands, detached `spark-submit` jobs and the team's
session, against the test run's Kafka broker.

- A job whose jar cache lacks the Kafka connector stops with KAFKA_CONNECTOR_MISSING (exit 2) naming the
  missing jar and `make jars`; one with MSK's SASL/IAM client settings (as EMR's spark-defaults set them)
  loads the IAM classes from the jar set and stops with KAFKA_PROTOCOL_MISMATCH naming the plaintext broker.
- An incompatible change: version 2 starts at exactly the offsets version 1 committed, on every partition,
  and from the start of a partition added between the versions: per key, v1's count and v2's add up to
  what was produced.
- kill -9 of a Kafka-to-keyed-Kafka count at five random moments, each time restored by `deploy`: every
  record is read exactly once (the counts end exact) and the keyed topic converges; the records of
  batches replayed after a kill are written again (counted and printed: Spark's Kafka sink is at least
  once).
- Session mode: Kafka queries added, changed and removed while the others keep consuming.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import threading
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest

from demo.kafka_broker import KafkaClient, Message
from demo.transactions import transactions
from runner.core import jars
from runner.targets.local import process_start_ticks
from tests.clihelpers import batch, cli, history, kill_rounds, status, status_file, wait_for
from tests.conftest import METADATA_DDL, ProjectDir

pytestmark = [pytest.mark.spark, pytest.mark.e2e]

START = datetime(2026, 1, 1, tzinfo=UTC)


def source_ddl(kafka: KafkaClient, topic: str, extra: str = "") -> str:
    return f"""
CREATE TABLE `kafka`.`transactions` (
  transaction_id STRING, account_id STRING NOT NULL, payee STRING, amount DOUBLE, ts TIMESTAMP(3)
) WITH ('connector' = 'kafka', 'topic' = '{topic}', 'format' = 'json',
        'properties.bootstrap.servers' = '{kafka.bootstrap}'{extra});
"""


def sink_ddl(kafka: KafkaClient, name: str, topic: str, columns: str) -> str:
    return f"""
CREATE TABLE `kafka`.`{name}` ({columns}{METADATA_DDL})
WITH ('connector' = 'kafka', 'topic' = '{topic}', 'format' = 'json',
      'properties.bootstrap.servers' = '{kafka.bootstrap}');
"""


def manifest(name: str, target: str, sql: str, extra: str = "") -> str:
    return f'name: {name}\ntarget-table: "`kafka`.`{target}`"\ntrigger-interval: 1 second\nsql: "{sql}"\n{extra}'


BIG = "SELECT transaction_id, amount FROM `kafka`.`transactions` WHERE amount > 500"
COUNTS = "SELECT account_id, COUNT(*) AS n FROM `kafka`.`transactions` GROUP BY account_id"


def latest_counts(records) -> dict[str, int]:
    """Account -> the last count written under its key, as a compacted topic keeps it (a key's records are on
    one partition, in offset order)."""
    latest = {r.key: json.loads(r.value) for r in records}
    assert all(json.loads(key) == {"account_id": row["account_id"]} for key, row in latest.items())
    return {row["account_id"]: row["n"] for row in latest.values()}


class Feeder:
    """Writes ``count`` transactions into a topic every ``every`` seconds, from its start until its stop."""

    def __init__(self, kafka: KafkaClient, topic: str, *, count: int, every: float):
        self.kafka, self.topic, self.count, self.every = kafka, topic, count, every
        self.produced: list = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._feed, daemon=True)

    def _feed(self) -> None:
        number = 0
        while not self.done.wait(self.every):
            rows = transactions(self.count, start=START, seed=number, first_id=number * 100)
            self.kafka.produce(self.topic, [t.to_json() for t in rows])
            self.produced.extend(rows)
            number += 1

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> list:
        """Stops writing; returns every transaction written."""
        self.done.set()
        self.thread.join()
        return self.produced


def test_a_job_without_the_connector_jar_or_with_msks_client_settings_on_a_plaintext_broker_stops_clearly(
    project: ProjectDir, kafka: KafkaClient, topic, tmp_path: Path
):
    source, out = topic("in"), topic("out")
    project.ddl(
        "tables", source_ddl(kafka, source) + sink_ddl(kafka, "out", out, "transaction_id STRING, amount DOUBLE")
    )
    path = project.manifest(
        "copy", manifest("copy", "out", "SELECT transaction_id, amount FROM `kafka`.`transactions`")
    )
    kafka.produce(source, [t.to_json() for t in transactions(5, start=START, seed=1)])

    cache = tmp_path / "jars"
    shutil.copytree(jars.cache_root(), cache, ignore=shutil.ignore_patterns("spark-sql-kafka-*.jar"))
    missing = cli(project, "run", str(path), "--once", check=False, env={jars.CACHE_ENV: str(cache)})
    assert missing.returncode == 2, missing.stdout + missing.stderr
    # the job's driver prints its problems; spark-submit hands them on with its own output
    line = next(line for line in (missing.stdout + missing.stderr).splitlines() if "KAFKA_CONNECTOR_MISSING" in line)
    assert "spark-sql-kafka-0-10_2.13-4.0.4.jar" in line and "`make jars`" in line
    assert kafka.end_offsets(out) == {0: 0}, "nothing written"

    msk = {
        "spark.sqlrunner.kafka.properties.security.protocol": "SASL_SSL",
        "spark.sqlrunner.kafka.properties.sasl.mechanism": "AWS_MSK_IAM",
        "spark.sqlrunner.kafka.properties.sasl.jaas.config": "software.amazon.msk.auth.iam.IAMLoginModule required;",
        "spark.sqlrunner.kafka.properties.sasl.client.callback.handler.class": (
            "software.amazon.msk.auth.iam.IAMClientCallbackHandler"
        ),
    }
    path.write_text(path.read_text() + "sparkProperties:\n" + "".join(f'  {k}: "{v}"\n' for k, v in msk.items()))
    refused = cli(
        project, "run", str(path), "--once", check=False, env={"AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "y"}
    )
    output = refused.stdout + refused.stderr
    assert refused.returncode == 2, output
    assert "ClassNotFoundException" not in output and "KAFKA_CLIENT_CLASS_MISSING" not in output
    line = next(line for line in output.splitlines() if "KAFKA_PROTOCOL_MISMATCH" in line)
    assert f"broker {kafka.bootstrap} does not speak SASL_SSL" in line and "TLS handshake" in line
    assert kafka.end_offsets(out) == {0: 0}


def test_a_new_version_starts_at_the_committed_offsets_of_every_partition_and_a_new_partition_from_its_start(
    project: ProjectDir, kafka: KafkaClient, topic
):
    source, out = topic("in", partitions=3), topic("out", partitions=2)
    project.ddl(
        "tables",
        source_ddl(kafka, source)
        + sink_ddl(kafka, "counts", out, "account_id STRING, n BIGINT, PRIMARY KEY (account_id) NOT ENFORCED"),
    )
    project.template('sparkProperties: {spark.sql.shuffle.partitions: "2"}\n')
    path = project.manifest(
        "per-account",
        manifest(
            "per-account",
            "counts",
            "SELECT account_id, COUNT(*) AS n FROM `kafka`.`transactions` GROUP BY account_id",
        ),
    )
    produced: Counter[str] = Counter()

    def produce(seed: int, count: int, partition: int | None = None) -> None:
        rows = transactions(count, start=START, seed=seed, first_id=seed * 1000)
        produced.update(t.account_id for t in rows)
        kafka.produce(source, [Message(t.to_json(), partition=partition) for t in rows])

    produce(1, 120)
    cli(project, "deploy")

    def counted(version: int) -> dict[str, int]:
        rows = [json.loads(r.value) for r in kafka.records(out)]
        latest: dict[str, int] = {}
        for row in rows:
            if row["__query_version"] == version:
                latest[row["account_id"]] = row["n"]
        return latest

    wait_for(lambda: counted(1) == dict(produced), "v1 to count the first records", 120)

    # what the console shows of the plan: the Kafka source with its lag (read up to the latest offsets: none
    # behind), the aggregation's state, the sink
    def caught_up() -> dict | None:
        """The published progress once its batch read up to the latest offsets (published after the batch)."""
        progress = status_file(project, "per-account").get("progress")
        return progress if progress and progress["sources"][0]["offsets-behind"] == 0 else None

    progress = wait_for(caught_up, "the status of a batch with no offset behind", 60)
    [read] = progress["sources"]
    assert read["description"].startswith("KafkaV2"), read
    assert [op["name"] for op in progress["operators"]] == ["stateStoreSave"] and progress["operators"][0]["rows"]
    produce(2, 60)  # v1 may or may not read these before it stops: either way each is counted once
    kafka.add_partitions(source, 4)
    produce(3, 20, partition=3)  # only in the partition v1 never saw
    edit = path.read_text().replace("SELECT account_id,", "SELECT lower(account_id) AS account_id,")
    path.write_text(edit.replace("GROUP BY account_id", "GROUP BY lower(account_id)"))
    deployed = cli(project, "deploy").stdout
    assert "start v2 with clean state" in deployed
    produce(4, 40)

    def both() -> bool:
        first, second = counted(1), counted(2)
        return {k: first.get(k, 0) + second.get(k, 0) for k in produced} == dict(produced)

    wait_for(
        both,
        "v1's and v2's counts to add up to what was produced, key by key",
        120,
        explain=lambda: (counted(1), counted(2), dict(produced)),
    )
    starts = history(project, "per-account")[-1]
    continued = " ".join(starts.outcome.continuation)
    assert "Kafka offsets of batch" in continued, starts
    cli(project, "stop", "per-account")


def test_kill_minus_nine_at_random_moments_reads_every_record_once_and_the_keyed_topic_converges(
    project: ProjectDir, kafka: KafkaClient, topic
):
    seed, kills = kill_rounds("kill moments")
    rng = random.Random(seed)
    source, counts = topic("in", partitions=3), topic("counts", partitions=2)
    project.ddl(
        "tables",
        source_ddl(kafka, source, ", 'scan.max-offsets-per-trigger' = '200'")
        + sink_ddl(kafka, "counts", counts, "account_id STRING, n BIGINT, PRIMARY KEY (account_id) NOT ENFORCED"),
    )
    project.template('sparkProperties: {spark.sql.shuffle.partitions: "2"}\n')
    project.manifest("counting", manifest("counting", "counts", COUNTS))
    feeder = Feeder(kafka, source, count=25, every=0.25)
    record = project.root / ".sql-runner" / "manifests" / "jobs" / "counting.json"

    def pid() -> int:
        return json.loads(record.read_text())["pid"]

    def working(killed: tuple[str, int] | None) -> bool:
        """The job started since the last kill (another launch) has finished a micro-batch of its own."""
        published = status_file(project, "counting")
        batch = (published.get("progress") or {}).get("batch")
        if killed is None:
            return batch is not None
        return published.get("launch-id") != killed[0] and batch is not None and batch > killed[1]

    cli(project, "deploy")
    feeder.start()
    killed: tuple[str, int] | None = None
    try:
        for _ in range(kills):
            wait_for(lambda killed=killed: working(killed), "the job processing records", 180)
            time.sleep(rng.uniform(0.0, 2.5))  # a micro-batch a second: between batches, or in one
            os.killpg(pid(), signal.SIGKILL)
            published = status_file(project, "counting")
            killed = (published["launch-id"], published["progress"]["batch"])
            wait_for(lambda: process_start_ticks(pid()) is None, "the job gone")
            assert "restore v1 from checkpoint run-" in cli(project, "deploy").stdout
    finally:
        produced = feeder.stop()
    expected = dict(Counter(t.account_id for t in produced))

    def off() -> str:
        got = latest_counts(kafka.records(counts))
        return f"(got, expected): { ({k: (got.get(k), n) for k, n in expected.items() if got.get(k) != n}) }"

    wait_for(lambda: latest_counts(kafka.records(counts)) == expected, "every count exact", 180, explain=off)
    # A replayed batch writes its (key, count) records again; a record read twice would count twice instead.
    written = Counter(r.value for r in kafka.records(counts))
    duplicates = sum(written.values()) - len(written)
    print(f"{kills} kills: {len(produced)} records in, {sum(written.values())} written, {duplicates} of them again")
    cli(project, "stop", "counting")


def test_session_queries_over_kafka_are_added_changed_and_removed_while_the_others_keep_consuming(
    project: ProjectDir, kafka: KafkaClient, topic
):
    source = topic("in", partitions=2)
    outs = {name: topic(name) for name in ("big", "all", "counts")}
    project.ddl(
        "tables",
        source_ddl(kafka, source)
        + sink_ddl(kafka, "big", outs["big"], "transaction_id STRING, amount DOUBLE")
        + sink_ddl(kafka, "all", outs["all"], "transaction_id STRING, amount DOUBLE")
        + sink_ddl(
            kafka, "counts", outs["counts"], "account_id STRING, n BIGINT, PRIMARY KEY (account_id) NOT ENFORCED"
        ),
    )
    project.template(
        'mode: session\ntrigger-interval: 1 second\nsparkProperties: {spark.sql.shuffle.partitions: "2"}\n'
    )
    project.manifest("big", manifest("big", "big", BIG))
    project.manifest("counts", manifest("counts", "counts", COUNTS))
    feeder = Feeder(kafka, source, count=10, every=0.5)
    cli(project, "session", "start")
    feeder.start()
    try:
        wait_for(lambda: batch(project, "big") >= 1 and batch(project, "counts") >= 1, "both queries consuming", 120)
        mark = batch(project, "counts")
        project.manifest("all", manifest("all", "all", "SELECT transaction_id, amount FROM `kafka`.`transactions`"))
        wait_for(lambda: batch(project, "all") >= 0, "the added query's first batch", 120)
        run_before = status_file(project, "big")["run-id"]
        project.manifest("big", manifest("big", "big", BIG, 'description: "above 500"\n'))
        wait_for(
            lambda: status_file(project, "big").get("run-id") not in (None, run_before) and batch(project, "big") >= 0,
            "big restored from its savepoint",
            120,
        )
        (project.root / "manifests" / "all.yaml").unlink()
        wait_for(lambda: status(project, "all")["state"].startswith("removed"), "all removed", 120)
        assert batch(project, "counts") > mark, "counts kept consuming through the add, the change and the removal"
    finally:
        produced = feeder.stop()
    expected_big = sorted(t.transaction_id for t in produced if t.amount > 500)

    def big_ids() -> list[str]:
        return sorted(json.loads(r.value)["transaction_id"] for r in kafka.records(outs["big"]))

    def big_off() -> str:
        got = Counter(big_ids())
        missing = sorted(set(expected_big) - set(got))
        twice = sorted(k for k, n in got.items() if n > 1)
        return f"{len(expected_big)} expected; missing {missing[:20]} ({len(missing)}); twice {twice[:20]}"

    wait_for(
        lambda: big_ids() == expected_big,
        "big to hold every large transaction exactly once, across its restore",
        120,
        explain=big_off,
    )
    expected_counts = Counter(t.account_id for t in produced)
    wait_for(
        lambda: latest_counts(kafka.records(outs["counts"])) == dict(expected_counts),
        "counts to end exact",
        120,
    )
    all_ids = Counter(json.loads(r.value)["transaction_id"] for r in kafka.records(outs["all"]))
    assert all_ids and max(all_ids.values()) == 1, "what the removed query wrote, it wrote once"
    cli(project, "session", "stop")
