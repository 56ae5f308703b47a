"""Kafka in and out for real: the job's code on local Spark with the connector from the jar set, against the
test run's Kafka broker. Each test reads back what a consumer of the output topic sees and compares it with
the same computation done in Python over the records it produced."""

from __future__ import annotations

import json
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pyspark.errors import AnalysisException

from demo.kafka_broker import Message
from demo.transactions import MALFORMED_LINES, transactions
from jobs import boundary, runtime
from tests.conftest import METADATA_DDL, ProjectDir
from tests.jobhelpers import run_once

pytestmark = pytest.mark.spark

START = datetime(2026, 1, 1, tzinfo=UTC)

SOURCE = """
CREATE TABLE `kafka`.`transactions` (
  transaction_id STRING,
  account_id     STRING NOT NULL,
  payee          STRING,
  amount         DOUBLE,
  ts             TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'kafka', 'format' = 'json', 'properties.bootstrap.servers' = '{bootstrap}', {source});
"""


def kafka_project(project: ProjectDir, kafka, source: str, sink_columns: str, sink: str, sql: str) -> ProjectDir:
    project.ddl(
        "tables",
        SOURCE.format(bootstrap=kafka.bootstrap, source=source)
        + f"CREATE TABLE `kafka`.`out` ({sink_columns}{METADATA_DDL}) WITH ('connector' = 'kafka', "
        + f"'properties.bootstrap.servers' = '{kafka.bootstrap}', {sink});\n",
    )
    project.manifest(
        "kafka-query",
        f"""
        name: kafka-query
        description: "over Kafka"
        target-table: "`kafka`.`out`"
        sql: |
          {sql}
        """,
    )
    return project


def values(records) -> list[dict]:
    return [json.loads(r.value) for r in records]


def test_filter_into_kafka_is_exact_with_metadata_and_no_keys_and_a_rerun_adds_only_new_rows(
    spark, project: ProjectDir, kafka, topic, tmp_path: Path
):
    source, out = topic("in", partitions=3), topic("out", partitions=2)
    kafka_project(
        project,
        kafka,
        f"'topic' = '{source}'",
        "transaction_id STRING, account_id STRING, amount DOUBLE",
        f"'topic' = '{out}', 'format' = 'json'",
        "SELECT transaction_id, account_id, amount FROM `kafka`.`transactions` WHERE amount > 500",
    )
    first = transactions(300, start=START, seed=11)
    kafka.produce(source, [t.to_json() for t in first])
    prepared, _ = run_once(spark, project, "kafka-query", tmp_path / "state")

    written = kafka.records(out)
    rows = values(written)
    expected = sorted((t.transaction_id, t.account_id, t.amount) for t in first if t.amount > 500)
    assert len(expected) > 50, "the input must hold rows the filter keeps"
    assert sorted((r["transaction_id"], r["account_id"], r["amount"]) for r in rows) == expected
    assert all(r.key is None for r in written), "a sink without a PRIMARY KEY writes records without keys"
    meta = prepared.manifest.meta
    assert {(r["__query_name"], r["__query_id"], r["__query_version"]) for r in rows} == {
        ("kafka-query", meta.query_id, 1)
    }
    assert all(r["__query_description"] == "over Kafka" and r["__create_timestamp"] for r in rows)

    second = transactions(100, start=START, seed=12, first_id=300)
    kafka.produce(source, [t.to_json() for t in second])
    run_once(spark, project, "kafka-query", tmp_path / "state")
    ids = [r["transaction_id"] for r in values(kafka.records(out))]
    assert len(ids) == len(set(ids)), "the second run on the same checkpoint reads only the new records"
    assert sorted(ids) == sorted(t.transaction_id for t in first + second if t.amount > 500)


def test_a_malformed_value_is_set_aside_whatever_columns_the_query_reads_and_counted_once(
    spark, project: ProjectDir, kafka, topic, tmp_path: Path
):
    """A Kafka value is decoded against every declared column: a query that reads only ``transaction_id`` sets
    aside a record whose ``amount`` is not a number. The micro-batch's malformed record is read from Kafka
    again to be set aside; Spark's progress counts each record once."""
    source, out = topic("in"), topic("out")
    kafka_project(
        project,
        kafka,
        f"'topic' = '{source}'",
        "transaction_id STRING",
        f"'topic' = '{out}', 'format' = 'json'",
        "SELECT transaction_id FROM `kafka`.`transactions`",
    )
    good = transactions(3, start=START, seed=5)
    kafka.produce(source, [t.to_json() for t in good] + [MALFORMED_LINES[0]])  # "amount": "twelve"
    prepared, queries = run_once(spark, project, "kafka-query", tmp_path / "state")
    assert sorted(r["transaction_id"] for r in values(kafka.records(out))) == sorted(t.transaction_id for t in good)
    dead = spark.read.json(str(prepared.dead_letter / "kafka-transactions")).collect()
    assert [(r.raw, r.reason) for r in dead] == [(MALFORMED_LINES[0], "field 'amount': twelve is not a valid DOUBLE")]
    assert [(p.numInputRows, [s.numInputRows for s in p.sources]) for p in queries[0].recentProgress] == [(4, [4])]


def test_a_batch_that_begins_after_a_stop_began_writes_nothing_and_runs_once_on_restore(
    spark, project: ProjectDir, kafka, topic, tmp_path: Path
):
    """Spark's Kafka sink has no transactions: a batch interrupted while it writes is written again
    when it is replayed. A graceful stop closes the query's boundary first, so that a batch which
    begins meanwhile ends the query before writing anything, and the restored query writes it once."""
    source, out = topic("in", partitions=2), topic("out", partitions=2)
    kafka_project(
        project,
        kafka,
        f"'topic' = '{source}'",
        "transaction_id STRING",
        f"'topic' = '{out}', 'format' = 'json'",
        "SELECT transaction_id FROM `kafka`.`transactions`",
    )
    path = project.root / "manifests" / "kafka-query.yaml"
    path.write_text(path.read_text() + "trigger-interval: 500 milliseconds\n")
    first, second = transactions(40, start=START, seed=3), transactions(40, start=START, seed=4, first_id=1000)
    kafka.produce(source, [t.to_json() for t in first])
    state = tmp_path / "state"
    _, queries = run_once(spark, project, "kafka-query", state, once=False)
    query = queries[0]

    def written_ids() -> list[str]:
        return sorted(json.loads(r.value)["transaction_id"] for r in kafka.records(out))

    deadline = time.monotonic() + 120
    while written_ids() != sorted(t.transaction_id for t in first) and time.monotonic() < deadline:
        time.sleep(0.2)
    began = boundary.of(query).close()
    assert began is not None, "the first records were written by a batch that began before the stop"

    kafka.produce(source, [t.to_json() for t in second])
    deadline = time.monotonic() + 120
    while query.isActive and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not query.isActive, "the batch over the new records came to the closed boundary and ended the query"
    assert boundary.of(query).refused == began + 1
    runtime.wait(spark, queries, once=False)  # a query stopped at its boundary is no failure: nothing raised
    assert written_ids() == sorted(t.transaction_id for t in first), "the refused batch wrote nothing"

    run_once(spark, project, "kafka-query", state)  # the same checkpoint: the refused batch runs now
    assert written_ids() == sorted(t.transaction_id for t in first + second), "every record written exactly once"


def test_windowed_counts_into_a_keyed_topic_end_at_the_batch_answer_per_key(
    spark, project: ProjectDir, kafka, topic, tmp_path: Path
):
    source, out = topic("in", partitions=3), topic("out", partitions=3)
    kafka_project(
        project,
        kafka,
        f"'topic' = '{source}', 'scan.max-offsets-per-trigger' = '150'",
        "account_id STRING, window_start TIMESTAMP(3), transactions BIGINT, total DOUBLE, "
        "PRIMARY KEY (account_id, window_start) NOT ENFORCED",
        f"'topic' = '{out}', 'format' = 'json'",
        "SELECT account_id, window.start AS window_start, COUNT(*) AS transactions, ROUND(SUM(amount), 2) AS total "
        "FROM `kafka`.`transactions` GROUP BY account_id, window(ts, '1 minute')",
    )
    events = transactions(600, start=START, seed=21, step_seconds=1.5)
    # Spark keeps one watermark per query: the newest event time read from any partition, less the delay. A
    # producer's sticky partitioner puts runs of events in one partition, so one partition's reading could trail
    # another's by more than the 5 s delay and its events would be dropped as late, as Spark documents. Placed
    # round-robin, every batch of 150 reads the same stretch of event time from each partition.
    kafka.produce(source, [Message(t.to_json(), partition=i % 3) for i, t in enumerate(events)])
    run_once(spark, project, "kafka-query", tmp_path / "state")

    expected: dict[tuple[str, datetime], list] = {}
    for t in events:
        entry = expected.setdefault((t.account_id, t.ts.replace(second=0, microsecond=0)), [0, 0.0])
        entry[0] += 1
        entry[1] += t.amount
    latest: dict[str, dict] = {}
    keys_seen = Counter()
    for record in kafka.records(out):  # in offset order per partition; one key always lands on one partition
        row = json.loads(record.value)
        assert json.loads(record.key) == {"account_id": row["account_id"], "window_start": row["window_start"]}
        latest[record.key.decode()] = row
        keys_seen[record.key.decode()] += 1
    answer = {
        (r["account_id"], datetime.fromisoformat(r["window_start"])): (r["transactions"], r["total"])
        for r in latest.values()
    }
    assert answer == {key: (count, round(total, 2)) for key, (count, total) in expected.items()}
    assert max(keys_seen.values()) > 1, "update mode: a window's count is written again as it grows"


def _offsets_query(project: ProjectDir, kafka, source_options: str, out_dir: Path) -> None:
    project.ddl(
        "tables",
        SOURCE.format(bootstrap=kafka.bootstrap, source=source_options)
        + f"CREATE TABLE `files`.`out` (transaction_id STRING{METADATA_DDL}) "
        + f"WITH ('connector' = 'filesystem', 'path' = '{out_dir}', 'format' = 'json');\n",
    )
    project.manifest(
        "offsets",
        """
        name: offsets
        target-table: "`files`.`out`"
        sql: SELECT transaction_id FROM `kafka`.`transactions`
        """,
    )


def _read_ids(spark, out_dir: Path) -> list[str]:
    try:
        return sorted(r.transaction_id for r in spark.read.json(str(out_dir)).collect())
    except AnalysisException:  # nothing committed
        return []


def test_every_startup_mode_topic_lists_patterns_and_the_per_trigger_limit(
    spark, project: ProjectDir, kafka, topic, tmp_path: Path
):
    a, b = topic("a", partitions=2), topic("b", partitions=1)
    base = int(time.time() * 1000) - 3_600_000  # record i's timestamp is base + i seconds
    per_partition: dict[int, list[str]] = {0: [], 1: []}
    messages = []
    for i, tx in enumerate(transactions(40, start=START, seed=3)):  # twenty per partition, alternating
        messages.append(Message(tx.to_json(), partition=i % 2, timestamp=base + i * 1000))
        per_partition[i % 2].append(tx.transaction_id)
    kafka.produce(a, messages)
    in_b = [t.to_json() for t in transactions(5, start=START, seed=99, first_id=1000)]
    kafka.produce(b, in_b)
    everything_a = sorted(per_partition[0] + per_partition[1])

    def run(name: str, options: str) -> list[str]:
        out = tmp_path / name / "out"
        _offsets_query(project, kafka, options, out)
        run_once(spark, project, "offsets", tmp_path / name / "state")
        return _read_ids(spark, out)

    assert run("earliest", f"'topic' = '{a}', 'scan.startup.mode' = 'earliest-offset'") == everything_a
    specific = f"'topic' = '{a}', 'scan.startup.mode' = 'specific-offsets', 'scan.startup.specific-offsets' = "
    specific += "'partition:0,offset:15;partition:1,offset:3'"
    assert run("specific", specific) == sorted(per_partition[0][15:] + per_partition[1][3:])
    # record i has timestamp base + i s: from base + 30 s on, records 30..39
    at = f"'topic' = '{a}', 'scan.startup.mode' = 'timestamp', 'scan.startup.timestamp-millis' = '{base + 30_000}'"
    assert run("timestamp", at) == sorted(per_partition[0][15:] + per_partition[1][15:])
    both = f"'topic' = '{a};{b}'"
    from_b = sorted(json.loads(v)["transaction_id"] for v in in_b)
    assert run("list", both) == sorted(everything_a + from_b)
    prefix = a.rsplit("-", 2)[0]
    assert run("pattern", f"'topic-pattern' = '{prefix}-(a|b)-.*'") == sorted(everything_a + from_b)

    latest_options = f"'topic' = '{a}', 'scan.startup.mode' = 'latest-offset'"
    assert run("latest", latest_options) == [], "latest-offset: what was in the topic before the start is skipped"
    later = transactions(4, start=START, seed=7, first_id=2000)
    kafka.produce(a, [t.to_json() for t in later])
    assert run("latest", latest_options) == sorted(t.transaction_id for t in later), "then what comes after"

    limited = tmp_path / "limited"
    _offsets_query(project, kafka, f"'topic' = '{a}', 'scan.max-offsets-per-trigger' = '7'", limited / "out")
    _, queries = run_once(spark, project, "offsets", limited / "state")
    batches = [p["numInputRows"] for p in queries[0].recentProgress if p["numInputRows"]]
    assert sum(batches) == 44 and max(batches) <= 7 and len(batches) >= 7, batches


def test_malformed_values_go_to_the_dead_letters_with_their_place_and_the_query_keeps_running(
    spark, project: ProjectDir, kafka, topic, tmp_path: Path
):
    source, out = topic("in", partitions=1), topic("out")
    kafka_project(
        project,
        kafka,
        f"'topic' = '{source}'",
        "transaction_id STRING, amount DOUBLE",
        f"'topic' = '{out}', 'format' = 'json'",
        "SELECT transaction_id, amount FROM `kafka`.`transactions`",
    )
    path = project.root / "manifests" / "kafka-query.yaml"
    path.write_text(path.read_text() + "trigger-interval: 500 milliseconds\n")
    good = transactions(6, start=START, seed=5)
    bad = [
        "this is not json",
        '{"transaction_id": "wrong-type", "account_id": "a", "amount": "lots"}',
        '{"transaction_id": "no-account", "amount": 3.5}',
        None,  # a tombstone
    ]
    kafka.produce(source, [good[0].to_json(), *bad, *(t.to_json() for t in good[1:])])
    prepared, queries = run_once(spark, project, "kafka-query", tmp_path / "state", once=False)
    try:
        dead_dir = prepared.dead_letter / "kafka-transactions"
        deadline = time.monotonic() + 90
        dead = []
        while time.monotonic() < deadline:
            dead = _dead(spark, dead_dir)
            if len(dead) == 4 and len(kafka.records(out)) == 6:
                break
            time.sleep(0.5)
        assert sorted((r.offset, r.reason) for r in dead) == [
            (1, "malformed JSON: not a JSON object"),
            (2, "field 'amount': lots is not a valid DOUBLE"),
            (3, "field 'account_id' is missing (declared NOT NULL)"),
            (4, "message has no value (tombstone)"),
        ]
        assert {(r.topic, r.partition) for r in dead} == {(source, 0)}
        assert [r.raw for r in sorted(dead, key=lambda r: r.offset)][:3] == bad[:3]
        assert all(q.isActive for q in queries), "malformed records never stop the query"
        more = transactions(3, start=START, seed=6, first_id=50)
        kafka.produce(source, [t.to_json() for t in more])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(kafka.records(out)) < 9:
            time.sleep(0.5)
        assert sorted(r["transaction_id"] for r in values(kafka.records(out))) == sorted(
            t.transaction_id for t in good + more
        )
    finally:
        for query in queries:
            query.stop()


def _dead(spark, folder: Path) -> list:
    try:
        return spark.read.json(str(folder)).collect()
    except AnalysisException:
        return []


def test_avro_values_in_and_out_with_the_derived_schema_and_a_malformed_record_dead_lettered(
    spark, project: ProjectDir, kafka, topic, tmp_path: Path
):
    import io

    import fastavro

    from runner.authoring.ddl import parse_ddl
    from runner.core.avro import value_schema

    source, out = topic("in", partitions=2), topic("out")
    project.ddl(
        "tables",
        f"""
        CREATE TABLE `kafka`.`payments` (
          id BIGINT NOT NULL, account STRING, amount DECIMAL(10, 2), ts TIMESTAMP(3), tags ARRAY<STRING>,
          extra MAP<STRING, INT>, card ROW<scheme STRING, last4 INT>
        ) WITH ('connector' = 'kafka', 'topic' = '{source}', 'format' = 'avro',
                'properties.bootstrap.servers' = '{kafka.bootstrap}');
        CREATE TABLE `kafka`.`large` (id BIGINT NOT NULL, account STRING, amount DECIMAL(10, 2), ts TIMESTAMP(3),
          scheme STRING{METADATA_DDL}
        ) WITH ('connector' = 'kafka', 'topic' = '{out}', 'format' = 'avro',
                'properties.bootstrap.servers' = '{kafka.bootstrap}');
        """,
    )
    project.manifest(
        "large-payments",
        """
        name: large-payments
        target-table: "`kafka`.`large`"
        sql: |
          SELECT id, account, amount, ts, card.scheme AS scheme FROM `kafka`.`payments` WHERE amount >= 100
        """,
    )
    tables = {t.parts[-1]: t for t in parse_ddl((project.root / "manifests" / "tables" / "tables.sql").read_text())}
    schema_in = fastavro.parse_schema(value_schema(tables["payments"]))
    from decimal import Decimal

    rows = [
        {
            "id": i,
            "account": f"acct-{i % 3}" if i != 4 else None,
            "amount": Decimal(f"{i * 37 % 250}.{i % 100:02d}"),
            "ts": START + timedelta(seconds=i),
            "tags": ["a", None] if i % 2 else [],
            "extra": {"k": i},
            "card": {"scheme": "visa" if i % 2 else "amex", "last4": 1000 + i},
        }
        for i in range(1, 41)
    ]

    def encode(row: dict) -> bytes:
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, schema_in, row)
        return buffer.getvalue()

    malformed = b"\xff\xff\xff\xff\xff\xff"  # a field length no record can have
    kafka.produce(source, [encode(r) for r in rows[:20]] + [malformed] + [encode(r) for r in rows[20:]])
    prepared, _ = run_once(spark, project, "large-payments", tmp_path / "state")

    schema_out = fastavro.parse_schema(value_schema(tables["large"]))
    got = [fastavro.schemaless_reader(io.BytesIO(r.value), schema_out, None) for r in kafka.records(out)]
    expected = sorted(
        (r["id"], r["account"], r["amount"], r["ts"], r["card"]["scheme"]) for r in rows if r["amount"] >= 100
    )
    assert len(expected) > 5
    assert sorted((g["id"], g["account"], g["amount"], g["ts"], g["scheme"]) for g in got) == expected
    assert {g["__query_name"] for g in got} == {"large-payments"}
    dead = _dead(spark, prepared.dead_letter / "kafka-payments")
    assert [(r.reason, r.raw) for r in dead] == [
        (
            "malformed Avro: the value does not decode with the schema derived from the declared columns",
            "////////",
        )
    ]
