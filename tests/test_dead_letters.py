"""Dead letters come from the same read of a source as the good rows, exactly once.

- Read once: a `run --once` over three files, one with malformed records, each its own
  micro-batch, with Spark's event log on: the bytes Spark's tasks read are the clean files
  once and the file with malformed records twice (its batch's input read again to take
  them out), not every file twice as a second query would.
- Exactly once through a crash in the window between the two outputs (deterministic: the
  job fails right after its output is committed, then after both are), and under kill -9
  of the whole job at the moment its output gains a batch, resumed by `deploy`.
"""

from __future__ import annotations

import json
import os
import signal
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from demo.committed_rows import committed_json_rows
from demo.transactions import transactions, write_batch
from jobs import deadletters, runtime, sources
from runner.core.bucket import LocalBucket
from runner.state import deadletters as stored_dead_letters
from tests.clihelpers import START, cli, status, wait_for
from tests.conftest import ProjectDir
from tests.jobhelpers import output_rows, run_once, run_published

pytestmark = pytest.mark.spark

ONE_FILE_PER_BATCH = ", 'source.max-files-per-trigger' = '1')"
DEAD = "demo-card-transactions"


def malformed(tag: str) -> tuple[str, ...]:
    """Three malformed records, told apart by ``tag``: a wrong type, not JSON, a NOT NULL field missing."""
    return (
        f'{{"transaction_id": "{tag}-1", "account_id": "acct-1", "amount": "twelve", "ts": "2026-01-01T00:00:00Z"}}',
        f"{tag}: this is not json",
        f'{{"transaction_id": "{tag}-3", "payee": "cafe", "amount": 12.5, "ts": "2026-01-01T00:00:00Z"}}',
    )


def keys(raws: list[str]) -> list[str]:
    """Each dead letter's record: its transaction id, or its text when it is not JSON (a record that
    is missing a NOT NULL field is written back as Spark reads it, so not byte for byte)."""
    found = []
    for raw in raws:
        try:
            found.append(json.loads(raw)["transaction_id"])
        except ValueError:
            found.append(raw)
    return sorted(found)


def expected_keys(*tags: str) -> list[str]:
    return sorted(k for tag in tags for k in (f"{tag}-1", f"{tag}: this is not json", f"{tag}-3"))


@pytest.fixture
def batched(demo_project: ProjectDir) -> ProjectDir:
    """The demo project reading one file per micro-batch."""
    ddl = demo_project.root / "manifests" / "tables" / "tables.sql"
    text = ddl.read_text()
    source = "'path' = 'data/in', 'format' = 'json')"
    assert source in text
    ddl.write_text(text.replace(source, source[:-1] + ONE_FILE_PER_BATCH, 1))
    return demo_project


def task_bytes_read(event_logs: Path) -> int:
    """Bytes Spark's tasks read from input files, from the application's event log."""
    total = 0
    for log in (path for path in event_logs.rglob("*") if path.is_file() and path.name.startswith("events_")):
        for line in log.read_text().splitlines():
            event = json.loads(line)
            if event.get("Event") == "SparkListenerTaskEnd":
                total += ((event.get("Task Metrics") or {}).get("Input Metrics") or {}).get("Bytes Read", 0)
    return total


@pytest.mark.e2e
def test_each_micro_batch_reads_its_source_once_and_malformed_records_come_from_that_input(
    batched: ProjectDir, tmp_path: Path
):
    project = batched
    events = project.root / "data" / "in"
    clean_1 = transactions(30, start=START, seed=1)
    mixed = transactions(20, start=START, seed=2, first_id=100)
    clean_2 = transactions(30, start=START, seed=3, first_id=200)
    files = [
        write_batch(events, "a", clean_1),
        write_batch(events, "b", mixed, malformed("b")),
        write_batch(events, "c", clean_2),
    ]
    logs = tmp_path / "event-logs"
    logs.mkdir()
    manifest = project.root / "manifests" / "high-value.yaml"
    manifest.write_text(
        manifest.read_text()
        + f"sparkProperties:\n  spark.eventLog.enabled: 'true'\n  spark.eventLog.dir: 'file://{logs}'\n"
        + "  spark.eventLog.compress: 'false'\n"
    )
    result = cli(project, "run", "manifests/high-value.yaml", "--once")
    assert "3 malformed records dead-lettered" in result.stdout

    good = clean_1 + mixed + clean_2
    expected = sorted(t.transaction_id for t in good if t.amount > 500)
    assert sorted(r["transaction_id"] for r in committed_json_rows(project.root / "data" / "out")) == expected
    dead = committed_json_rows(project.root / ".sql-runner" / "checkpoints" / "dead-letter" / "high-value" / DEAD)
    assert keys([r["raw"] for r in dead]) == expected_keys("b")
    # what the console counts and shows: the same records, read back from the sink's log without Spark
    checkpoints = LocalBucket(project.root / ".sql-runner" / "checkpoints")
    recent = stored_dead_letters.files(checkpoints, "high-value", datetime.now(UTC) - timedelta(hours=1))
    shown = stored_dead_letters.records(checkpoints, recent)
    assert sorted(r["raw"] for r in shown) == sorted(r["raw"] for r in dead) and all(r["reason"] for r in shown)
    assert stored_dead_letters.files(checkpoints, "high-value", datetime.now(UTC) + timedelta(minutes=1)) == []
    sizes = [f.stat().st_size for f in files]
    # A second query per source would read every file twice: 2 * sum(sizes).
    assert task_bytes_read(logs) == sizes[0] + 2 * sizes[1] + sizes[2]


def test_a_micro_batch_of_four_lines_one_malformed_shows_four_input_rows(batched: ProjectDir, spark, tmp_path: Path):
    """The batch's malformed record is taken from its input read again (a copy of the plan below the first
    tap): Spark's progress, and the status published from it, count each line once, as in a clean batch."""
    events = batched.root / "data" / "in"
    write_batch(events, "mixed", transactions(3, start=START, seed=1), malformed("m")[:1])
    write_batch(events, "clean", transactions(10, start=START, seed=2, first_id=100))
    prepared, status, _ = run_published(spark, batched, "high-value", tmp_path / "state")
    batches = [(p["input-rows"], [s["input-rows"] for s in p["sources"]]) for p in status["recent-progress"]]
    assert sorted(batches) == [(4, [4]), (10, [10])]  # the files' order is Spark's
    dead = output_rows(spark, prepared.dead_letter / DEAD)
    assert keys([r.raw for r in dead]) == ["m-1"]


def test_taps_are_counted_where_the_last_batch_had_them_and_found_again_when_the_plan_moves_them(spark):
    """A micro-batch's taps are looked up where the previous batch's plan had them; a plan that holds
    them elsewhere, or not at all, still gets its own counts."""
    read, other = sources.tap_marker(0, sources.ROWS_READ), sources.tap_marker(1, sources.ROWS_READ)
    places: dict[str, int] = {}

    def taps(frame):
        execution = frame._jdf.queryExecution()
        execution.toRdd().count()  # run it, as a micro-batch is run before its taps are read
        return deadletters.Taps(execution.executedPlan(), places)

    first = taps(sources.tap(spark.range(10), read).where("id > 3"))
    assert first.rows(read) == 10 and read in places
    same = taps(sources.tap(spark.range(25), read).where("id > 3"))
    assert same.rows(read) == 25
    assert same.walked is None  # found at its place: no walk over the plan
    moved = taps(sources.tap(sources.tap(spark.range(7), read).where("id > 3"), other))
    assert (moved.rows(read), moved.rows(other)) == (7, 3)
    assert moved.walked is not None
    assert taps(spark.range(5).where("id > 3")).rows(read) is None
    again = taps(sources.tap(sources.tap(spark.range(9), read).where("id > 3"), other))
    assert (again.rows(read), again.rows(other)) == (9, 5)
    assert again.walked is None


class Crash(RuntimeError):
    pass


@pytest.mark.parametrize("moment", ["after the output", "after both outputs"])
def test_a_crash_between_or_after_the_two_outputs_leaves_both_exact(
    spark, batched: ProjectDir, tmp_path: Path, monkeypatch, moment: str
):
    project = batched
    events = project.root / "data" / "in"
    clean = transactions(20, start=START, seed=5)
    mixed = transactions(20, start=START, seed=6, first_id=100)
    write_batch(events, "a", clean)
    write_batch(events, "b", mixed, malformed("b"))

    calls = {"n": 0}
    if moment == "after the output":

        def crashing_entry(self, batch_id):  # the output of the batch is committed, its dead letters are not
            calls["n"] += 1
            raise Crash("killed before the dead letters")

        monkeypatch.setattr(deadletters.DeadLetterTable, "_entry", crashing_entry)
    else:
        original = runtime.BatchWriter.__call__

        def crashing_call(self, batch, batch_id):  # both written, the batch not committed by Spark
            original(self, batch, batch_id)
            if self.counts.dead_lettered:
                calls["n"] += 1
                raise Crash("killed before Spark commits the batch")

        monkeypatch.setattr(runtime.BatchWriter, "__call__", crashing_call)
    with pytest.raises(Exception, match="killed before"):
        run_once(spark, project, "high-value", tmp_path / "state")
    assert calls["n"] == 1
    monkeypatch.undo()

    out = project.root / "data" / "out"
    prepared, _ = run_once(spark, project, "high-value", tmp_path / "state")  # resumes the checkpoint
    dead = output_rows(spark, prepared.dead_letter / DEAD)
    assert keys([r.raw for r in dead]) == expected_keys("b"), "each malformed record exactly once"
    ids = [r.transaction_id for r in output_rows(spark, out)]
    assert sorted(ids) == sorted(t.transaction_id for t in clean + mixed if t.amount > 500)
    assert len(ids) == len(set(ids))

    write_batch(events, "c", transactions(10, start=START, seed=7, first_id=200), malformed("c"))
    run_once(spark, project, "high-value", tmp_path / "state")
    dead = output_rows(spark, prepared.dead_letter / DEAD)
    assert keys([r.raw for r in dead]) == expected_keys("b", "c")


@pytest.mark.e2e
def test_both_outputs_stay_exact_when_the_job_is_killed_as_its_output_gains_a_batch(batched: ProjectDir):
    project = batched
    manifest = project.root / "manifests" / "high-value.yaml"
    manifest.write_text(manifest.read_text() + "trigger-interval: 200 milliseconds\n")
    events = project.root / "data" / "in"
    out = project.root / "data" / "out"
    dead_dir = project.root / ".sql-runner" / "checkpoints" / "dead-letter" / "high-value" / DEAD
    written, tags = [], []

    def add(name: str, seed: int) -> None:
        rows = transactions(15, start=START, seed=seed, first_id=1000 * seed)
        written.extend(rows)
        tags.append(name)
        write_batch(events, name, rows, malformed(name))

    def log_entries() -> int:
        folder = out / "_spark_metadata"
        return len([p for p in folder.iterdir() if p.name.split(".")[0].isdigit()]) if folder.is_dir() else 0

    add("f0", 10)
    cli(project, "deploy")
    before = log_entries()
    add("f1", 11)
    deadline = time.monotonic() + 90
    while log_entries() == before and time.monotonic() < deadline:
        time.sleep(0.01)
    job = status(project, "high-value")["job"]
    os.killpg(int(job.split("@")[0]), signal.SIGKILL)
    wait_for(lambda: status(project, "high-value")["state"] != "running", "the job to be seen dead")
    add("f2", 12)
    assert "restore v1 from checkpoint run-" in cli(project, "deploy").stdout
    # a duplicate would land with the batches after the restore: the one that reads another file comes after them
    add("f3", 13)
    expected = sorted(t.transaction_id for t in written if t.amount > 500)
    wait_for(lambda: len(committed_json_rows(out)) >= len(expected), "the output rows", 120)
    wait_for(lambda: len(committed_json_rows(dead_dir)) >= 3 * len(tags), "the dead letters", 120)
    assert sorted(r["transaction_id"] for r in committed_json_rows(out)) == expected
    assert keys([r["raw"] for r in committed_json_rows(dead_dir)]) == expected_keys(*tags)
    cli(project, "stop", "high-value")
