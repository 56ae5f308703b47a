"""The deploy decision end to end: real `sql-runner` processes, detached spark-submit jobs, local Spark."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest

from runner.events import transactions, write_batch
from runner.records import read_deployed, read_history
from runner.sinkfiles import committed_json_rows
from runner.store import LocalBucket
from tests.conftest import ProjectDir

START = datetime(2026, 1, 1, 9, 0, tzinfo=UTC)
SQL_RUNNER = str(Path(sys.executable).parent / "sql-runner")


def cli(project: ProjectDir, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run([SQL_RUNNER, *args], cwd=project.root, capture_output=True, text=True, timeout=300,
                            env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "COLUMNS": "200"}, check=False)
    if check:
        assert result.returncode == 0, result.stdout + result.stderr
    return result


def wait_for(condition, what: str, timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def status(project: ProjectDir, name: str) -> dict:
    lines = cli(project, "status", "--json").stdout.splitlines()
    return next(json.loads(line) for line in lines if json.loads(line)["name"] == name)


def history(project: ProjectDir, name: str) -> list[dict]:
    return read_history(LocalBucket(project.root / ".sql-runner" / "manifests"), name)


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


@pytest.fixture
def stateless(demo_project: ProjectDir) -> ProjectDir:
    path = demo_project.root / "manifests" / "high-value.yaml"
    path.write_text(path.read_text() + "trigger-interval: 1 second\n")
    return demo_project


def test_stateless_job_through_every_deploy_branch(stateless: ProjectDir):
    project = stateless
    manifest = project.root / "manifests" / "high-value.yaml"
    events = project.root / "data" / "in"
    out = project.root / "data" / "out"
    written: list = []

    def expect_rows() -> list[str]:
        expected = sorted(t.transaction_id for t in written if t.amount > 500)
        wait_for(lambda: sorted(r["transaction_id"] for r in committed_json_rows(out)) == expected,
                 f"{len(expected)} output rows")
        return expected

    def add_events(batch: str, seed: int) -> None:
        rows = transactions(15, start=START, seed=seed, first_id=len(written))
        written.extend(rows)
        write_batch(events, batch, rows)

    # new job -> start v1
    add_events("b1", 1)
    result = cli(project, "deploy")
    assert "start v1 with clean state" in result.stdout
    expect_rows()
    first_job = wait_for(lambda: status(project, "high-value")["job"], "the job to run")

    # whitespace and comments only -> nothing
    edit(manifest, "WHERE amount > 500", "where   amount>500  -- big ones")
    assert json.loads(cli(project, "plan", "--json").stdout)["summary"] == "no change"
    cli(project, "deploy")
    assert status(project, "high-value")["job"] == first_job

    # a filter added to the stateless query -> stop with savepoint, restore, same version
    edit(manifest, "amount>500", "amount>500 AND amount < 1000000")
    result = cli(project, "deploy")
    assert "restore v1 from the savepoint taken when v1 stops" in result.stdout
    assert "(graceful)" in result.stdout
    add_events("b2", 2)
    expect_rows()
    entry = history(project, "high-value")[-1]
    assert entry["decision"] == "restore" and "state-compatible" in " ".join(entry["reasons"])
    restored = Path(project.root / ".sql-runner" / "checkpoints" / entry["outcome"]["checkpoint"])
    commits = sorted(int(p.name) for p in (restored / "commits").iterdir() if p.name.isdigit())
    last = entry["outcome"]["savepoint"]["last-committed-batch"]
    assert last in commits and commits[-1] > last, "the restored run carries v1's log on, it does not start over"

    # killed with kill -9 -> not running, unchanged -> resumes its latest checkpoint
    job = status(project, "high-value")["job"]
    os.killpg(int(job.split("@")[0]), signal.SIGKILL)
    wait_for(lambda: status(project, "high-value")["state"] != "running", "the job to be seen dead")
    add_events("b3", 3)
    result = cli(project, "deploy")
    assert "restore v1 from checkpoint run-" in result.stdout
    expect_rows()

    # a savepoint of the running job: short stop, snapshot, restart from it; it keeps running
    result = cli(project, "savepoint", "high-value")
    assert "savepoint savepoints/high-value/1/savepoint-" in result.stdout and "(graceful)" in result.stdout
    wait_for(lambda: status(project, "high-value")["state"] == "running", "the job to run again")
    assert status(project, "high-value")["latest savepoint"] in result.stdout

    # stopped by hand, then the description changes -> not running, config changed -> restore latest
    result = cli(project, "stop", "high-value")
    assert "savepoint savepoints/high-value/1/" in result.stdout
    assert status(project, "high-value")["state"] in ("stopped", "not running")
    edit(manifest, "Card transactions above 500", "Card transactions above 500 (audited)")
    result = cli(project, "deploy")
    assert "restore v1 from savepoint savepoint-" in result.stdout
    add_events("b4", 4)
    expected = expect_rows()
    rows = committed_json_rows(out)
    assert Counter(r["transaction_id"] for r in rows).most_common(1)[0][1] == 1, "no duplicates"
    assert {r["__query_version"] for r in rows} == {1}
    assert rows[-1]["__query_description"] in ("Card transactions above 500",
                                               "Card transactions above 500 (audited)")

    # a running job whose description changes -> stop with savepoint, restore
    edit(manifest, "(audited)", "(audited twice)")
    assert "stop with savepoint, then restore v1" in cli(project, "deploy").stdout

    # manifest deleted -> stop with savepoint, marked removed, state kept
    manifest.unlink()
    result = cli(project, "deploy", "--all")
    assert "stop with savepoint, mark removed (state kept)" in result.stdout
    assert status(project, "high-value")["state"] == "removed"
    record, _ = read_deployed(LocalBucket(project.root / ".sql-runner" / "manifests"), "high-value")
    assert record.removed and record.version == 1
    assert len(committed_json_rows(out)) == len(expected)

    # its state wiped, the manifest back -> nothing to restore: error, nothing started
    shutil.rmtree(project.root / ".sql-runner" / "checkpoints" / "checkpoints")
    shutil.rmtree(project.root / ".sql-runner" / "savepoints")
    stateless.manifest("high-value", manifest_text(project))
    result = cli(project, "deploy", check=False)
    assert result.returncode == 2
    assert "NO_STATE_TO_RESTORE" in result.stderr and "no savepoint or checkpoint of v1 found" in result.stderr
    assert status(project, "high-value")["state"] == "removed"

    decisions = [e["decision"] for e in history(project, "high-value")]
    assert decisions == ["start", "nothing", "restore", "restore", "restore", "stop", "restore", "restore",
                         "remove", "error"]
    table = cli(project, "history", "high-value").stdout
    assert "mark removed" in table and "state-compatible" in table


def manifest_text(project: ProjectDir) -> str:
    from tests.conftest import HIGH_VALUE_MANIFEST

    return HIGH_VALUE_MANIFEST + "trigger-interval: 1 second\n"
