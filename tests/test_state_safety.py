"""Restored state never changes a result: real jobs, run as a user runs them.

- Two edits the state cannot serve (a sliding window's size; a grouping key moved to
  another field of the same struct): v1 runs, the manifest is edited, the runner starts
  v2 with clean state, and v2's output equals a from-scratch run of v2 over the same input
  (the same job code, run once in the test's process).
- A restore Spark refuses stops the job with the reason in ``status`` and ``history``, and
  the next ``plan`` proposes a new version instead of restoring again.
- A change to fields the job does not use (retention, on-query-change) is recorded while
  the job keeps running: same process.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import pytest
import yaml

from demo.committed_rows import committed_json_rows
from runner.core.reasons import codes
from tests.clihelpers import cli, edit, history, status, wait_for
from tests.conftest import HIGH_VALUE_MANIFEST, METADATA_DDL, TRANSACTIONS_DDL, ProjectDir, kill_recorded_jobs
from tests.jobhelpers import run_once

pytestmark = [pytest.mark.spark, pytest.mark.e2e]

DDL = (
    """
CREATE TABLE `demo`.`events` (
  id STRING, account STRING, info ROW<a STRING, b STRING>, amount DOUBLE, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = 'data/events', 'format' = 'json',
        'source.max-files-per-trigger' = '1');
CREATE TABLE `demo`.`sliding` (k STRING, w TIMESTAMP(3), n BIGINT"""
    + METADATA_DDL
    + """) WITH ('connector' = 'filesystem', 'path' = 'data/sliding', 'format' = 'json');
CREATE TABLE `demo`.`by-field` (k STRING, w TIMESTAMP(3), n BIGINT"""
    + METADATA_DDL
    + """) WITH ('connector' = 'filesystem', 'path' = 'data/by-field', 'format' = 'json');
"""
)
SLIDING = """
name: sliding
target-table: "`demo`.`sliding`"
on-query-change: reprocess
trigger-interval: 1 second
sparkProperties: {spark.sql.shuffle.partitions: "2"}  # small state for small data
sql: |
  SELECT account AS k, window.start AS w, COUNT(*) AS n FROM `demo`.`events`
  GROUP BY window(ts, '10 minutes', '5 minutes'), account
"""
BY_FIELD = """
name: by-field
target-table: "`demo`.`by-field`"
on-query-change: reprocess
trigger-interval: 1 second
sparkProperties: {spark.sql.shuffle.partitions: "2"}  # small state for small data
sql: |
  SELECT info.a AS k, window.start AS w, COUNT(*) AS n FROM `demo`.`events`
  GROUP BY window(ts, '1 minute'), info.a
"""
EDITS = {
    "sliding": ("'10 minutes'", "'20 minutes'"),
    "by-field": ("info.a", "info.b"),
}


def write_events(folder: Path) -> int:
    """Events in minutes 0-9, then two far-later ticks in files of their own (one file per
    batch), so the second tick's batch emits every window the events fall in."""
    folder.mkdir(parents=True, exist_ok=True)
    events = [
        {
            "id": f"e{i}",
            "account": f"acct-{i % 3}",
            "info": {"a": f"a{i % 2}", "b": f"b{i % 4}"},
            "amount": float(i),
            "ts": f"2026-01-01T09:{(i * 7) // 60:02d}:{(i * 7) % 60:02d}",
        }
        for i in range(80)
    ]
    ticks = [
        {**events[0], "id": "tick1", "ts": "2026-01-01T10:00:00"},
        {**events[0], "id": "tick2", "ts": "2026-01-01T11:00:00"},
    ]
    for order, (name, rows) in enumerate((("events", events), ("tick1", ticks[:1]), ("tick2", ticks[1:]))):
        path = folder / f"{name}.json"
        path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
        os.utime(path, (1_700_000_000 + order * 10, 1_700_000_000 + order * 10))
    return len(events)


def query_rows(folder: Path, version: int) -> Counter:
    return Counter((r["k"], r["w"], r["n"]) for r in committed_json_rows(folder) if r["__query_version"] == version)


def test_state_that_cannot_serve_the_edited_query_is_never_restored(spark, tmp_path: Path):
    deployed = ProjectDir(tmp_path / "deployed")
    scratch = ProjectDir(tmp_path / "scratch")
    for project in (deployed, scratch):
        project.ddl("tables", DDL)
        events = write_events(project.root / "data" / "events")
    deployed.manifest("sliding", SLIDING)
    deployed.manifest("by-field", BY_FIELD)
    try:
        cli(deployed, "deploy")
        for name in EDITS:  # v1 has state: its first batch is committed
            wait_for(lambda n=name: status(deployed, n).get("last progress") is not None, f"{name} v1's first batch")
        for name, (old, new) in EDITS.items():
            edit(deployed.root / "manifests" / f"{name}.yaml", old, new)
            scratch.manifest(name, (deployed.root / "manifests" / f"{name}.yaml").read_text())

        cli(deployed, "deploy")
        for name in EDITS:
            last = history(deployed, name)[-1]
            assert last.summary == "stop with savepoint, then start v2 with clean state (query changed)", last
            changed = next(r for r in last.reasons if r.code.startswith("STATEFUL_OPERATOR_"))
            assert changed.param["kind"] == "aggregation" and "grouping keys" in changed.param["differ"], last
        for name in EDITS:
            run_once(spark, scratch, name, tmp_path / "scratch-state")  # the same job code, in this process
            from_scratch = query_rows(scratch.root / "data" / name, version=1)
            # every window of the events and of the first tick closes; the second tick's stays open
            windows_per_event = 4 if name == "sliding" else 1
            assert sum(n * count for (_, _, n), count in from_scratch.items()) == windows_per_event * (events + 1)
            folder = deployed.root / "data" / name
            wait_for(lambda f=folder, want=from_scratch: query_rows(f, version=2) == want, f"{name} v2 = from scratch")
        cli(deployed, "stop", "sliding", "--no-savepoint")
        cli(deployed, "stop", "by-field", "--no-savepoint")
    finally:  # never leave the detached jobs running, even when an assertion fails
        kill_recorded_jobs(deployed.root / ".sql-runner")


COUNTS_DDL = (
    """
CREATE TABLE `demo`.`counts` (k STRING, w TIMESTAMP(3), n BIGINT"""
    + METADATA_DDL
    + """) WITH ('connector' = 'filesystem', 'path' = 'data/counts', 'format' = 'json');
"""
)
COUNTS = """
name: counts
target-table: "`demo`.`counts`"
sparkProperties: {spark.sql.shuffle.partitions: "2"}
sql: |
  SELECT account_id AS k, window.start AS w, COUNT(*) AS n FROM `demo`.`card-transactions`
  GROUP BY window(ts, '1 minute'), account_id
"""


def test_a_restore_spark_refuses_stops_the_job_and_the_next_plan_starts_a_new_version(project: ProjectDir):
    """A refusal the runner cannot foresee: here the deployed record was edited by hand to a
    query whose keys have another type than the state its checkpoint holds."""
    from demo.transactions import transactions, write_batch
    from tests.clihelpers import START

    project.ddl("tables", TRANSACTIONS_DDL + COUNTS_DDL)
    manifest = project.manifest("counts", COUNTS)
    write_batch(project.root / "data" / "in", "first", transactions(20, start=START, seed=3))
    cli(project, "run", str(manifest), "--once")
    record_path = project.root / ".sql-runner" / "manifests" / "deployed" / "counts.yaml"
    record = yaml.safe_load(record_path.read_text())
    by_amount = "SELECT CAST(amount AS STRING) AS k, window.start AS w, COUNT(*) AS n FROM `demo`.`card-transactions`\n"
    by_amount += "GROUP BY window(ts, '1 minute'), amount\n"
    record["sql"] = by_amount
    record_path.write_text(yaml.safe_dump(record, sort_keys=False))
    manifest.write_text(
        COUNTS.split("sql: |")[0] + "sql: |\n" + "".join(f"  {line}\n" for line in by_amount.splitlines())
    )

    write_batch(project.root / "data" / "in", "second", transactions(20, start=START, seed=4, first_id=100))
    refused = cli(project, "run", str(manifest), "--once", check=False)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "[counts] restore v1 from" in refused.stderr
    # the job's own lines (spark-submit passes a Python job's stderr on to its stdout)
    assert "Spark refused the restored state: [STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE]" in refused.stdout
    shown = status(project, "counts")
    assert shown["state"] == "failed" and shown["version"] == 1
    assert shown["why"].startswith("Spark refused the restored state: [STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE]")
    refusals = [e for e in history(project, "counts") if e.decision == "refused"]
    assert len(refusals) == 1 and refusals[0].version == 1, refusals
    assert codes(refusals[0].reasons) == ["SPARK_REFUSED_STATE", "NEXT_PLAN_STARTS_CLEAN"]
    assert str(refusals[0].reasons[0].param["refusal"]).startswith("[STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE]")

    plan = json.loads(cli(project, "plan", "--json").stdout)
    assert (plan["decision"], plan["version"]) == ("start", 2)
    assert plan["summary"] == "start v2 with clean state (restore refused)"
    refused = next(r for r in plan["reasons"] if r["code"] == "RESTORE_REFUSED")
    assert refused["params"]["version"] == 1 and "STATE_STORE_KEY_SCHEMA" in refused["params"]["refusal"], refused
    cli(project, "run", str(manifest), "--once")
    after = status(project, "counts")
    published = (project.root / ".sql-runner" / "manifests" / "status" / "counts.json").read_text()
    assert (after["state"], after["version"], after["why"]) == ("stopped", 2, None), published[:600]


def test_retention_and_on_query_change_are_recorded_without_restarting_the_job(demo_project: ProjectDir):
    cli(demo_project, "deploy")
    running = wait_for(
        lambda: (s := status(demo_project, "high-value"))["state"] == "running" and s["job"] and s, "the job to run"
    )
    manifest = demo_project.root / "manifests" / "high-value.yaml"
    manifest.write_text(
        HIGH_VALUE_MANIFEST.lstrip() + "on-query-change: reprocess\nretention:\n  savepoints: 5\n  runs: 2\n"
    )
    plan = json.loads(cli(demo_project, "plan", "--json").stdout)
    assert plan["decision"] == "update"
    assert plan["summary"] == "record the change; the running job keeps running (no restart needed)"
    assert [(r["code"], r["params"]) for r in plan["reasons"]] == [
        ("CHANGED_WITHOUT_RESTART", {"fields": ["on-query-change", "retention"]})
    ]
    cli(demo_project, "deploy")
    after = status(demo_project, "high-value")
    assert after["state"] == "running" and after["job"] == running["job"], (running, after)
    record = yaml.safe_load(
        (demo_project.root / ".sql-runner" / "manifests" / "deployed" / "high-value.yaml").read_text()
    )
    assert record["retention"] == {"savepoints": 5, "runs": 2} and record["on-query-change"] == "reprocess"
    assert history(demo_project, "high-value")[-1].decision == "update"
    assert json.loads(cli(demo_project, "plan", "--json").stdout)["decision"] == "nothing"
    cli(demo_project, "stop", "high-value", "--no-savepoint")
