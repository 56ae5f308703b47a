"""State and tables on S3 for real: moto's server on 127.0.0.1 plays S3, the jobs reach it through Hadoop's
S3A (hadoop-aws from the jar set, ``s3://`` mapped onto it as everywhere but EMR), the runner through boto3.

- One lifecycle with the three buckets and the job's source and sink tables all on S3: deploy, a
  state-compatible change (stopped with a savepoint written to S3, restored from it), an incompatible one
  (version 2 skips exactly the files version 1 read), kill -9 and a restore from the checkpoint on S3:
  every transaction in the output exactly once.
- S3 stops answering for a few seconds while a job checkpoints there: its S3 calls fail, the restart
  strategy brings it back from its checkpoint once S3 answers again, and the output stays exact.
"""

from __future__ import annotations

import os
import re
import signal
from collections import Counter
from datetime import UTC, datetime

import boto3
import pytest

from demo.committed_rows import committed_bucket_rows, committed_json_rows
from demo.transactions import transactions, write_batch
from runner.core.bucket import S3Bucket
from runner.core.protocol.history import read_history
from tests.clihelpers import cli, status, wait_for
from tests.conftest import METADATA_DDL, ProjectDir, kill_jobs_recorded_in
from tests.motoserver import MotoServer, moto

pytestmark = [pytest.mark.spark, pytest.mark.e2e, pytest.mark.s3]

START = datetime(2026, 1, 1, tzinfo=UTC)
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"  # infra/stack.py's
BUCKETS = {role: f"team-{role}" for role in ("manifests", "checkpoints", "savepoints")}
DATA = "team-data"
STATE = [f"--{role}-bucket={bucket}" for role, bucket in BUCKETS.items()]
RESTARTING = "restarting from the latest checkpoint"  # a line of the job's log (jobs/entry.py)


@pytest.fixture
def s3(monkeypatch, project: ProjectDir):
    # the state store the team's EMR cluster sets (infra/stack.py): its commits upload files through S3A
    project.template(
        'sparkProperties: {spark.sql.shuffle.partitions: "2", '
        f"spark.sql.streaming.stateStore.providerClass: {ROCKSDB}}}\n"
    )
    with moto() as server:
        for key, value in server.env.items():
            monkeypatch.setenv(key, value)
        client = boto3.client("s3")
        for bucket in [*BUCKETS.values(), DATA]:
            client.create_bucket(Bucket=bucket)
        try:
            yield server
        finally:  # the jobs' records are in the S3 bucket: end them while it still answers
            kill_jobs_recorded_in(S3Bucket(BUCKETS["manifests"]))


def dedup(sql_filter: str = "", keys: str = '"transaction_id"') -> str:
    return (
        'name: dedup\ntarget-table: "`s3`.`out`"\ntrigger-interval: 1 second\n'
        "restart-strategy: {delay: 1 second, backoff: 1, attempts: unlimited}\ncode: |\n"
        f'  rows = table("`s3`.`events`").dropDuplicates([{keys}])\n'
        f'  execution_output = rows{sql_filter}.select("transaction_id", "account_id", "amount")\n'
    )


def put_events(name: str, seed: int, count: int = 30) -> list:
    rows = transactions(count, start=START, seed=seed, first_id=seed * 1000)
    body = "\n".join(t.to_json() for t in rows) + "\n"
    boto3.client("s3").put_object(Bucket=DATA, Key=f"in/{name}.json", Body=body.encode())
    return rows


def events_tables(project: ProjectDir, events: str, out: str) -> None:
    """``s3.events`` (transactions, JSON) at ``events`` and ``s3.out`` at ``out``."""
    project.ddl(
        "tables",
        f"""
        CREATE TABLE `s3`.`events` (transaction_id STRING, account_id STRING NOT NULL, payee STRING, amount DOUBLE,
          ts TIMESTAMP(3)) WITH ('connector' = 'filesystem', 'path' = '{events}', 'format' = 'json');
        CREATE TABLE `s3`.`out` (transaction_id STRING, account_id STRING, amount DOUBLE{METADATA_DDL})
          WITH ('connector' = 'filesystem', 'path' = '{out}', 'format' = 'json');
        """,
    )


def test_a_job_with_its_state_and_tables_on_s3_lives_through_every_kind_of_deploy_exactly(
    project: ProjectDir, s3: MotoServer
):
    events_tables(project, f"s3://{DATA}/in/", f"s3://{DATA}/out/")
    path = project.manifest("dedup", dedup())
    data, savepoints = S3Bucket(DATA), S3Bucket(BUCKETS["savepoints"])
    written = put_events("f1", 1)

    def out_ids() -> Counter:
        return Counter(row["transaction_id"] for row in committed_bucket_rows(data, "out"))

    def holds_all() -> bool:
        return set(out_ids()) == {t.transaction_id for t in written}

    cli(project, "deploy", *STATE)
    wait_for(holds_all, "the first file's rows in s3://.../out", 120)
    path.write_text(dedup('.where("amount >= 0")'))  # a filter after the deduplication: the state carries over
    deployed = cli(project, "deploy", *STATE).stdout
    assert "stop with savepoint, then restore v1 from" in deployed, deployed
    taken = [k for k in savepoints.keys("savepoints/dedup/1/") if k.endswith("/_SAVEPOINT.json")]
    assert len(taken) == 1, "the savepoint is in the savepoints bucket"
    assert any("/state/" in k for k in savepoints.keys(taken[0].rsplit("/", 1)[0])), "with the query's state"
    written += put_events("f2", 2)

    path.write_text(dedup('.where("amount >= 0")', '"transaction_id", "account_id"'))  # other state keys
    assert "start v2 with clean state" in cli(project, "deploy", *STATE).stdout
    written += put_events("f3", 3)
    decided = read_history(S3Bucket(BUCKETS["manifests"]), "dedup")[-1]  # history lives in the S3 bucket too
    skips = [note for note in decided.outcome.continuation if "skips the" in note]
    assert skips and re.search(r"skips the [12] files read up to batch", skips[0]), decided

    wait_for(holds_all, "v2 reading the third file", 120)
    job = status(project, "dedup", *STATE)["job"]
    os.killpg(int(job.split("@")[0]), signal.SIGKILL)
    wait_for(lambda: status(project, "dedup", *STATE)["state"] != "running", "the job to be seen dead")
    written += put_events("f4", 4)
    assert "restore v2 from checkpoint run-" in cli(project, "deploy", *STATE).stdout
    wait_for(holds_all, "every file's rows after the restore", 150)
    # a duplicate would land with the next micro-batches: the one that reads another file comes after them
    written += put_events("f5", 5)
    wait_for(holds_all, "a later file's rows", 120)
    counts = out_ids()
    assert set(counts) == {t.transaction_id for t in written}
    assert max(counts.values()) == 1, "no file was read by both versions, none twice by a restored run"
    versions = Counter(row["__query_version"] for row in committed_bucket_rows(data, "out"))
    assert set(versions) == {1, 2}
    cli(project, "stop", "dedup", *STATE)


def test_s3_stopping_for_seconds_during_checkpoints_is_survived_by_the_restart_strategy(
    project: ProjectDir, s3: MotoServer
):
    events_tables(project, "data/in", "data/out")
    # S3A's own retries would ride out a short outage unseen; with one attempt each, the query fails.
    project.manifest(
        "dedup",
        dedup()
        + "sparkProperties:\n"
        + '  spark.hadoop.fs.s3a.retry.limit: "0"\n  spark.hadoop.fs.s3a.attempts.maximum: "1"\n'
        + '  spark.hadoop.fs.s3a.connection.establish.timeout: "2s"\n',
    )
    events = project.root / "data" / "in"
    written = transactions(20, start=START, seed=1)
    write_batch(events, "f0", written)
    cli(project, "deploy", *STATE)
    out = project.root / "data" / "out"
    wait_for(lambda: len(committed_json_rows(out)) == len(written), "the first rows", 120)

    logs = project.root / ".sql-runner" / "logs"

    def failures() -> int:  # what the job's driver says each time its query fails and it restarts
        return sum(log.read_text(errors="replace").count(RESTARTING) for log in logs.glob("dedup-*.log"))

    s3.stop()
    try:
        for index in range(1, 4):  # micro-batches that must checkpoint while S3 is gone, and restarts that fail
            rows = transactions(20, start=START, seed=10 + index, first_id=index * 100)
            write_batch(events, f"f{index}", rows)
            written += rows
            wait_for(lambda n=index: failures() >= n, f"failure {index} while S3 is gone", 120)
    finally:
        s3.start_again()
    wait_for(
        lambda: (
            sorted(r["transaction_id"] for r in committed_json_rows(out)) == sorted(t.transaction_id for t in written)
        ),
        "every row, once, after S3 came back",
        180,
    )
    seen = status(project, "dedup", *STATE)
    assert seen["state"] == "running" and seen["restarts"] >= 1, seen
    # a duplicate would land with the next micro-batches: the one that reads another file comes after them
    later = transactions(20, start=START, seed=20, first_id=400)
    write_batch(events, "f4", later)
    written += later

    def ids() -> Counter:
        return Counter(r["transaction_id"] for r in committed_json_rows(out))

    wait_for(lambda: set(ids()) == {t.transaction_id for t in written}, "a later file's rows", 120)
    assert max(ids().values()) == 1
    cli(project, "stop", "dedup", *STATE)
