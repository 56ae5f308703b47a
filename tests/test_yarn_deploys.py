"""Every branch of the deploy decision with the YARN target, on the run's real YARN cluster (demo/yarn_cluster.py).

The same stateful query as the local walk of tests/test_lifecycle.py (a count per account and minute), deployed
with ``--target yarn`` as the EMR steps run it: ``spark-submit --master yarn --deploy-mode cluster``, the driver
in the ApplicationMaster's container, stopped at a batch boundary through the job's stop request and killed
through the ResourceManager, and given a savepoint by ``sql-runner savepoint``. Each closed window is counted
exactly once across every restart."""

from __future__ import annotations

import json
import shutil
from collections import Counter

import pytest

from demo.committed_rows import committed_json_rows
from demo.transactions import write_batch
from demo.yarn_cluster import YarnCluster
from tests.clihelpers import cli, edit, history, status, wait_for
from tests.conftest import TRANSACTIONS_DDL, ProjectDir
from tests.tablehelpers import COUNTS_DDL, COUNTS_MANIFEST, events_between

pytestmark = [pytest.mark.spark, pytest.mark.e2e]

YARN_STEP = 240  # seconds: a submission, a container launched and its driver's first batch, on a busy machine


def test_a_stateful_query_on_yarn_goes_through_every_deploy_branch_counting_each_event_once(
    yarn: YarnCluster, project: ProjectDir
):
    project.ddl("tables", TRANSACTIONS_DDL + COUNTS_DDL)
    manifest = project.manifest("counts", COUNTS_MANIFEST)
    # a team of its own: the other tests share the cluster
    env, options = yarn.runner_env("walkers"), yarn.runner_options("walkers")
    events, out = project.root / "data" / "in", project.root / "data" / "counts"
    v1_events: list = []

    def deploy(*args: str, check: bool = True):
        return cli(project, "deploy", *args, env=env, check=check)

    def add(minute: int, seed: int, to: list) -> None:
        rows = events_between(minute, minute + 2, seed=seed, prefix=f"m{minute}")
        write_batch(events, f"m{minute}", rows)
        to.extend(rows)

    def counted(version: int) -> Counter:
        found: Counter = Counter()
        for row in committed_json_rows(out):
            if row["__query_version"] == version:
                found[row["k"]] += row["n"]
        return found

    def expect_v1() -> None:
        # every event counted once, by account, but the last tick: its window stays open
        expected = Counter(t.account_id for t in v1_events[:-1])
        wait_for(lambda: counted(1) == expected, f"v1's {sum(expected.values())} counted events", YARN_STEP)

    def job() -> str | None:
        return status(project, "counts", *options)["job"]

    def app(app_id: str) -> dict:
        return yarn.rest(f"apps/{app_id}")["app"]

    def ended(app_id: str) -> dict:
        return wait_for(lambda: (a := app(app_id))["state"] in ("FINISHED", "KILLED", "FAILED") and a, "its end", 90)

    # new job -> start v1: an application the ResourceManager runs, found by its tags
    add(0, 1, v1_events)
    assert "start v1 with clean state" in deploy().stdout
    expect_v1()
    first = job()
    assert first is not None and first.startswith("application_")
    assert app(first)["state"] == "RUNNING" and "sql-runner-name:counts" in app(first)["applicationTags"]
    assert status(project, "counts", *options)["target"] == "yarn"
    driver = yarn.rest(f"apps/{first}/appattempts")["appAttempts"]["appAttempt"][0]["containerId"]
    log = yarn.node_logs / first / driver / "stdout"  # the driver's log, in its container on the node
    wait_for(lambda: "batch 0:" in log.read_text(), "the driver's log of its first batch", 60)

    # whitespace and a comment only -> nothing: the same application runs on
    edit(manifest, "COUNT(*) AS n", "count(*)   AS n  -- per window")
    assert json.loads(cli(project, "plan", "--json", env=env).stdout)["summary"] == "no change"
    deploy()
    assert job() == first

    # running, its description changed -> stopped at a batch boundary with a savepoint, restored in a new application
    manifest.write_text(manifest.read_text() + "description: accounts per minute\n")
    result = deploy()
    assert "stop with savepoint, then restore v1" in result.stdout and "(graceful)" in result.stdout, result.stdout
    assert (ended(first)["state"], app(first)["finalStatus"]) == ("FINISHED", "SUCCEEDED")
    second = wait_for(job, "the restored application")
    assert second != first
    add(6, 2, v1_events)
    expect_v1()

    # killed through the ResourceManager (no batch boundary) -> not running; unchanged -> its latest checkpoint
    yarn.kill(second)
    assert ended(second)["state"] == "KILLED"
    wait_for(lambda: status(project, "counts", *options)["state"] != "running", "the job to be seen gone")
    add(12, 3, v1_events)
    assert "restore v1 from checkpoint run-" in deploy().stdout
    expect_v1()

    # a savepoint of the running job: stopped at a batch boundary, snapshot, restarted from it in a new application
    before = job()
    result = cli(project, "savepoint", "counts", env=env)
    assert "savepoint savepoints/counts/1/savepoint-" in result.stdout and "(graceful)" in result.stdout, result.stdout
    assert (ended(before)["state"], app(before)["finalStatus"]) == ("FINISHED", "SUCCEEDED")
    wait_for(lambda: job() not in (None, before), "the application restarted from the savepoint", YARN_STEP)
    assert status(project, "counts", *options)["latest savepoint"] in result.stdout
    add(18, 4, v1_events)
    expect_v1()

    # stopped by hand at a batch boundary -> stopped, the application FINISHED; nothing runs until the next deploy
    third = job()
    result = cli(project, "stop", "counts", env=env)
    assert "savepoint savepoints/counts/1/" in result.stdout
    assert ended(third)["finalStatus"] == "SUCCEEDED"
    assert status(project, "counts", *options)["state"] == "stopped"

    # the grouping changed while it is stopped -> v2 with clean state, continuing after the files v1 read (its
    # savepoint says where): each event counted once, by v1 or by v2
    edit(manifest, "account_id AS k", "payee AS k")
    edit(manifest, ", account_id", ", payee")
    result = deploy()
    assert "start v2 with clean state (query changed)" in result.stdout, result.stdout
    v2_events: list = []
    add(24, 5, v2_events)
    expected = Counter(t.payee for t in v2_events[:-1])
    wait_for(lambda: counted(2) == expected, f"v2's {sum(expected.values())} counted events", YARN_STEP)
    assert counted(1) == Counter(t.account_id for t in v1_events[:-1]), "v1's counts stay as they were"

    # manifest deleted -> stopped with a savepoint and marked removed; nothing of it runs on YARN
    removed = manifest.read_text()
    manifest.unlink()
    assert "stop with savepoint, mark removed (state kept)" in deploy("--all").stdout
    assert status(project, "counts", *options)["state"] == "removed"
    assert not [a for a in yarn.active_apps() if "sql-runner-team:walkers" in a["applicationTags"]]

    # its state wiped, the manifest back -> nothing to restore: an error, nothing submitted
    shutil.rmtree(project.root / ".sql-runner" / "checkpoints" / "checkpoints")
    shutil.rmtree(project.root / ".sql-runner" / "savepoints")
    manifest.write_text(removed)
    result = deploy(check=False)
    assert result.returncode == 2 and "NO_STATE_TO_RESTORE" in result.stderr, result.stdout + result.stderr
    assert status(project, "counts", *options)["state"] == "removed"
    assert not [a for a in yarn.active_apps() if "sql-runner-team:walkers" in a["applicationTags"]]

    decisions = [entry.decision for entry in history(project, "counts")]
    assert decisions == ["start", "nothing", "restore", "restore", "restore", "stop", "start", "remove", "error"]
