"""The standalone target on a real Spark master and worker on 127.0.0.1."""

from __future__ import annotations

import json

import pytest

from demo.committed_rows import committed_json_rows
from demo.transactions import transactions, write_batch
from tests.clihelpers import START, cli, status, wait_for
from tests.conftest import ProjectDir
from tests.standalone_cluster import StandaloneCluster

pytestmark = [pytest.mark.spark, pytest.mark.e2e]


@pytest.fixture
def cluster(tmp_path):
    started = StandaloneCluster(tmp_path / "cluster").start()
    yield started
    started.stop()


def test_a_job_runs_on_the_cluster_is_confirmed_by_the_master_and_stops_with_a_savepoint(
    demo_project: ProjectDir, cluster: StandaloneCluster
):
    path = demo_project.root / "manifests" / "high-value.yaml"
    path.write_text(path.read_text() + "trigger-interval: 1 second\n")
    options = ["--target", "standalone", "--master", cluster.master_url, "--master-web-ui", cluster.web_ui]
    rows = transactions(20, start=START, seed=11)
    write_batch(demo_project.root / "data" / "in", "b1", rows)

    assert "start v1 with clean state" in cli(demo_project, "deploy", *options).stdout
    expected = sorted(t.transaction_id for t in rows if t.amount > 500)
    wait_for(
        lambda: (
            sorted(r["transaction_id"] for r in committed_json_rows(demo_project.root / "data" / "out")) == expected
        ),
        f"{len(expected)} rows written by executors on the worker",
    )
    apps = cluster.status()["activeapps"]
    # the job judged its manifest before its version was decided: it is named by its launch, as recorded
    record = json.loads((demo_project.root / ".sql-runner" / "manifests" / "jobs" / "high-value.json").read_text())
    assert record["identity"]["version"] == 1
    name = f"sql-runner:local:high-value:launch-{record['identity']['launch']}"
    assert [a["name"] for a in apps] == [name]
    row = status(demo_project, "high-value", *options)
    assert row["state"] == "running" and row["detail"].startswith(f"app {apps[0]['id']};")

    result = cli(demo_project, "stop", "high-value", *options)
    assert "(graceful)" in result.stdout
    wait_for(lambda: not cluster.status()["activeapps"], "the master to see the application finish")
    stopped = status(demo_project, "high-value", *options)
    assert stopped["state"] == "stopped" and stopped["last progress"] is not None, "where it got to stays visible"
    assert [a["name"] for a in cluster.status()["completedapps"]] == [name]
