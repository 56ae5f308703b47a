"""A new version continues where the previous one stopped, from the state Spark wrote."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from demo.transactions import transactions, write_batch
from jobs import sources
from jobs.connectors import read_table
from runner.authoring.project import load_project
from runner.core.bucket import LocalBucket
from runner.core.starts import SkipFiles
from runner.state.continuation import committed, kafka_offsets, plan_starts
from tests.conftest import ProjectDir

START = datetime(2026, 1, 1, tzinfo=UTC)


def write_offset_log(spark, checkpoint: Path, batch: int, offsets: list[str | None], commit: bool) -> None:
    """Offsets and commits written by Spark's own log classes, as a Kafka query would leave them."""
    jvm = spark._jvm
    streaming = jvm.org.apache.spark.sql.execution.streaming
    log = streaming.OffsetSeqLog(spark._jsparkSession, str(checkpoint / "offsets"))
    serialized = [streaming.SerializedOffset(o) if o else None for o in offsets]
    from py4j.java_collections import ListConverter

    gateway = spark.sparkContext._gateway._gateway_client
    java_list = ListConverter().convert([o for o in serialized if o is not None], gateway)
    log.add(batch, streaming.OffsetSeq.fill(jvm.scala.jdk.javaapi.CollectionConverters.asScala(java_list).toSeq()))
    if commit:
        commits = streaming.CommitLog(spark._jsparkSession, str(checkpoint / "commits"))
        commits.add(batch, streaming.CommitMetadata(0, getattr(getattr(jvm.scala, "None$"), "MODULE$")))


def test_kafka_sources_continue_from_the_last_committed_offsets(spark, tmp_path: Path):
    checkpoint = tmp_path / "bucket" / "run"
    write_offset_log(spark, checkpoint, 0, ['{"transactions":{"0":10,"1":7}}'], commit=True)
    write_offset_log(spark, checkpoint, 1, ['{"transactions":{"0":42,"1":17}}'], commit=True)
    write_offset_log(spark, checkpoint, 2, ['{"transactions":{"0":50,"1":20}}'], commit=False)  # in flight
    bucket = LocalBucket(tmp_path / "bucket")
    found = committed(bucket, "run/")
    assert found.batch == 1
    assert kafka_offsets(found, ["transactions"]) == {"transactions": {"0": 42, "1": 17}}
    assert kafka_offsets(found, ["other-topic"]) is None


def test_kafka_sources_over_topic_lists_and_patterns_continue_per_topic_partition(spark, tmp_path: Path):
    """A query reading a topic list and a pattern: each table gets every topic-partition its own source
    committed, never the other source's."""
    checkpoint = tmp_path / "bucket" / "run"
    listed = '{"cards":{"0":5,"1":6},"wires":{"0":9}}'
    matched = '{"risk.eu":{"0":3},"risk.us":{"0":4,"1":1}}'
    single = '{"cards":{"0":2,"1":2}}'
    write_offset_log(spark, checkpoint, 0, [single, listed, matched], commit=True)
    found = committed(LocalBucket(tmp_path / "bucket"), "run/")
    assert kafka_offsets(found, ["cards", "wires"]) == json.loads(listed), "the source reading exactly both"
    assert kafka_offsets(found, ["cards"]) == json.loads(single)
    assert kafka_offsets(found, [], r"risk\..*") == json.loads(matched)
    assert kafka_offsets(found, [], r"fraud\..*") is None
    assert kafka_offsets(found, ["wires", "cards", "new-topic"]) == json.loads(listed), "a topic not yet read"


def test_a_continued_kafka_source_starts_from_exactly_the_partitions_assigned_now():
    from jobs.kafka import EARLIEST, complete_offsets

    committed_offsets = {"cards": {"0": 5, "1": 6}, "old": {"0": 1}}
    offsets, notes = complete_offsets(committed_offsets, {"cards": [0, 1, 2], "new": [0]})
    assert offsets == {"cards": {"0": 5, "1": 6, "2": EARLIEST}, "new": {"0": EARLIEST}}
    assert notes == [
        "cards partition 2 is new since the previous version: read from its start",
        "new partition 0 is new since the previous version: read from its start",
        "old partitions 0 are no longer assigned: not read",
    ]
    assert complete_offsets(committed_offsets, {"cards": [0, 1]}) == (
        {"cards": {"0": 5, "1": 6}},
        ["old partitions 0 are no longer assigned: not read"],
    )


def test_a_file_source_continues_after_the_files_the_previous_version_read(
    spark, demo_project: ProjectDir, tmp_path: Path
):
    events = demo_project.root / "data" / "in"
    first = transactions(10, start=START, seed=1)
    write_batch(events, "b1", first)
    write_batch(events, "b2", transactions(10, start=START, seed=2, first_id=10))
    catalog = load_project(demo_project.root).catalog
    table = catalog.lookup_name("`demo`.`card-transactions`")
    bucket = LocalBucket(tmp_path / "checkpoints")

    def run(checkpoint: str, out: str, start: SkipFiles | None = None) -> list[str]:
        frame = sources.valid_rows(read_table(spark, table, {}, start), table)
        query = (
            frame.select("transaction_id")
            .writeStream.format("json")
            .option("path", str(tmp_path / out))
            .option("checkpointLocation", bucket.uri(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        return sorted(r.transaction_id for r in spark.read.json(str(tmp_path / out)).collect())

    old = run("checkpoints/job/1/run-a/", "v1")
    assert len(old) == 20
    later = transactions(10, start=START, seed=3, first_id=20)
    write_batch(events, "b3", later)
    plan = plan_starts(bucket, bucket, "checkpoints/job/1/run-a/", [table], "job", 2, {})
    start = plan.starts["main"][table.name]
    assert isinstance(start, SkipFiles) and start.count == 2
    assert "skips the 2 files read up to batch 0" in plan.notes[0]
    new = run("checkpoints/job/2/run-b/", "v2", start)
    assert new == sorted(t.transaction_id for t in later), "v2 reads exactly the file v1 did not"
    listed = [json.loads(line)["path"] for line in Path(start.uri).read_text().splitlines()]
    assert sorted(Path(p.removeprefix("file:")).name for p in listed) == ["b1.json", "b2.json"]
    assert not set(old) & set(new)
