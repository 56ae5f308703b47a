"""The deploy Lambda's handler, called directly with S3 event shapes, S3 and EMR under moto.

Bad inputs tried: an invalid manifest (application and session mode), a manifest whose
name does not match its file, an invalid template, ``--mode`` with manifests and an unknown
``--mode``, a repeated delivery of one event, events for the runner's own
writes and for another bucket, a missing configuration variable.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime

import boto3
import pytest
from moto import mock_aws

from runner.aws import deploy_lambda
from runner.core.manifest import Manifest, Meta
from runner.core.protocol.deployed import DeploymentRecord
from tests.clihelpers import invoke, parsed_command
from tests.s3events import BUCKET, s3_event

pytestmark = pytest.mark.s3  # moto, in-process or as its server

TEAM = "team-a"
MANIFEST = """\
name: high-value
description: "Card transactions above 500"
target-table: "`demo`.`high-value-tx`"
sql: SELECT * FROM `demo`.`card-transactions` WHERE amount > 500
"""


@pytest.fixture
def aws(monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    for key in ("AWS_ENDPOINT_URL",):
        monkeypatch.delenv(key, raising=False)
    with mock_aws():
        s3 = boto3.client("s3")
        s3.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": "eu-west-1"})
        s3.put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"})
        emr = boto3.client("emr")
        cluster = emr.run_job_flow(
            Name="team-a-streaming",
            ReleaseLabel="emr-spark-8.0.0",
            Instances={"MasterInstanceType": "m6g.xlarge", "InstanceCount": 1, "KeepJobFlowAliveWhenNoSteps": True},
            JobFlowRole="EMR_EC2_DefaultRole",
            ServiceRole="EMR_DefaultRole",
        )["JobFlowId"]
        config = {
            "CLUSTER_ID": cluster,
            "TEAM": TEAM,
            "MANIFESTS_BUCKET": BUCKET,
            "CHECKPOINTS_BUCKET": "team-a-checkpoints",
            "SAVEPOINTS_BUCKET": "team-a-savepoints",
        }
        for key, value in config.items():
            monkeypatch.setenv(key, value)
        yield s3, emr, cluster


def push(s3, key: str, body: str) -> str:
    return s3.put_object(Bucket=BUCKET, Key=key, Body=body.encode())["VersionId"]


def steps(emr, cluster: str) -> list[dict]:
    return list(reversed(emr.list_steps(ClusterId=cluster)["Steps"]))  # oldest first


def test_a_pushed_manifest_adds_one_step_for_exactly_that_object_version(aws):
    s3, emr, cluster = aws
    version = push(s3, "manifests/high-value.yaml", MANIFEST)
    result = deploy_lambda.handler(s3_event("manifests/high-value.yaml", version), None)
    assert result["results"][0]["result"] == "step"
    [step] = steps(emr, cluster)
    assert step["Name"] == f"sql-runner deploy high-value ({version})"
    assert step["ActionOnFailure"] == "CONTINUE" and step["Config"]["Jar"] == "command-runner.jar"
    args = step["Config"]["Args"]
    assert args[:3] == ["/usr/local/bin/sql-runner", "deploy", "--from-store"]
    assert args[args.index("--object-version") + 1] == version and args[-1] == "manifests/high-value.yaml"
    assert args[args.index("--team") + 1] == TEAM and args[args.index("--target") + 1] == "yarn"
    assert args[args.index("--checkpoints-bucket") + 1] == "team-a-checkpoints"
    assert parsed_command(args)[1]["object_version"] == version  # the CLI takes the command as written

    # S3 delivers at least once: the same event again adds nothing
    again = deploy_lambda.handler(s3_event("manifests/high-value.yaml", version), None)
    assert again["results"][0]["result"] == "duplicate"
    assert len(steps(emr, cluster)) == 1

    # a new version of the manifest is a new deployment
    newer = push(s3, "manifests/high-value.yaml", MANIFEST.replace("500", "1000"))
    deploy_lambda.handler(s3_event("manifests/high-value.yaml", newer), None)
    assert [s["Name"] for s in steps(emr, cluster)][-1] == f"sql-runner deploy high-value ({newer})"


@pytest.mark.parametrize(
    ("text", "code"),
    [
        (MANIFEST.replace("target-table", "tagret-table"), "MANIFEST_UNKNOWN_FIELD"),
        (MANIFEST.replace("name: high-value", "name: other-name"), "MANIFEST_NAME_MISMATCH"),
        ("name: high-value\nsql: [oops\n", "MANIFEST_INVALID_YAML"),
    ],
)
def test_an_invalid_manifest_adds_no_step_and_says_why_in_errors(aws, text, code):
    s3, emr, cluster = aws
    version = push(s3, "manifests/high-value.yaml", text)
    result = deploy_lambda.handler(s3_event("manifests/high-value.yaml", version), None)["results"][0]
    assert result["result"] == "invalid"
    assert steps(emr, cluster) == []
    report = json.loads(s3.get_object(Bucket=BUCKET, Key="errors/high-value.json")["Body"].read())
    assert report["version-id"] == version and any(code in p for p in report["problems"]), report

    # fixed: deployed, and the error report is gone
    fixed = push(s3, "manifests/high-value.yaml", MANIFEST)
    deploy_lambda.handler(s3_event("manifests/high-value.yaml", fixed), None)
    assert len(steps(emr, cluster)) == 1
    assert "Contents" not in s3.list_objects_v2(Bucket=BUCKET, Prefix="errors/")


def test_an_invalid_template_blocks_manifests_with_a_report(aws):
    s3, emr, cluster = aws
    push(s3, "manifests/job-template.yaml", "name: not-allowed-here\n")
    version = push(s3, "manifests/high-value.yaml", MANIFEST)
    result = deploy_lambda.handler(s3_event("manifests/high-value.yaml", version), None)["results"][0]
    assert result["result"] == "invalid" and "TEMPLATE_PER_QUERY_FIELD" in result["problems"][0]
    assert steps(emr, cluster) == []


def test_a_deleted_manifest_adds_an_undeploy_step(aws):
    s3, emr, cluster = aws
    push(s3, "manifests/high-value.yaml", MANIFEST)
    marker = s3.delete_object(Bucket=BUCKET, Key="manifests/high-value.yaml")["VersionId"]
    deploy_lambda.handler(s3_event("manifests/high-value.yaml", marker, created=False), None)
    deploy_lambda.handler(s3_event("manifests/high-value.yaml", marker, created=False), None)
    [step] = steps(emr, cluster)
    assert step["Name"] == f"sql-runner undeploy high-value ({marker})"
    command, params = parsed_command(step["Config"]["Args"])
    assert command == "undeploy" and params["name"] == "high-value"


def test_session_mode_manifests_are_validated_but_left_to_the_session(aws):
    """The session watches manifests/ itself: the Lambda reports an invalid session manifest and adds no
    step for a valid one (``mode`` from the manifest or the template), nor for deleting one whose job
    the session hosts. An application-mode manifest still gets its step."""
    s3, emr, cluster = aws
    invalid = push(s3, "manifests/high-value.yaml", "mode: session\n" + MANIFEST.replace("sql:", "sqll:"))
    result = deploy_lambda.handler(s3_event("manifests/high-value.yaml", invalid), None)["results"][0]
    assert result["result"] == "invalid" and steps(emr, cluster) == []
    assert s3.get_object(Bucket=BUCKET, Key="errors/high-value.json")
    valid = push(s3, "manifests/high-value.yaml", "mode: session\n" + MANIFEST)
    result = deploy_lambda.handler(s3_event("manifests/high-value.yaml", valid), None)["results"][0]
    assert result["result"] == "session" and "the team's session applies it" in result["why"]
    assert steps(emr, cluster) == [] and "Contents" not in s3.list_objects_v2(Bucket=BUCKET, Prefix="errors/")

    push(s3, "manifests/job-template.yaml", "mode: session\n")
    by_template = push(s3, "manifests/other.yaml", MANIFEST.replace("name: high-value", "name: other"))
    assert deploy_lambda.handler(s3_event("manifests/other.yaml", by_template), None)["results"][0]["result"] == (
        "session"
    )
    overridden = push(s3, "manifests/other.yaml", "mode: application\n" + MANIFEST.replace("high-value", "other"))
    assert deploy_lambda.handler(s3_event("manifests/other.yaml", overridden), None)["results"][0]["result"] == "step"
    assert [s["Name"] for s in steps(emr, cluster)] == [f"sql-runner deploy other ({overridden})"]

    # deletions: the deployed record says where the job runs
    for name, target in (("high-value", "session"), ("other", "yarn")):
        meta = Meta(query_id="q", query_version=1, query_create_timestamp=datetime(2026, 11, 21, tzinfo=UTC))
        manifest = Manifest(name=name, target_table="`demo`.`out`", sql="SELECT 1", meta=meta)
        record = DeploymentRecord(
            manifest=manifest, run_id="run-1", target=target, deployed_at=datetime(2026, 11, 21, tzinfo=UTC)
        )
        s3.put_object(Bucket=BUCKET, Key=f"deployed/{name}.yaml", Body=record.encode())
        marker = s3.delete_object(Bucket=BUCKET, Key=f"manifests/{name}.yaml")["VersionId"]
        deploy_lambda.handler(s3_event(f"manifests/{name}.yaml", marker, created=False), None)
    assert [s["Name"] for s in steps(emr, cluster)][1:] == [f"sql-runner undeploy other ({marker})"]


def test_a_table_or_template_change_redeploys_everything(aws):
    s3, emr, cluster = aws
    version = push(s3, "manifests/tables/demo tables.sql", "CREATE TABLE t (a INT) WITH ('connector' = 'print');")
    deploy_lambda.handler(s3_event("manifests/tables/demo tables.sql", version), None)
    [step] = steps(emr, cluster)
    args = step["Config"]["Args"]
    assert args[1:3] == ["deploy", "--from-store"] and args[-3:] == ["--all", "--mode", "application"]
    assert parsed_command(args)[1]["all_"] and parsed_command(args)[1]["mode"] == "application"
    assert args[args.index("--spark-submit") + 1] == "/usr/bin/spark-submit"
    assert "manifests/tables/demo tables.sql" in step["Name"]


@pytest.mark.parametrize(
    "key",
    [
        "deployed/high-value.yaml",
        "history/high-value/20261121T070000Z.json",
        "errors/high-value.json",
        "deploy-requests/high-value/abc.json",
        "status/high-value.json",
        "manifests/README.md",
    ],
)
def test_the_runners_own_writes_and_other_files_never_add_a_step(aws, key):
    s3, emr, cluster = aws
    version = push(s3, key, "{}")
    result = deploy_lambda.handler(s3_event(key, version), None)["results"][0]
    assert result["result"] == "ignored"
    assert steps(emr, cluster) == []
    claims = [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix="deploy-requests/").get("Contents", [])]
    assert claims == ([key] if key.startswith("deploy-requests/") else []), "no event claimed"


def test_another_bucket_is_ignored_and_missing_configuration_is_named(aws, monkeypatch):
    s3, emr, cluster = aws
    result = deploy_lambda.handler(s3_event("manifests/high-value.yaml", "v1", bucket="team-b-manifests"), None)
    assert result["results"][0]["result"] == "ignored" and steps(emr, cluster) == []
    monkeypatch.delenv("CLUSTER_ID")
    with pytest.raises(RuntimeError, match="missing configuration: CLUSTER_ID"):
        deploy_lambda.handler(s3_event("manifests/high-value.yaml", "v1"), None)


def test_the_step_commands_refuse_bad_input_and_change_nothing(demo_project):
    both = invoke(demo_project, "deploy", "--mode", "application", "manifests/high-value.yaml", check=False)
    assert both.returncode == 2 and "MODE_WITH_PATHS" in both.stderr
    unknown = invoke(demo_project, "plan", "--mode", "cluster", check=False)
    assert unknown.returncode == 2 and "'cluster' is not one of 'application', 'session'" in unknown.stderr
    pinned = invoke(demo_project, "deploy", "--object-version", "abc", check=False)
    assert pinned.returncode == 2 and "OBJECT_VERSION_NEEDS_ONE_MANIFEST" in pinned.stderr
    present = invoke(demo_project, "undeploy", "high-value", check=False)
    assert present.returncode == 2 and "MANIFEST_STILL_PRESENT" in present.stderr
    (demo_project.root / "manifests" / "high-value.yaml").unlink()
    assert "high-value: no change -> ok" in invoke(demo_project, "undeploy", "high-value").stdout
    assert not (demo_project.root / ".sql-runner" / "manifests" / "deployed").exists()


class FlakyEmr:
    """The real (moto) EMR client, except that its next ``fail`` AddJobFlowSteps calls are throttled."""

    def __init__(self, emr, fail: int):
        self.emr, self.fail = emr, fail

    def add_job_flow_steps(self, **kwargs):
        from botocore.exceptions import ClientError

        if self.fail:
            self.fail -= 1
            raise ClientError({"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"}}, "AddJobFlowSteps")
        return self.emr.add_job_flow_steps(**kwargs)

    def __getattr__(self, name):
        return getattr(self.emr, name)


def handler(s3, emr):
    return deploy_lambda.Handler(deploy_lambda.LambdaSettings.from_env(dict(os.environ)), s3, emr)


def test_a_throttled_step_is_added_by_the_retry_exactly_once(aws):
    s3, emr, cluster = aws
    version = push(s3, "manifests/high-value.yaml", MANIFEST)
    event = deploy_lambda.S3Event.parse(s3_event("manifests/high-value.yaml", version)["Records"][0])
    flaky = handler(s3, FlakyEmr(emr, fail=1))
    with pytest.raises(Exception, match="ThrottlingException"):
        flaky.one(event)  # Lambda retries an invocation that raised
    assert steps(emr, cluster) == []
    assert "Contents" not in s3.list_objects_v2(Bucket=BUCKET, Prefix="deploy-requests/"), "the claim withdrawn"
    assert flaky.one(event)["result"] == "step"
    assert flaky.one(event)["result"] == "duplicate"
    [step] = steps(emr, cluster)
    claim = json.loads(s3.get_object(Bucket=BUCKET, Key=f"deploy-requests/high-value/{version}.json")["Body"].read())
    assert claim["state"] == "added" and claim["step-id"] == step["Id"]


def test_a_claim_left_pending_is_waited_for_then_completed_or_taken_over(aws):
    from datetime import UTC, datetime, timedelta

    s3, emr, cluster = aws
    version = push(s3, "manifests/high-value.yaml", MANIFEST)
    event = deploy_lambda.S3Event.parse(s3_event("manifests/high-value.yaml", version)["Records"][0])
    key = f"deploy-requests/high-value/{version}.json"
    now = datetime(2026, 11, 21, 7, 0, tzinfo=UTC)
    name = f"sql-runner deploy high-value ({version})"
    pending = {"key": event.key, "state": "pending", "at": now.isoformat(), "step-name": name}
    s3.put_object(Bucket=BUCKET, Key=key, Body=json.dumps(pending).encode())
    fresh = handler(s3, emr)
    fresh.now = lambda: now + timedelta(seconds=30)
    with pytest.raises(deploy_lambda.ClaimPending):  # another invocation is adding it: retried later
        fresh.one(event)
    later = handler(s3, emr)
    later.now = lambda: now + timedelta(seconds=deploy_lambda.PENDING_SECONDS + 1)
    assert later.one(event)["result"] == "step", "an abandoned claim is taken over"
    assert len(steps(emr, cluster)) == 1

    # an invocation that died after adding its step but before marking the claim: the step is found by name
    newer = push(s3, "manifests/high-value.yaml", MANIFEST.replace("500", "600"))
    event = deploy_lambda.S3Event.parse(s3_event("manifests/high-value.yaml", newer)["Records"][0])
    name = f"sql-runner deploy high-value ({newer})"
    emr.add_job_flow_steps(
        JobFlowId=cluster,
        Steps=[{"Name": name, "ActionOnFailure": "CONTINUE", "HadoopJarStep": {"Jar": "command-runner.jar"}}],
    )
    pending = {"key": event.key, "state": "pending", "at": now.isoformat(), "step-name": name}
    s3.put_object(Bucket=BUCKET, Key=f"deploy-requests/high-value/{newer}.json", Body=json.dumps(pending).encode())
    result = later.one(event)
    assert result["result"] == "duplicate" and len(steps(emr, cluster)) == 2
