"""File tables written by more than one checkpoint: no batch dropped, none written twice."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest

from demo.committed_rows import committed_json_rows
from jobs.filesink import BASE_FILE, batch_base, file_sink_writer, latest_batch

pytestmark = pytest.mark.spark


def write_input(folder: Path, name: str, ids: range) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text("".join(json.dumps({"id": i}) + "\n" for i in ids))


def run_once(spark, source: Path, table: Path, checkpoint: Path) -> None:
    """Everything new in ``source``, written to the file table through one checkpoint."""
    frame = spark.readStream.schema("id BIGINT").json(str(source))
    writer = file_sink_writer(spark, checkpoint=str(checkpoint), fmt="json", path=str(table))
    query = (
        frame.writeStream.foreachBatch(writer)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()


def ids(table: Path) -> Counter:
    return Counter(row["id"] for row in committed_json_rows(table))


def test_a_fresh_checkpoint_continues_the_tables_log_and_replays_stay_exactly_once(spark, tmp_path: Path):
    table, first, second = tmp_path / "table", tmp_path / "in-v1", tmp_path / "in-v2"
    write_input(first, "a.json", range(0, 3))
    run_once(spark, first, table, tmp_path / "cp-v1")
    write_input(first, "b.json", range(3, 6))
    run_once(spark, first, table, tmp_path / "cp-v1")
    assert latest_batch(spark, str(table)) == 1
    assert json.loads((tmp_path / "cp-v1" / BASE_FILE).read_text())["batch-base"] == 0

    # a new checkpoint (a new version with clean state) over the same table: Spark's own sink
    # would count from batch 0 again and skip its first two batches as "already committed"
    write_input(second, "c.json", range(6, 9))
    run_once(spark, second, table, tmp_path / "cp-v2")
    assert json.loads((tmp_path / "cp-v2" / BASE_FILE).read_text())["batch-base"] == 2
    assert ids(table) == Counter(range(9))
    assert latest_batch(spark, str(table)) == 2

    # a crash after the table's log took the batch, before the checkpoint's commit:
    # the replayed batch maps to the same log entry and is not written again
    (tmp_path / "cp-v2" / "commits" / "0").unlink()
    run_once(spark, second, table, tmp_path / "cp-v2")
    assert ids(table) == Counter(range(9))
    assert latest_batch(spark, str(table)) == 2

    # a restored copy of the checkpoint keeps its base, and carries on after it
    shutil.copytree(tmp_path / "cp-v2", tmp_path / "cp-v2-restored")
    write_input(second, "d.json", range(9, 12))
    run_once(spark, second, table, tmp_path / "cp-v2-restored")
    assert ids(table) == Counter(range(12))
    assert latest_batch(spark, str(table)) == 3


def test_a_checkpoint_with_batches_but_no_base_file_was_written_with_base_zero(spark, tmp_path: Path):
    table, source = tmp_path / "table", tmp_path / "in"
    write_input(source, "a.json", range(3))
    run_once(spark, source, table, tmp_path / "cp")
    (tmp_path / "cp" / BASE_FILE).unlink()
    assert batch_base(spark, str(tmp_path / "cp"), str(table)) == 0
    assert not (tmp_path / "cp" / BASE_FILE).exists(), "an existing checkpoint's mapping is not rewritten"
    assert batch_base(spark, str(tmp_path / "new"), str(table)) == 1
    assert batch_base(spark, str(tmp_path / "new"), str(tmp_path / "no-table-yet")) == 1, "decided once, then kept"
