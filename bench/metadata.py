"""The six metadata columns on their own: a rate source into the noop sink, with and without them.

    .venv/bin/python bench/metadata.py [--rows-per-batch 2000000] [--batches 5] [--rounds 3]

One local Spark (local[2]); each round runs three sides, one after the other (the order
rotates): ``rate-micro-batch`` rows into ``noop`` through ``jobs.metadata.with_metadata``
(the columns every job adds), through the same six columns written by hand as a Spark user
would (``F.current_timestamp()`` and ``F.lit``: Spark's floor for adding them), and with no
columns added (what they cost at all). Throughput is Spark's own processed rows per
second over the round's batches (the first batch of each run warms up and is left out).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import results  # noqa: E402

CREATED = datetime(2026, 1, 1, tzinfo=UTC)
SIDES = ("ours", "by hand", "none")


def rows_per_second(spark, side: str, rows: int, batches: int, checkpoint: str) -> float:
    from pyspark.sql import functions as F

    from jobs.metadata import with_metadata
    from runner.core.manifest import Manifest, Meta

    frame = spark.readStream.format("rate-micro-batch").option("rowsPerBatch", rows).option("numPartitions", 2).load()
    if side == "ours":
        manifest = Manifest.model_validate(
            {"name": "bench", "target-table": "t", "sql": "SELECT 1", "description": "metadata bench"}
        ).model_copy(update={"meta": Meta(query_id="id", query_version=1, query_create_timestamp=CREATED)})
        frame = with_metadata(frame, manifest)
    elif side == "by hand":
        frame = frame.select(
            "*",
            F.current_timestamp().alias("__create_timestamp"),
            F.lit("bench").alias("__query_name"),
            F.lit("metadata bench").alias("__query_description"),
            F.lit("id").alias("__query_id"),
            F.lit(1).alias("__query_version"),
            F.lit(CREATED).alias("__query_create_timestamp"),
        )
    query = frame.writeStream.format("noop").option("checkpointLocation", checkpoint).start()
    try:
        while len([p for p in query.recentProgress if p.numInputRows]) < batches + 1:
            query.awaitTermination(0.2)
            if query.exception():
                raise query.exception()
    finally:
        query.stop()
    progress = [p for p in query.recentProgress if p.numInputRows][1 : batches + 1]  # the first warms up
    total = sum(p.numInputRows for p in progress)
    millis = sum(p.durationMs.get("triggerExecution", 0) for p in progress)
    return total / millis * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows-per-batch", type=int, default=2_000_000)
    parser.add_argument("--batches", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    from runner.analysis.session import local_session

    spark = local_session("metadata-bench")
    spark.sparkContext.setLogLevel("OFF")  # stopping a query mid-batch logs its aborted tasks
    measured: dict[str, list[float]] = {side: [] for side in SIDES}
    with tempfile.TemporaryDirectory(prefix="metadata-bench-") as tmp:
        for round_ in range(args.rounds):
            order = SIDES[round_ % 3 :] + SIDES[: round_ % 3]
            for side in order:
                checkpoint = f"{tmp}/{round_}-{side.replace(' ', '-')}"
                measured[side].append(rows_per_second(spark, side, args.rows_per_batch, args.batches, checkpoint))
            print(f"round {round_ + 1}: " + ", ".join(f"{s} {measured[s][-1]:,.0f}" for s in SIDES), flush=True)
    spark.stop()
    records = [
        results.record(
            "metadata columns, ours vs by hand (rate -> noop): rows/s",
            list(zip(measured["ours"], measured["by hand"], strict=True)),
            "rows/s",
        ),
        results.record(
            "metadata columns, ours vs none (rate -> noop): rows/s",
            list(zip(measured["ours"], measured["none"], strict=True)),
            "rows/s",
        ),
    ]
    print(results.table(records))
    print(f"written to {results.write('metadata', records)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
