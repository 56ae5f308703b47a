"""A job's sink writes the micro-batch as Spark hands it to its own sinks, and only when that is safe."""

from __future__ import annotations

import json
import threading
from collections import Counter
from pathlib import Path

import pytest

from demo.committed_rows import committed_json_rows
from jobs.filesink import file_sink_writer
from jobs.runtime import streamed
from tests.conftest import plan_nodes

pytestmark = pytest.mark.spark


def test_the_file_sink_writes_the_batchs_own_plan_and_anything_else_is_left_as_it_is(spark, tmp_path: Path):
    source, table, checkpoint = tmp_path / "in", tmp_path / "table", tmp_path / "checkpoint"
    source.mkdir()
    (source / "a.json").write_text("".join(json.dumps({"id": i, "k": i % 3}) + "\n" for i in range(50)))
    frame = spark.readStream.schema("id BIGINT, k BIGINT").json(str(source)).where("k > 0")
    writer = file_sink_writer(spark, checkpoint=str(checkpoint), fmt="json", path=str(table))
    bound, seen, box = threading.Event(), [], {}

    def write(batch, batch_id):
        bound.wait()
        execution = box["query"]._jsq.streamingQuery().lastExecution()
        given = streamed(spark, batch, execution)
        plain = spark.range(3)
        seen.append(
            {
                "same execution": given._jdf.queryExecution().equals(execution),
                "written": plan_nodes(given._jdf.queryExecution().executedPlan()),
                "wrapped": plan_nodes(batch._jdf.queryExecution().executedPlan()),
                # not this batch's rows as foreachBatch wraps them: left as they are
                "plain kept": streamed(spark, plain, execution) is plain,
                "other execution kept": streamed(spark, batch, batch._jdf.queryExecution()) is batch,
            }
        )
        writer(given, batch_id)

    query = (
        frame.writeStream.foreachBatch(write)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    box["query"] = query
    bound.set()
    query.awaitTermination()

    assert len(seen) == 1
    batch = seen[0]
    # foreachBatch hands over the rows through a scan of an RDD (a copy of every row); the sink is
    # given the batch's own plan, which reads the files itself
    assert "RDDScanExec" in batch["wrapped"] and "FileSourceScanExec" not in batch["wrapped"]
    assert batch["same execution"]
    assert "FileSourceScanExec" in batch["written"] and "RDDScanExec" not in batch["written"]
    assert batch["plain kept"] and batch["other execution kept"]
    # and what the file table commits is exactly the batch's rows
    assert Counter(row["id"] for row in committed_json_rows(table)) == Counter(i for i in range(50) if i % 3)
