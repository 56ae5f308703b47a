"""`sql-runner run` through a real spark-submit, and `preview` over the live sources."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from demo.committed_rows import committed_json_rows
from demo.transactions import MALFORMED_LINES, transactions, write_batch
from runner.cli.main import cli
from tests.conftest import ProjectDir

pytestmark = pytest.mark.spark

START = datetime(2026, 1, 1, tzinfo=UTC)


def sql_runner(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(Path(sys.executable).parent / "sql-runner"), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"},
        check=False,
    )


def test_run_once_twice_processes_exactly_the_new_input(demo_project: ProjectDir):
    events = demo_project.root / "data" / "in"
    first = transactions(20, start=START, seed=11)
    write_batch(events, "b1", first, MALFORMED_LINES[:1])
    result = sql_runner("run", "manifests/high-value.yaml", "--once", cwd=demo_project.root)
    assert result.returncode == 0, result.stderr + result.stdout
    assert "1 malformed records dead-lettered" in result.stdout
    out = demo_project.root / "data" / "out"
    expected = [t.transaction_id for t in first if t.amount > 500]
    assert sorted(r["transaction_id"] for r in committed_json_rows(out)) == sorted(expected)

    second = transactions(20, start=START, seed=12, first_id=20)
    write_batch(events, "b2", second)
    result = sql_runner("run", "manifests/high-value.yaml", "--once", cwd=demo_project.root)
    assert result.returncode == 0, result.stderr
    assert "restore v1 from checkpoint run-" in result.stderr
    new = [t.transaction_id for t in second if t.amount > 500]
    assert f"finished: {len(new)} rows written" in result.stdout
    rows = committed_json_rows(out)
    assert sorted(r["transaction_id"] for r in rows) == sorted(expected + new)
    assert {r["__query_version"] for r in rows} == {1}
    deployed = demo_project.root / ".sql-runner" / "manifests" / "deployed" / "high-value.yaml"
    assert yaml.safe_load(deployed.read_text())["meta"]["query-version"] == 1
    # the finished run says so, whatever progress event arrived after it stopped
    status = json.loads((demo_project.root / ".sql-runner" / "manifests" / "status" / "high-value.json").read_text())
    assert (status["state"], status["reason"]) == ("stopped", "finished"), status
    assert status["recent-progress"] and status["progress"] == status["recent-progress"][-1]
    # polled, not pushed: the run's micro-batch is there all the same, and counted
    assert [(r["batch"], r["input-rows"]) for r in status["recent-progress"]] == [(1, len(second))], status


def test_run_with_an_unresolved_variable_changes_nothing(demo_project: ProjectDir, monkeypatch):
    monkeypatch.delenv("OUT_DIR", raising=False)
    ddl = demo_project.root / "manifests" / "tables" / "tables.sql"
    ddl.write_text(ddl.read_text().replace("'data/out'", "'${OUT_DIR}/out'"))
    result = sql_runner("run", "manifests/high-value.yaml", "--once", cwd=demo_project.root)
    assert result.returncode == 2
    assert "UNRESOLVED_PLACEHOLDER" in result.stderr and "${OUT_DIR}" in result.stderr
    # its job judged the manifest and was sent away: what it and the runner said to each other is gone, and
    # nothing was deployed, recorded or started
    state = demo_project.root / ".sql-runner"
    assert [p for p in state.rglob("*") if p.is_file()] == []


def test_preview_prints_rows_and_touches_no_state(spark, demo_project: ProjectDir):
    rows = transactions(12, start=START, seed=13)
    write_batch(demo_project.root / "data" / "in", "b1", rows)
    runner = CliRunner()
    result = runner.invoke(
        cli,
        [
            "preview",
            "--project",
            str(demo_project.root),
            "-n",
            "50",
            str(demo_project.root / "manifests" / "high-value.yaml"),
        ],
    )
    assert result.exit_code == 0, result.stderr
    high = [t for t in rows if t.amount > 500]
    for t in high:
        assert t.transaction_id in result.stdout
    assert f"{len(high)} row(s)" in result.stdout
    result = runner.invoke(
        cli,
        [
            "preview",
            "--project",
            str(demo_project.root),
            "--sql",
            "SELECT payee, COUNT(*) AS n FROM `demo`.`card-transactions` GROUP BY payee",
        ],
    )
    assert result.exit_code == 0, result.stderr
    assert f"{len({t.payee for t in rows})} row(s)" in result.stdout
    assert not (demo_project.root / ".sql-runner").exists()
    assert not (demo_project.root / "data" / "out").exists()
