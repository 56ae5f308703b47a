"""Restarts the YARN way, on the run's real YARN cluster (demo/yarn_cluster.py).

A job on YARN asks for application attempts (``spark.yarn.maxAppAttempts``, from its restart strategy, up to
what the cluster allows: ``yarn.resourcemanager.am.max-attempts``, 10 on the team's EMR cluster and here). Its
driver runs in the ApplicationMaster's container; killed with SIGKILL, YARN starts the next attempt, which
resumes the query from its checkpoint. ``status`` says which attempt runs and how the one before it ended;
when YARN has made every attempt, it says so, and the next deploy restores the job and its history says why."""

from __future__ import annotations

import os
import random
import signal
import time
from collections import Counter

import pytest

from demo.committed_rows import committed_json_rows
from demo.transactions import write_batch
from demo.yarn_cluster import YarnCluster
from runner.core.reasons import codes
from runner.targets.yarn import YARN_MAX_ATTEMPTS
from tests.clihelpers import cli, history, kill_rounds, status, wait_for
from tests.conftest import TRANSACTIONS_DDL, ProjectDir
from tests.tablehelpers import COUNTS_DDL, COUNTS_MANIFEST, events_between

pytestmark = [pytest.mark.spark, pytest.mark.e2e]

ATTEMPT = 240  # seconds: YARN noticing the lost container, a new one launched and its driver's first batch


def test_a_killed_application_master_comes_back_as_new_attempts_and_every_event_is_counted_once(
    yarn: YarnCluster, project: ProjectDir
):
    seed, kills = kill_rounds("ApplicationMaster kills", at_least=5)
    kills = min(kills, YARN_MAX_ATTEMPTS - 1)  # the attempts the cluster allows, the last one killed at the end
    chance = random.Random(seed)
    project.ddl("tables", TRANSACTIONS_DDL + COUNTS_DDL)
    # one attempt more than the kills: the last kill leaves YARN no attempt to make
    project.manifest("counts", COUNTS_MANIFEST + f"restart-strategy: {{attempts: {kills}}}\n")
    # a team of its own: the other tests share the cluster
    env, options = yarn.runner_env("restarters"), yarn.runner_options("restarters")
    events, out = project.root / "data" / "in", project.root / "data" / "counts"
    written: list = []
    app_id = ""

    def add(minute: int) -> None:
        rows = events_between(minute, minute + 2, seed=minute, prefix=f"m{minute}")
        write_batch(events, f"m{minute}", rows)
        written.extend(rows)

    def expect_counts() -> None:
        # every event counted once, by account, but the last tick: its window stays open
        expected = Counter(t.account_id for t in written[:-1])

        def counted() -> Counter:
            found: Counter = Counter()
            for row in committed_json_rows(out):
                found[row["k"]] += row["n"]
            return found

        def explain() -> str:
            seen, app = row(), yarn.rest(f"apps/{app_id}")["app"] if app_id else {}
            logs = sorted(yarn.node_logs.glob(f"{app_id}/*/stdout"), key=lambda p: p.stat().st_mtime)
            tail = "\n".join(logs[-1].read_text().splitlines()[-25:]) if logs else "no driver log"
            differ = f"counted {counted() - expected} more, {expected - counted()} fewer"
            return f"{differ}; {seen}; {app.get('state')}\n{tail}"

        wait_for(lambda: counted() == expected, f"{sum(expected.values())} counted events", ATTEMPT, explain=explain)
        lines = [(row["k"], row["window_start"]) for row in committed_json_rows(out)]
        assert len(lines) == len(set(lines)), "each window written once"

    def row() -> dict:
        return status(project, "counts", *options)

    add(0)
    assert "start v1 with clean state" in cli(project, "deploy", env=env).stdout
    expect_counts()
    app_id = row()["job"]
    assert row()["attempt"] == 1 and row()["why"] is None

    for kill in range(1, kills + 1):
        # new events, then SIGKILL to the driver before, while or after its batch over them
        add(12 * kill)
        time.sleep(chance.uniform(0, 2.5))
        driver = yarn.driver_pid(app_id)
        assert driver is not None, f"attempt {kill}'s driver runs"
        os.kill(driver, signal.SIGKILL)
        # YARN starts the next attempt of the same application, whose driver resumes from the checkpoint. Killed
        # after a batch that moved the watermark but before the batch with no data that emits the windows it
        # closed, a restarted Spark query emits them with its next data (it runs no such batch on a restart):
        # events keep coming, as they do to a job in production
        wait_for(lambda n=kill: row()["attempt"] == n + 1, f"attempt {kill + 1}", ATTEMPT)
        add(12 * kill + 6)
        expect_counts()
        seen = row()
        assert (seen["state"], seen["job"]) == ("running", app_id), seen
        assert seen["why"].startswith(f"attempt {kill + 1}; attempt {kill} ended: "), seen["why"]
        assert "exitCode: 137" in seen["why"] or "Exit code is 137" in seen["why"], seen["why"]
    attempts = yarn.rest(f"apps/{app_id}/appattempts")["appAttempts"]["appAttempt"]
    assert len(attempts) == kills + 1
    wait_for(lambda: yarn.rest(f"apps/{app_id}")["app"]["state"] == "RUNNING", "the last attempt to register", 60)
    assert [entry.decision for entry in history(project, "counts")] == ["start"], "attempts are not deploys"

    # the last attempt's driver killed after a committed batch: YARN has no attempt left, the application fails
    add(12 * (kills + 1))
    expect_counts()
    driver = yarn.driver_pid(app_id)
    assert driver is not None, "its driver runs"
    os.kill(driver, signal.SIGKILL)
    last = app_id
    seen = wait_for(
        lambda: (r := row())["state"] == "failed" and r,
        "the job to be seen failed",
        ATTEMPT,
        explain=lambda: f"{row()}; {yarn.rest(f'apps/{last}')['app']}",
    )
    assert seen["job"] is None and last in seen["why"] and "FAILED" in seen["why"], seen
    assert f"after {kills + 1} attempts" in seen["why"] and "the runner does not restart it itself" in seen["why"], seen

    # the next deploy restores it from its latest checkpoint, and its history says how the application ended
    add(12 * (kills + 2))
    assert "restore v1 from checkpoint run-" in cli(project, "deploy", env=env).stdout
    expect_counts()
    entry = history(project, "counts")[-1]
    assert "APPLICATION_ENDED" in codes(entry.reasons)
    ended = next(reason for reason in entry.reasons if reason.code == "APPLICATION_ENDED")
    assert last in str(ended.param["how"]) and "FAILED" in str(ended.param["how"])
    shown = cli(project, "history", "counts", "--json", "-n", "1", env=env).stdout
    assert f"its last application ended: {last} FAILED" in shown, shown
    cli(project, "stop", "counts", "--no-savepoint", env=env)
