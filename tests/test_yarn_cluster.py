"""The run's YARN cluster is a real one: Spark applications submitted to it in cluster mode are scheduled by its
ResourceManager and run in containers its NodeManager launches (demo/yarn_cluster.py); what it refuses, the runner
says naming the setting. A query deployed, run, stopped and restarted there: tests/test_yarn_deploys.py."""

from __future__ import annotations

import os
import subprocess
import textwrap
from pathlib import Path

import pyspark
import pytest

from demo.yarn_cluster import YarnCluster
from tests.clihelpers import cli, history, statuses
from tests.conftest import ProjectDir

pytestmark = [pytest.mark.spark, pytest.mark.e2e]

SPARK_HOME = Path(pyspark.__file__).parent


def submit(yarn: YarnCluster, app: Path, *conf: str, timeout: float = 240) -> subprocess.CompletedProcess:
    """spark-submit ``app`` to the cluster in cluster mode, the driver in the ApplicationMaster's container, with the
    cluster's Spark defaults (its Spark jars and Python installed on the node, not shipped)."""
    command = [str(SPARK_HOME / "bin" / "spark-submit"), "--master", "yarn", "--deploy-mode", "cluster"]
    for setting in conf:
        command += ["--conf", setting]
    env = {**os.environ, **yarn.client_env()}
    return subprocess.run([*command, str(app)], capture_output=True, text=True, env=env, timeout=timeout, check=False)


def test_an_application_submitted_in_cluster_mode_is_scheduled_by_the_resource_manager(yarn: YarnCluster, tmp_path):
    app = tmp_path / "count.py"
    app.write_text(
        textwrap.dedent(
            """
            from pyspark.sql import SparkSession

            spark = SparkSession.builder.getOrCreate()
            total = spark.range(1000).selectExpr("sum(id) AS total").first().total
            print(f"total={total} master={spark.sparkContext.master}")
            spark.stop()
            """
        )
    )
    done = submit(yarn, app, "spark.app.name=sql-runner-yarn-probe")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "final status: SUCCEEDED" in done.stderr
    app_id = next(word for word in done.stderr.split() if word.startswith("application_"))

    seen = yarn.rest(f"apps/{app_id}")["app"]
    assert (seen["name"], seen["state"], seen["finalStatus"]) == ("sql-runner-yarn-probe", "FINISHED", "SUCCEEDED")
    attempts = yarn.rest(f"apps/{app_id}/appattempts")["appAttempts"]["appAttempt"]
    assert [attempt["id"] for attempt in attempts] == [1]
    container = attempts[0]["containerId"]
    # the driver ran in the ApplicationMaster's container, launched by the NodeManager: its output is there
    stdout = yarn.node_logs / app_id / container / "stdout"
    assert "total=499500 master=yarn" in stdout.read_text()


def test_a_driver_larger_than_any_node_is_refused_naming_the_setting_and_nothing_is_deployed(
    yarn: YarnCluster, demo_project: ProjectDir
):
    node = yarn.rest("nodes")["nodes"]["node"][0]
    largest = node["availMemoryMB"] + node["usedMemoryMB"]
    manifest = demo_project.root / "manifests" / "high-value.yaml"
    manifest.write_text(manifest.read_text() + f"sparkProperties:\n  spark.driver.memory: {largest + 1024}m\n")
    options = ["--target", "yarn", "--resource-manager", f"http://{yarn.web_address}", "--team", "big-drivers"]
    result = cli(demo_project, "deploy", *options, env=yarn.client_env(), check=False)
    assert result.returncode == 2, result.stdout + result.stderr
    [line] = [line for line in result.stderr.splitlines() if "YARN_CONTAINER_TOO_LARGE" in line]
    assert "the driver container asks for" in line and f"than the {largest} MB" in line, line
    assert "spark.driver.memory" in line and "is above the max threshold" in line, line
    assert "high-value" not in statuses(demo_project, *options), "nothing is recorded as deployed"
    assert not [app for app in yarn.active_apps() if "sql-runner-team:big-drivers" in app["applicationTags"]]


def test_a_deploy_to_a_queue_the_resource_manager_does_not_have_fails_naming_it(
    yarn: YarnCluster, demo_project: ProjectDir
):
    """The runner's YARN target against the real ResourceManager: its refusal is quoted by its exception, not by the
    tail of the stack trace and shutdown logging spark-submit prints after it; nothing runs."""
    manifest = demo_project.root / "manifests" / "high-value.yaml"
    manifest.write_text(manifest.read_text() + "sparkProperties:\n" + "  spark.yarn.queue: nightly\n")
    env = yarn.client_env()
    # a team of its own: the cluster is shared with the other tests, which deploy the same demo query
    options = ["--target", "yarn", "--resource-manager", f"http://{yarn.web_address}", "--team", "nightly-analysts"]
    result = cli(demo_project, "deploy", *options, env=env, check=False)
    assert result.returncode == 2, result.stdout + result.stderr
    [line] = [line for line in result.stderr.splitlines() if "YARN_QUEUE_UNKNOWN" in line]
    assert "YARN has no queue nightly (spark.yarn.queue)" in line and "unknown queue: nightly" in line, line
    assert " at org.apache" not in line and "ShutdownHookManager" not in line, line
    apps = (yarn.rest("apps?states=NEW,NEW_SAVING,SUBMITTED,ACCEPTED,RUNNING").get("apps") or {}).get("app") or []
    assert not [app for app in apps if "sql-runner-team:nightly-analysts" in app.get("applicationTags", "")]
    assert "high-value" not in statuses(demo_project, *options), "nothing is recorded as deployed"
    [entry] = history(demo_project, "high-value")  # the attempt, and how it went
    assert entry.outcome.result != "ok" and "unknown queue" in (entry.outcome.error or ""), entry.outcome
