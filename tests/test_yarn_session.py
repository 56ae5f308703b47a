"""The team's session on the run's real YARN cluster (demo/yarn_cluster.py), as the EMR first step starts it.

``sql-runner session start --target yarn`` submits the session as a YARN application in cluster mode with several
attempts (``spark.yarn.maxAppAttempts``); its driver, and so its control endpoint, runs in the ApplicationMaster's
container on a NodeManager. Queries are added, changed and removed live; a changelog query runs on the incremental
operators from the cluster's classpath; the driver is killed with SIGKILL, YARN starts the application's next
attempt, which resumes every hosted query from its state; ``session status`` says which attempt runs and why the
one before it ended; outputs exact. The seconds each change took to take effect are printed (``-s``)."""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.parse
import urllib.request
from datetime import datetime

import pytest

from demo.yarn_cluster import YarnCluster
from runner.core.engine_record import ENGINE_FILE
from tests.clihelpers import batch, cli, history, status_file, wait_for
from tests.conftest import METADATA_DDL, ProjectDir
from tests.sessionhelpers import DDL, TEMPLATE, Feeder, dedup, query, record_status, rows
from tests.tablehelpers import compacted, write_whole

pytestmark = [pytest.mark.spark, pytest.mark.e2e]


def parsed(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


TEAM = "sessioners"  # a team of its own: the other tests share the cluster
ATTEMPT = 240  # seconds: YARN noticing the lost container, a new one launched and the session's queries resumed
# a changelog query beside the others: users kept by key (Debezium's changes in files), counted per account into an
# upsert-kafka topic by the incremental operators, whose jar the containers have from the cluster's classpath
USERS_DDL = """
CREATE TABLE `demo`.`users` (uid STRING, accountId STRING, PRIMARY KEY (uid) NOT ENFORCED)
WITH ('connector' = 'filesystem', 'path' = 'data/users', 'format' = 'debezium-json');
CREATE TABLE `demo`.`per_account` (accountId STRING, users BIGINT{metadata}, PRIMARY KEY (accountId) NOT ENFORCED)
WITH ('connector' = 'upsert-kafka', 'topic' = '{topic}', 'properties.bootstrap.servers' = '{bootstrap}',
      'key.format' = 'json', 'value.format' = 'json');
"""
PER_ACCOUNT = "SELECT accountId, COUNT(1) AS users FROM `demo`.`users` GROUP BY accountId"


def changes(project: ProjectDir, name: str, records: list[tuple[str, str | None, str | None]]) -> None:
    """Debezium's changes of users, as (uid, account before, account after): None where there is no row."""

    def row(uid: str, account: str | None) -> dict | None:
        return None if account is None else {"uid": uid, "accountId": account}

    lines = [
        {
            "op": "c" if before is None else "d" if after is None else "u",
            "before": row(u, before),
            "after": row(u, after),
        }
        for u, before, after in records
    ]
    write_whole(project.root / "data" / "users" / f"{name}.json", "".join(json.dumps(line) + "\n" for line in lines))


def test_a_session_on_yarn_applies_changes_live_and_its_next_attempt_resumes_every_query(
    yarn: YarnCluster, project: ProjectDir, kafka, topic
):
    env = yarn.runner_env(TEAM)
    out = topic("per-account")
    project.ddl("tables", DDL + USERS_DDL.format(metadata=METADATA_DDL, topic=out, bootstrap=kafka.bootstrap))
    project.template(TEMPLATE)
    feeder = Feeder(project.root / "data" / "events")
    feeder.write()
    project.manifest("q-a", query("q-a", "out-a", "SELECT id, amount FROM `demo`.`events` WHERE amount > 10"))
    project.manifest("q-b", dedup("q-b", "out-b", '"id"'))
    changes(project, "001", [("u1", None, "a1"), ("u2", None, "a1"), ("u3", None, "a2"), ("u4", None, "a2")])
    project.manifest("q-cl", query("q-cl", "per_account", PER_ACCOUNT))

    def per_account() -> dict:
        return {row["accountId"]: row["users"] for row in compacted(kafka, out).values()}

    health_file = project.root / ".sql-runner" / "manifests" / "session" / "health.json"
    took: dict[str, float] = {}

    def health() -> dict:
        return json.loads(health_file.read_text()) if health_file.exists() else {}

    def session_line() -> str:
        return cli(project, "session", "status", env=env).stdout.splitlines()[0]

    # on EMR's private network the endpoint listens on every interface and publishes the node it runs on
    started = cli(project, "session", "start", "--control-address", "0.0.0.0", env=env)
    assert "up in" in started.stdout, started.stdout
    tags = urllib.parse.urlencode({"applicationTags": "sql-runner-name:_session"})
    apps = [a for a in yarn.rest(f"apps?{tags}")["apps"]["app"] if f"sql-runner-team:{TEAM}" in a["applicationTags"]]
    assert len(apps) == 1 and apps[0]["state"] == "RUNNING", apps
    app_id = apps[0]["id"]
    assert app_id in started.stdout
    assert len(yarn.rest(f"apps/{app_id}/appattempts")["appAttempts"]["appAttempt"]) == 1
    run_id = health()["run-id"]
    config = project.root / ".sql-runner" / "manifests" / "session" / "runs" / f"{run_id}.json"
    assert json.loads(config.read_text())["run-id"] == run_id  # what the session's attempts start from
    assert f"sql-runner-run:{run_id.lower()}" in apps[0]["applicationTags"].split(",")

    def in_this_attempt(name: str, since: float) -> bool:
        """The query's latest micro-batch completed after ``since`` (epoch seconds), in this session run."""
        status = status_file(project, name)
        stamp = (status.get("progress") or {}).get("timestamp")
        return status.get("session-run") == run_id and stamp is not None and parsed(stamp).timestamp() >= since

    wait_for(lambda: all(batch(project, n) >= 0 for n in ("q-a", "q-b", "q-cl")), "the queries running", ATTEMPT)
    assert status_file(project, "q-a")["session-run"] == run_id
    wait_for(lambda: per_account() == {"a1": 2, "a2": 2}, "the users per account", ATTEMPT, explain=per_account)
    changes(project, "002", [("u4", "a2", "a1")])  # a row of the state moves to another group
    wait_for(lambda: per_account() == {"a1": 3, "a2": 1}, "u4 moved to a1", ATTEMPT, explain=per_account)
    made = (project.root / ".sql-runner" / "checkpoints").rglob(ENGINE_FILE)
    [engine] = [path.read_text().strip() for path in made if "q-cl" in path.parts]
    # on the incremental operators, not recomputed; in layout 4: each account's count comes out of its group with its
    # old value, so the target's rows are kept nowhere else
    assert engine == "incremental 4", engine

    # previews and the console reach the endpoint where the driver runs: the node's address, not this host's loopback
    control = json.loads((project.root / ".sql-runner" / "manifests" / "session" / "control.json").read_text())
    assert not control["url"].startswith("http://127.0.0.1:"), control["url"]
    preview = cli(project, "preview", "--sql", "SELECT id, amount FROM `demo`.`events` WHERE amount >= 2", env=env)
    assert f"answered by session {run_id}" in preview.stderr and "starting local Spark" not in preview.stderr
    assert "2 row(s)" in preview.stdout and "e00002" in preview.stdout
    bearer = {"Authorization": f"Bearer {control['token']}"}
    with urllib.request.urlopen(urllib.request.Request(f"{control['url']}/api/overview", headers=bearer)) as answer:
        overview = json.loads(answer.read())  # the console the session serves there
    assert {row["name"] for row in overview["rows"]} == {"q-a", "q-b", "q-cl"} and overview["team"] == TEAM, overview

    # an application-mode job deployed to YARN meanwhile is judged on the session's warm Spark, not a Spark started
    # by the deploy: a query naming a column the table lacks is refused, nothing deployed; a good one starts
    app_mode = "mode: application\n"
    project.manifest("q-app", app_mode + query("q-app", "out-d", "SELECT id, amount, nope FROM `demo`.`events`"))
    refused = cli(project, "deploy", "manifests/q-app.yaml", env=env, check=False)
    assert refused.returncode == 2 and "nope" in refused.stderr, refused.stderr
    assert record_status(project, "q-app") is None and status_file(project, "q-app") == {}
    session_logs = yarn.node_logs / app_id
    assert "judged q-app for a deploy" in "".join(p.read_text() for p in session_logs.glob("*/std*"))
    project.manifest("q-app", app_mode + query("q-app", "out-d", "SELECT id, amount FROM `demo`.`events`"))
    deployed = cli(project, "deploy", "manifests/q-app.yaml", env=env)
    assert "start v1 with clean state" in deployed.stdout and "judged by the team's session" in deployed.stderr
    assert history(project, "q-app")[-1].inputs["judged-by"].startswith(f"the team's session (session-{run_id}, ")
    wait_for(lambda: batch(project, "q-app") >= 0, "the application-mode job's first batch", ATTEMPT)
    cli(project, "stop", "q-app", "--no-savepoint", env=env)

    feeder.start()
    try:
        # added: its first micro-batch
        began = time.monotonic()
        project.manifest("q-c", query("q-c", "out-c", "SELECT id, amount FROM `demo`.`events`"))
        wait_for(lambda: batch(project, "q-c") >= 0, "the added query's first batch", ATTEMPT)
        took["add"] = time.monotonic() - began

        # changed compatibly: stopped with a savepoint and restored from it, same version
        run_before = status_file(project, "q-a")["run-id"]
        began = time.monotonic()
        project.manifest("q-a", query("q-a", "out-a", "SELECT id, amount FROM `demo`.`events` WHERE amount > 10.0"))
        wait_for(
            lambda: status_file(project, "q-a").get("run-id") not in (None, run_before) and batch(project, "q-a") >= 0,
            "q-a restored",
            ATTEMPT,
        )
        took["change"] = time.monotonic() - began
        assert history(project, "q-a")[-1].summary.startswith("stop with savepoint, then restore v1 from")

        # removed: stopped with a savepoint, its record removed
        began = time.monotonic()
        (project.root / "manifests" / "q-c.yaml").unlink()
        wait_for(lambda: record_status(project, "q-c") == "removed", "q-c removed", ATTEMPT)
        took["remove"] = time.monotonic() - began
        removed_at = rows(project, "out-c")

        # the driver killed: YARN starts the application's next attempt, which resumes every hosted query
        marks = {name: batch(project, name) for name in ("q-a", "q-b")}
        driver = yarn.driver_pid(app_id)
        assert driver is not None, "the session's driver runs in the ApplicationMaster's container"
        killed = time.time()
        began = time.monotonic()
        os.kill(driver, signal.SIGKILL)
        wait_for(
            lambda: all(in_this_attempt(n, killed) and batch(project, n) > marks[n] for n in marks),
            "every hosted query resumed by the next attempt",
            ATTEMPT,
            explain=lambda: f"{health()}; {yarn.rest(f'apps/{app_id}')['app'].get('state')}",
        )
        took["resume after the driver's kill"] = time.monotonic() - began
        attempts = yarn.rest(f"apps/{app_id}/appattempts")["appAttempts"]["appAttempt"]
        assert len(attempts) == 2, attempts
        line = session_line()
        assert f"session {run_id}: running" in line and "attempt 2; attempt 1 ended: " in line, line
        assert "137" in line, line
        for name in marks:
            # restored by the next attempt from its latest state: the checkpoint, or the savepoint a run killed
            # before its first commit had started from
            entry = history(project, name)[-1]
            assert entry.decision == "restore" and parsed(entry.at).timestamp() >= killed, (name, entry)
            assert entry.outcome.resumed_checkpoint or entry.outcome.restored_from, (name, entry)
        # over a file table a preview reads every file present, by now a file per 1.5 s of the feeder's run, in a
        # session whose next attempt is restoring three queries: on a loaded two-core machine that took over 30 s
        sql = "SELECT id FROM `demo`.`events` WHERE id = 'e00003'"
        preview = cli(project, "preview", "--timeout", "180", "--sql", sql, env=env)
        assert f"answered by session {run_id}" in preview.stderr and "1 row(s)" in preview.stdout
        # the changelog query goes on from its state: a2's last user deleted, a3's first added
        changes(project, "003", [("u3", "a2", None), ("u5", None, "a3"), ("u6", None, "a3"), ("u6", "a3", None)])
        wait_for(
            lambda: per_account() == {"a1": 3, "a3": 1}, "the changes after the kill", ATTEMPT, explain=per_account
        )
        entry = history(project, "q-cl")[-1]
        assert entry.decision == "restore" and parsed(entry.at).timestamp() >= killed, entry
        assert entry.outcome.resumed_checkpoint or entry.outcome.restored_from, entry
    finally:
        feeder.stop()

    wanted = {"out-a": {k for k, v in feeder.amounts.items() if v > 10}, "out-b": set(feeder.amounts)}
    wait_for(lambda: all(set(rows(project, t)) == ids for t, ids in wanted.items()), "every event written", ATTEMPT)
    assert "session stopped" in cli(project, "session", "stop", env=env).stdout
    wait_for(lambda: yarn.rest(f"apps/{app_id}")["app"]["state"] == "FINISHED", "the application to finish", 60)
    assert yarn.rest(f"apps/{app_id}")["app"]["finalStatus"] == "SUCCEEDED"
    for table, ids in wanted.items():
        counted = rows(project, table)
        assert set(counted) == ids and max(counted.values()) == 1, table
    assert rows(project, "out-c") == removed_at  # nothing written after the removal
    for name in ("q-a", "q-b", "q-cl"):
        assert status_file(project, name)["state"] == "stopped"
        assert history(project, name)[-1].summary == "session stopped: stop with savepoint"
    assert not config.exists()
    print("session on YARN, seconds to take effect: " + ", ".join(f"{k} {v:.1f}" for k, v in took.items()))
