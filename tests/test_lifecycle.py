"""The deploy decision end to end: real `sql-runner` processes, detached spark-submit jobs, local Spark."""

from __future__ import annotations

import json
import os
import shutil
import signal
from collections import Counter
from pathlib import Path

import pytest

from demo.committed_rows import committed_json_rows
from demo.transactions import transactions, write_batch
from runner.core.bucket import LocalBucket
from runner.core.reasons import codes
from runner.state.records import read_deployed
from tests.clihelpers import START, cli, edit, history, status, wait_for
from tests.conftest import TRANSACTIONS_DDL, ProjectDir
from tests.tablehelpers import COUNTS_DDL, COUNTS_MANIFEST, events_between

pytestmark = [pytest.mark.spark, pytest.mark.e2e]


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
        wait_for(
            lambda: sorted(r["transaction_id"] for r in committed_json_rows(out)) == expected,
            f"{len(expected)} output rows",
        )
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
    assert entry.decision == "restore" and "STATE_CARRIES_OVER" in codes(entry.reasons)
    assert entry.outcome.checkpoint is not None and entry.outcome.savepoint is not None
    restored = Path(project.root / ".sql-runner" / "checkpoints" / entry.outcome.checkpoint)
    last = entry.outcome.savepoint.last_committed_batch

    def commits() -> list[int]:
        return sorted(int(p.name) for p in (restored / "commits").iterdir() if p.name.isdigit())

    # the sink's log is written before the checkpoint's commit file: wait for the commit too
    wait_for(lambda: commits()[-1] > last, "the restored run to commit a batch")
    assert last in commits() and last + 1 in commits(), "the restored run carries v1's log on, it does not start over"

    # killed with kill -9 -> not running, unchanged -> resumes its latest checkpoint
    job = status(project, "high-value")["job"]
    os.killpg(int(job.split("@")[0]), signal.SIGKILL)
    wait_for(lambda: status(project, "high-value")["state"] != "running", "the job to be seen dead")
    add_events("b3", 3)
    result = cli(project, "deploy")
    assert "restore v1 from checkpoint run-" in result.stdout
    expect_rows()

    # SIGTERM to the job's processes (what YARN and the local target's stop send): it stops its query
    # and says so, and the next deploy resumes where it stopped
    job = status(project, "high-value")["job"]
    logs = sorted(project.root.glob("**/high-value-v1-*.log"), key=lambda log: log.stat().st_mtime)
    os.killpg(int(job.split("@")[0]), signal.SIGTERM)
    wait_for(lambda: status(project, "high-value")["state"] != "running", "the job to stop")
    assert status(project, "high-value")["state"] == "stopped"
    log = logs[-1].read_text()
    assert "received signal 15: stopping the query" in log
    after = log.split("received signal 15")[-1]
    assert "Traceback" not in after and "high-value-v1 failed" not in after, after
    result = cli(project, "deploy")
    assert "restore v1 from checkpoint run-" in result.stdout
    add_events("b3b", 33)
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
    assert rows[-1]["__query_description"] in ("Card transactions above 500", "Card transactions above 500 (audited)")

    # a running job whose description changes -> stop with savepoint, restore
    edit(manifest, "(audited)", "(audited twice)")
    assert "stop with savepoint, then restore v1" in cli(project, "deploy").stdout

    # manifest deleted -> stop with savepoint, marked removed, state kept
    text = manifest.read_text()
    manifest.unlink()
    result = cli(project, "deploy", "--all")
    assert "stop with savepoint, mark removed (state kept)" in result.stdout
    assert status(project, "high-value")["state"] == "removed"
    record, _ = read_deployed(LocalBucket(project.root / ".sql-runner" / "manifests"), "high-value")
    assert record.removed and record.version == 1
    assert len(committed_json_rows(out)) == len(expected)

    # the manifest back -> the removed job is restored from its savepoint and carries on
    manifest.write_text(text)
    result = cli(project, "deploy")
    assert "restore v1 from savepoint savepoint-" in result.stdout
    assert "REDEPLOY_REMOVED" in codes(history(project, "high-value")[-1].reasons)
    add_events("b5", 5)
    expect_rows()

    # stopped by hand, then the manifest deleted -> marked removed, nothing to stop
    cli(project, "stop", "high-value")
    manifest.unlink()
    result = cli(project, "deploy", "--all")
    assert "high-value: mark removed (state kept) -> ok" in result.stdout
    assert status(project, "high-value")["state"] == "removed"

    # its state wiped, the manifest back -> nothing to restore: error, nothing started
    shutil.rmtree(project.root / ".sql-runner" / "checkpoints" / "checkpoints")
    shutil.rmtree(project.root / ".sql-runner" / "savepoints")
    stateless.manifest("high-value", manifest_text(project))
    result = cli(project, "deploy", check=False)
    assert result.returncode == 2
    assert "NO_STATE_TO_RESTORE" in result.stderr and "no savepoint or checkpoint of v1 found" in result.stderr
    assert status(project, "high-value")["state"] == "removed"

    decisions = [e.decision for e in history(project, "high-value")]
    assert decisions == [
        "start",
        "nothing",
        "restore",
        "restore",
        "restore",
        "restore",
        "stop",
        "restore",
        "restore",
        "remove",
        "restore",
        "stop",
        "remove",
        "error",
    ]
    table = cli(project, "history", "high-value").stdout
    assert "mark removed" in table and "state-compatible" in table


def manifest_text(project: ProjectDir) -> str:
    from tests.conftest import HIGH_VALUE_MANIFEST

    return HIGH_VALUE_MANIFEST + "trigger-interval: 1 second\n"


def test_incompatible_change_starts_next_version_that_continues_without_duplicates_or_gaps(project: ProjectDir):
    project.ddl("tables", TRANSACTIONS_DDL + COUNTS_DDL)
    manifest = project.manifest("counts", COUNTS_MANIFEST)
    events = project.root / "data" / "in"
    out = project.root / "data" / "counts"
    before = events_between(0, 2, seed=5, prefix="before")
    write_batch(events, "before", before)
    cli(project, "deploy")
    # the tick's own window stays open; every other event is in a closed window
    wait_for(lambda: sum(r["n"] for r in committed_json_rows(out)) == len(before) - 1, "v1's closed windows")

    edit(manifest, "account_id AS k", "payee AS k")
    edit(manifest, ", account_id", ", payee")
    plan = json.loads(cli(project, "plan", "--json").stdout)
    assert plan["summary"] == "stop with savepoint, then start v2 with clean state (query changed)"
    changed = next(r for r in plan["reasons"] if r["code"] == "STATEFUL_OPERATOR_CHANGED")
    assert changed["params"]["kind"] == "aggregation" and "grouping keys" in changed["params"]["differ"], changed
    assert changed["params"]["before"].startswith("aggregation by window, account_id"), changed
    assert plan["sources"] == [
        {
            "table": "`demo`.`card-transactions`",
            "how": "continue",
            "detail": "continues after the files v1 read (skips them)",
        }
    ]
    result = cli(project, "deploy")
    assert "skips the 1 files read up to batch" in result.stderr

    after = events_between(6, 8, seed=6, prefix="after")
    write_batch(events, "after", after)
    wait_for(
        lambda: sum(r["n"] for r in committed_json_rows(out) if r["__query_version"] == 2) == len(after) - 1,
        "v2's closed windows",
    )
    rows = committed_json_rows(out)
    v1, v2 = Counter(), Counter()
    for row in rows:
        (v1 if row["__query_version"] == 1 else v2)[row["k"]] += row["n"]
    # every event before the change counted once by v1 (per account), every event after once by v2 (per payee)
    assert v1 == Counter(t.account_id for t in before[:-1])
    assert v2 == Counter(t.payee for t in after[:-1])
    entry = history(project, "counts")[-1]
    assert entry.version == 2 and entry.sources[0].how == "continue"
    assert any("skips the 1 files" in note for note in entry.outcome.continuation)

    # on-query-change: reprocess and the grouping back to accounts -> v3 re-reads every file from the start
    manifest.write_text(manifest.read_text() + "on-query-change: reprocess\n")
    edit(manifest, "payee AS k", "account_id AS k")
    edit(manifest, ", payee", ", account_id")
    plan = json.loads(cli(project, "plan", "--json").stdout)
    assert plan["summary"] == "stop with savepoint, then start v3 with clean state (query changed)"
    assert plan["sources"] == [
        {
            "table": "`demo`.`card-transactions`",
            "how": "startup-position",
            "detail": "from its startup position (on-query-change: reprocess)",
        }
    ]
    cli(project, "deploy")
    everything = Counter(t.account_id for t in [*before, *after[:-1]])
    wait_for(
        lambda: sum(r["n"] for r in committed_json_rows(out) if r["__query_version"] == 3) == sum(everything.values()),
        "v3's recount of every closed window",
    )
    v3 = Counter()
    for row in committed_json_rows(out):
        if row["__query_version"] == 3:
            v3[row["k"]] += row["n"]
    assert v3 == everything
    assert [e.decision for e in history(project, "counts")] == ["start", "start", "start"]
    cli(project, "stop", "counts", "--no-savepoint")
