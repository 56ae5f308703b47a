"""The yarn target through the real CLI, against a FAKE ResourceManager and a FAKE spark-submit, for what the
real one (tests/test_yarn_cluster.py and the other yarn tests) cannot show: a kill the ResourceManager refuses,
a submission failing in a way the test chooses, decoy applications set up at will, and a ResourceManager that
does not answer at all or answers 503.

Bad inputs tried: a spark-submit that fails, an unreachable ResourceManager, a kill the
ResourceManager refuses, a ResourceManager answering 503 for a while and for ever, a 404; decoy
applications with a neighbouring name, another team, the same name without our tags, and a finished one.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from runner.core.bucket import LocalBucket
from runner.core.errors import UserError
from runner.state.records import read_deployed
from runner.targets.yarn import YarnTarget
from tests.clihelpers import cli, status
from tests.conftest import ProjectDir
from tests.fake_yarn import FakeResourceManager, fake_spark_submit

pytestmark = [pytest.mark.spark, pytest.mark.e2e]


def tags(team: str, name: str, version: int = 1) -> list[str]:
    return ["sql-runner", f"sql-runner-team:{team}", f"sql-runner-name:{name}", f"sql-runner-version:{version}"]


def test_deploy_submits_in_cluster_mode_finds_the_app_by_exact_tags_and_kills_only_it(
    demo_project: ProjectDir, tmp_path: Path
):
    with FakeResourceManager() as rm:
        decoys = {
            rm.add_app("sql-runner:analytics:high-value-2:v1", tags("analytics", "high-value-2")),
            rm.add_app("sql-runner:fraud:high-value:v1", tags("fraud", "high-value")),
            rm.add_app("sql-runner:analytics:high-value:v1", ["nightly-etl"]),
        }
        finished = rm.add_app("sql-runner:analytics:high-value:v1", tags("analytics", "high-value"), state="KILLED")
        options = ["--target", "yarn", "--resource-manager", rm.url, "--team", "analytics"]
        submit = fake_spark_submit(tmp_path / "spark-submit", rm.url)

        result = cli(demo_project, "deploy", *options, "--spark-submit", str(submit))
        assert "start v1 with clean state" in result.stdout
        [ours] = set(rm.apps) - decoys - {finished}
        [args] = rm.submissions
        spec = json.loads(Path(args[args.index("--spec-uri") + 1]).read_text())  # the spec is in the store
        # its run too, lowercased as YARN keeps tags
        run_tag = f"sql-runner-run:{spec['run-id'].lower()}"
        assert rm.apps[ours]["applicationTags"] == ",".join([*tags("analytics", "high-value"), run_tag])
        assert rm.apps[ours]["name"] == "sql-runner:analytics:high-value:v1"
        assert args[0] == str(submit), "an argument list, not a shell string"
        assert args[args.index("--master") + 1] == "yarn" and args[args.index("--deploy-mode") + 1] == "cluster"
        assert spec["manifest"]["name"] == "high-value" and spec["checkpoint"].endswith(
            f"/checkpoints/high-value/1/{spec['run-id']}"
        )
        assert not any(a.startswith("spark.pyspark.python=") for a in args), "the cluster's Python, not this one"

        row = status(demo_project, "high-value", *options)
        assert row["job"] == ours and row["target"] == "yarn"

        # unchanged and running on YARN -> nothing; no second submission
        assert "no change" in cli(demo_project, "deploy", *options, "--spark-submit", str(submit)).stdout
        assert len(rm.submissions) == 1

        # a kill the ResourceManager refuses: a clear error, the application still runs
        rm.fail_kills = True
        # (the fake application never answers a stop request: after --stop-timeout the runner kills it)
        refused = cli(
            demo_project, "stop", "high-value", "--no-savepoint", *options, "--stop-timeout", "1", check=False
        )
        assert refused.returncode == 2 and "KILL_REFUSED" in refused.stderr and ours in refused.stderr
        assert f"refused to kill {ours}: HTTP 403: not allowed" in refused.stderr, "with what it said"
        assert rm.state(ours) == "ACCEPTED"

        rm.fail_kills = False
        cli(demo_project, "stop", "high-value", "--no-savepoint", *options, "--stop-timeout", "1")
        assert rm.kills == [ours]
        assert all(rm.state(app) == "RUNNING" for app in decoys), "decoys untouched"
        assert status(demo_project, "high-value", *options)["state"] != "running"


def test_a_failing_spark_submit_is_reported_records_nothing_and_the_next_deploy_starts_the_job_anew(
    demo_project: ProjectDir, tmp_path: Path
):
    """A submission that fails the way the test chooses ("queue is full"); the real ResourceManager's own refusals
    (an unknown queue, a container larger than the node) are in tests/test_yarn_cluster.py."""
    with FakeResourceManager() as rm:
        options = ["--target", "yarn", "--resource-manager", rm.url]
        submit = fake_spark_submit(tmp_path / "spark-submit", rm.url, fail=True)
        result = cli(demo_project, "deploy", *options, "--spark-submit", str(submit), check=False)
        assert result.returncode == 2
        assert "SUBMIT_FAILED" in result.stderr and "queue is full" in result.stderr
        assert rm.apps == {}
        record, _ = read_deployed(LocalBucket(demo_project.root / ".sql-runner" / "manifests"), "high-value")
        assert record is None, "nothing recorded as deployed"

        # the next deploy starts it as the new job it still is
        fake_spark_submit(submit, rm.url)
        plan = json.loads(cli(demo_project, "plan", "--json", *options).stdout)
        assert (plan["decision"], plan["version"]) == ("start", 1)
        assert "NEW_JOB" in [reason["code"] for reason in plan["reasons"]]
        cli(demo_project, "deploy", *options, "--spark-submit", str(submit))
        assert len(rm.apps) == 1


def test_an_unreachable_resource_manager_stops_the_deploy_before_anything_changes(
    demo_project: ProjectDir, tmp_path: Path
):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}"
    submit = fake_spark_submit(tmp_path / "spark-submit", url)
    result = cli(
        demo_project,
        "deploy",
        "--target",
        "yarn",
        "--resource-manager",
        url,
        "--spark-submit",
        str(submit),
        check=False,
    )
    assert result.returncode == 2
    assert "RESOURCE_MANAGER_UNREACHABLE" in result.stderr and url in result.stderr
    assert "check --resource-manager" in result.stderr, "it names the setting"
    record, _ = read_deployed(LocalBucket(demo_project.root / ".sql-runner" / "manifests"), "high-value")
    assert record is None, "nothing deployed"


def test_a_busy_resource_manager_is_asked_again_and_one_that_stays_busy_or_refuses_is_a_clear_error(
    demo_project: ProjectDir, tmp_path: Path
):
    with FakeResourceManager() as rm:
        options = ["--target", "yarn", "--resource-manager", rm.url, "--team", "analytics"]
        submit = fake_spark_submit(tmp_path / "spark-submit", rm.url)
        cli(demo_project, "deploy", *options, "--spark-submit", str(submit))
        [app] = rm.apps

        # three answers of 503, as a loaded ResourceManager gives: status waits them out and reads the job
        rm.unavailable = 3
        assert status(demo_project, "high-value", *options)["job"] == app
        assert rm.unavailable == 0, "each 503 was asked again"

        # a ResourceManager that stays busy: the error names the request and quotes the ResourceManager
        target = YarnTarget(rm.url, LocalBucket(tmp_path / "records"), retry_for=1.0)
        rm.unavailable, before = 10_000, rm.gets
        with pytest.raises(UserError) as busy:
            target.find("analytics", "high-value")
        said = "HTTP 503 to GET /ws/v1/cluster/apps: ConcurrentModificationException: attempts changed, try again"
        assert said in str(busy.value)
        assert 2 <= rm.gets - before < 10, "asked again with growing pauses, within its second"

        # an answer that is no "try again" is not asked again
        rm.unavailable, before = 0, rm.gets
        with pytest.raises(UserError) as missing:
            target.attempts("application_1_0404")
        assert "HTTP 404 to GET /ws/v1/cluster/apps/application_1_0404/appattempts" in str(missing.value)
        assert rm.gets - before == 1

        # a kill answered 503 twice is asked again and kills the application
        job = target.find("analytics", "high-value")
        rm.unavailable = 2
        target.stop(job, force=True)
        assert rm.kills == [app] and rm.unavailable == 0
