"""Kafka in and out: the same queries through the runner and as hand-written PySpark jobs, side by side,
with the local broker's own ceiling beside them.

    .venv/bin/python bench/kafka.py [--events 500000] [--rounds 3] [--forks 2] [--partitions 4]
                                    [--queries filter,window]

One Kafka broker (``demo/kafka_broker.py``, KRaft, on this machine) for the whole run. Two queries:

- ``filter``: Kafka -> ``amount > 500`` -> Kafka (no key);
- ``window``: Kafka -> a 1-minute tumbling count per account -> a keyed Kafka topic (update mode).

Each query has two sides, each a long-running job with its own input and output topics of
``--partitions`` partitions: ``sql-runner run`` of a manifest (every record checked against the declared
schema, malformed ones to the dead letters), and a hand-written PySpark job doing the same work with the
same connector (``from_json`` in PERMISSIVE mode with a corrupt-record column, the malformed left out), the
same six metadata columns and the same output records (JSON value, the key for the window). Both read with
``isolation.level=read_committed``: a round writes its tranche of ``--events`` card transactions into one
side's input topic in one Kafka transaction, so the whole tranche appears at once, as the file benchmark
renames a tranche's files into place; the side's micro-batches that then run are its round, and its
throughput is the tranche's events over their trigger time (from its progress). Sides go one after
another, the first alternating from round to round; each side first settles on a warm-up tranche and one
unmeasured round. ``--forks`` pairs of new processes, ``--rounds`` rounds each.

The broker's ceiling on this machine, for the same records: Kafka's own ``kafka-producer-perf-test``
(``org.apache.kafka.tools.ProducerPerformance``) writing them, and ``kafka-consumer-perf-test`` reading
them back, with no Spark running: what any job here could at most move.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import overhead, results, steady  # noqa: E402
from bench.overhead import METADATA, hand_written_submit  # noqa: E402
from demo.kafka_broker import KafkaBroker, KafkaClient  # noqa: E402
from runner.core import jars  # noqa: E402

TRIGGER = "1 second"
ACCOUNTS = 200
PAYEES = ("grocer", "airline", "bookshop", "cafe", "electronics", "pharmacy", "hotel", "taxi")
KEYS = {"filter": (), "window": ("account_id", "window_start")}  # the PRIMARY KEY of each query's target
# overhead.py's filter and window (SQL, target columns), each with its target's key
QUERIES = {name: (*overhead.QUERIES[name], keys) for name, keys in KEYS.items()}
HANDWRITTEN = (
    """
import json, sys, time, uuid
from datetime import datetime, timezone
from pyspark.sql import SparkSession, functions as F
bootstrap, source, target, checkpoint, sql, trigger, keys = sys.argv[1:8]
spark = SparkSession.builder.getOrCreate()
schema = "transaction_id STRING, account_id STRING, payee STRING, amount DOUBLE, ts TIMESTAMP, _corrupt_record STRING"
raw = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", source)
       .option("startingOffsets", "earliest").option("kafka.isolation.level", "read_committed").load())
record = F.from_json(F.col("value").cast("string"), schema, {"mode": "PERMISSIVE",
                     "columnNameOfCorruptRecord": "_corrupt_record"})
tx = (raw.select(record.alias("r")).select("r.*").where("_corrupt_record IS NULL").drop("_corrupt_record")
      .withWatermark("ts", "5 seconds"))
tx.createOrReplaceTempView("tx")
created = datetime(2026, 1, 1, tzinfo=timezone.utc)
result = spark.sql(sql.replace("`bench`.", "")).select(
    "*",
    F.current_timestamp().alias("__create_timestamp"),
    F.lit("q").alias("__query_name"),
    F.lit("bench query").alias("__query_description"),
    F.lit(str(uuid.uuid4())).alias("__query_id"),
    F.lit(1).alias("__query_version"),
    F.lit(created).alias("__query_create_timestamp"),
)
key_columns = [k for k in keys.split(",") if k]
key = F.to_json(F.struct(*key_columns)) if key_columns else F.lit(None).cast("string")
records = result.select(key.alias("key"), F.to_json(F.struct(*[F.col(c) for c in result.columns])).alias("value"))
query = (records.writeStream.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", target)
         .option("checkpointLocation", checkpoint).trigger(processingTime=trigger)
         .outputMode("update" if key_columns else "append").start())
"""
    + overhead.PRINT_PROGRESS
)


def tranche(count: int, seed: int, first: int) -> list[bytes]:
    """``count`` JSON card transactions, seconds apart in event time, ids from ``first``."""
    rng = random.Random(seed)
    base = 1_767_225_600 + first  # 2026-01-01T00:00:00Z, then one event a second
    payees = len(PAYEES)
    found = []
    for i in range(count):
        second = base + i
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        found.append(
            (
                f'{{"transaction_id":"tx-{first + i:09d}","account_id":"acct-{rng.randrange(ACCOUNTS):04d}",'
                f'"payee":"{PAYEES[rng.randrange(payees)]}","amount":{round(rng.uniform(1, 1000), 2)},'
                f'"ts":"{stamp}.000Z"}}'
            ).encode()
        )
    return found


def hand_over(kafka: KafkaClient, topic: str, records: list[bytes]) -> None:
    """Write ``records`` into ``topic`` in one transaction: a read_committed reader sees all of them at once."""
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": kafka.bootstrap,
            "transactional.id": f"bench-{uuid.uuid4().hex}",
            "linger.ms": 20,
            "batch.size": 1 << 20,
            "log_level": 3,
        }
    )
    producer.init_transactions(60)
    producer.begin_transaction()
    for value in records:
        while True:
            try:
                producer.produce(topic, value=value)
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush(120)
    producer.commit_transaction(120)


def ours(folder: Path, kafka: KafkaClient, query: str, source: str, target: str) -> steady.Side:
    project = folder / "ours"
    (project / "manifests" / "tables").mkdir(parents=True)
    sql, columns, keys = QUERIES[query]
    key = f", PRIMARY KEY ({', '.join(keys)}) NOT ENFORCED" if keys else ""
    common = f"'format' = 'json', 'properties.bootstrap.servers' = '{kafka.bootstrap}'"
    (project / "manifests" / "tables" / "tables.sql").write_text(
        f"CREATE TABLE `bench`.`tx` (transaction_id STRING, account_id STRING, payee STRING, amount DOUBLE, "
        f"ts TIMESTAMP(3), WATERMARK FOR ts AS ts - INTERVAL '5' SECOND) WITH ('connector' = 'kafka', "
        f"'topic' = '{source}', {common}, 'properties.isolation.level' = 'read_committed');\n"
        f"CREATE TABLE `bench`.`out` ({columns}{METADATA}{key}) WITH ('connector' = 'kafka', 'topic' = '{target}', "
        f"{common});\n"
    )
    (project / "manifests" / "job-template.yaml").write_text((ROOT / "manifests" / "job-template.yaml").read_text())
    (project / "manifests" / "q.yaml").write_text(
        f'name: q\ndescription: bench query\ntarget-table: "`bench`.`out`"\nsql: "{sql}"\n'
        f"trigger-interval: {TRIGGER}\nsparkProperties:\n  spark.driver.memory: 2g\n"
    )
    return steady.runner_job("ours", project, "q", {})


def by_hand(folder: Path, kafka: KafkaClient, query: str, source: str, target: str) -> steady.Side:
    here = folder / "by-hand"
    here.mkdir(parents=True)
    script = here / "handwritten.py"
    script.write_text(HANDWRITTEN)
    sql, _, keys = QUERIES[query]
    args = [
        *hand_written_submit(str(here / "checkpoint")),
        str(script),
        kafka.bootstrap,
        source,
        target,
        str(here / "checkpoint"),
        sql,
        TRIGGER,
        ",".join(keys),
    ]
    return steady.Side("by hand", args, here, {}, lambda: None, steady.printed_progress)


def processed(side: steady.Side, since: int | None, events: int, timeout: float) -> list[dict]:
    """Wait until ``side``'s micro-batches after batch ``since`` read ``events`` records and no batch has run
    for ``steady.IDLE_SECONDS`` since (a watermark's batch with no data counts in the round); those batches."""
    deadline = time.monotonic() + timeout
    quiet_since, last = None, None
    while True:
        if not side.alive():
            raise side.fail("exited during a round")
        if time.monotonic() > deadline:
            raise side.fail(f"did not read {events} records within {timeout:.0f}s")
        batches = [p for p in side.progress(side) if since is None or p["batch"] > since]
        if batches and since is not None and batches[0]["batch"] > since + 1:
            raise side.fail(f"its progress no longer holds batch {since + 1} (too many batches in a round)")
        newest = batches[-1]["batch"] if batches else None
        if newest != last:
            quiet_since, last = time.monotonic(), newest
        read = sum(p.get("input-rows") or 0 for p in batches)
        if read >= events and time.monotonic() - (quiet_since or 0) >= steady.IDLE_SECONDS:
            return batches
        time.sleep(steady.POLL_SECONDS)


def round_of(side: steady.Side, kafka: KafkaClient, topic: str, records: list[bytes], timeout: float) -> float:
    """Hand ``records`` to ``side``; its events per second over the batches' time (CPU left in ``side.cpu``)."""
    assert side.process is not None
    since = steady.last_batch(side)
    before = steady.group_cpu(side.process.pid)
    hand_over(kafka, topic, records)
    batches = processed(side, since, len(records), timeout)
    side.cpu = steady.group_cpu(side.process.pid) - before
    return len(records) / steady.batch_seconds(batches)


def perf_tool(main: str, *args: str) -> str:
    classpath = os.pathsep.join(str(p) for p in jars.present(jars.BROKER))
    command = ["java", "-Xmx512m", "-cp", classpath, "-Dlog4j.configuration=file:/dev/null", main, *args]
    return subprocess.run(command, capture_output=True, text=True, check=True, timeout=600).stdout


def ceiling(kafka: KafkaClient, partitions: int, events: int, sample: list[bytes]) -> list[results.Record]:
    """Kafka's own perf tools on this machine, with records of the tranches' size, three rounds each."""
    size = round(statistics.mean(len(v) for v in sample))
    produced, consumed = [], []
    for attempt in range(3):
        topic = kafka.create_topic(f"ceiling-{attempt}", partitions)
        out = perf_tool(
            "org.apache.kafka.tools.ProducerPerformance",
            "--topic", topic, "--num-records", str(events), "--record-size", str(size), "--throughput", "-1",
            "--producer-props", f"bootstrap.servers={kafka.bootstrap}", "acks=1", "linger.ms=20",
            "batch.size=1048576",
        )  # fmt: skip
        produced.append(float(re.findall(r"records sent, ([\d.]+) records/sec", out)[-1]))
        out = perf_tool(
            "org.apache.kafka.tools.ConsumerPerformance",
            "--bootstrap-server", kafka.bootstrap, "--topic", topic, "--messages", str(events),
            "--timeout", "60000",
        )  # fmt: skip
        consumed.append(float(out.strip().splitlines()[-1].split(",")[5]))
    return [
        results.measured(f"broker ceiling: kafka-producer-perf-test, {size}-byte records", produced, "records/s"),
        results.measured(f"broker ceiling: kafka-consumer-perf-test, {size}-byte records", consumed, "records/s"),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=500_000, help="events per round and side")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--forks", type=int, default=2)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--queries", default="filter,window")
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args()
    queries = [q.strip() for q in args.queries.split(",") if q.strip()]
    unknown = [q for q in queries if q not in QUERIES]
    if unknown or not queries:
        parser.error(f"--queries: unknown {', '.join(unknown) or 'none given'}; one or more of {', '.join(QUERIES)}")
    if min(args.events, args.rounds, args.forks, args.partitions) < 1:
        parser.error("--events, --rounds, --forks and --partitions must be at least 1")
    missing = jars.missing(jars.SPARK) + jars.missing(jars.BROKER)
    if missing:
        parser.error(f"the jar cache lacks {len(missing)} jars (e.g. {missing[0]}): run `{jars.FETCH_COMMAND}`")

    records: list[results.Record] = []
    with tempfile.TemporaryDirectory(prefix="bench-kafka-") as tmp, KafkaBroker(Path(tmp) / "broker") as broker:
        kafka = broker.client()
        warm_up = tranche(args.events // 2, seed=1, first=0)
        records += ceiling(kafka, args.partitions, args.events, warm_up)
        print(results.table(records), flush=True)
        serial = 1
        for query in queries:
            rates: dict[str, list[float]] = {"ours": [], "by hand": []}
            cpu: dict[str, list[float]] = {"ours": [], "by hand": []}
            for fork in range(args.forks):
                folder = Path(tmp) / f"{query}-{fork}"
                topics = {
                    side: (kafka.create_topic(f"{query}-{fork}-{side}-in", args.partitions),
                           kafka.create_topic(f"{query}-{fork}-{side}-out", args.partitions))
                    for side in ("ours", "hand")
                }  # fmt: skip
                sides = [
                    ours(folder, kafka, query, *topics["ours"]),
                    by_hand(folder, kafka, query, *topics["hand"]),
                ]
                inputs = {"ours": topics["ours"][0], "by hand": topics["hand"][0]}
                try:
                    for side in sides:
                        hand_over(kafka, inputs[side.name], warm_up)
                        side.start()
                    for side in sides:
                        processed(side, None, len(warm_up), args.timeout)
                    for number in range(args.rounds + 1):  # the first: one more to settle, not measured
                        events = tranche(args.events, seed=1000 + serial, first=serial * 10_000_000)
                        serial += 1
                        order = sides if (fork + number) % 2 == 0 else sides[::-1]
                        measured = {side.name: round_of(side, kafka, inputs[side.name], events, args.timeout)
                                    for side in order}  # fmt: skip
                        if number == 0:
                            continue
                        for side in sides:
                            rates[side.name].append(measured[side.name])
                            cpu[side.name].append(args.events / side.cpu if side.cpu else 0.0)
                        print(
                            f"{query} fork {fork + 1} round {number}: ours {measured['ours']:,.0f} events/s, "
                            f"by hand {measured['by hand']:,.0f} events/s",
                            flush=True,
                        )
                finally:
                    steady.stop_all(sides)
            sink = "keyed Kafka" if QUERIES[query][2] else "Kafka"
            records.append(
                results.record(
                    f"Kafka -> {query} -> {sink}: events/s vs by hand, same checks",
                    list(zip(rates["ours"], rates["by hand"], strict=True)),
                    "events/s",
                )
            )
            records.append(
                results.record(
                    f"Kafka -> {query} -> {sink}: events per CPU second vs by hand, same checks",
                    list(zip(cpu["ours"], cpu["by hand"], strict=True)),
                    "events/CPU s",
                )
            )
            print(results.table(records), flush=True)
    path = results.write("kafka", records)
    print(f"\n{results.table(records)}\nwritten to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
