"""AWS on this machine (infra/localaws.py): moto's server over TLS with a throwaway CA, the prerequisites of
``teams.yaml``, and the named corrections where moto 5.2.5 serves an API the stacks' provider calls otherwise
than AWS; then the platform team's whole journey on it (``pytest -m platform``): the real ``infra.terraform
deploy`` of every team's stack, a plan with no change, the EMR primary node, its steps and the deploy Lambda
stood in for (infra/localplatform.py), query authors' pushes run on a real YARN, and the destroy."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pytest
import yaml
from botocore.exceptions import ClientError

from infra.localaws import (
    PROVIDER_MIRROR,
    LocalAws,
    endpoint_client,
    provide_prerequisites,
    provider_mirror_config,
)
from infra.teams import TeamsError, load_teams
from runner.console.overview import Stall

ROOT = Path(__file__).resolve().parents[1]
PLUGINS = PROVIDER_MIRROR
CONFIG = load_teams()

pytestmark = pytest.mark.s3


@pytest.fixture
def aws(tmp_path):
    local = LocalAws(tmp_path / "local-aws", kafka_bootstrap="127.0.0.1:19092").start()
    yield local
    local.stop()


def client(aws: LocalAws, service: str, region: str = "eu-west-1"):
    return endpoint_client(aws.env(region), service, region)


def test_the_endpoint_speaks_tls_only_with_a_certificate_its_own_ca_signed(aws):
    trusted = ssl.create_default_context(cafile=str(aws.ca))
    with urllib.request.urlopen(f"{aws.endpoint}/moto-api/data.json", context=trusted) as answer:
        assert answer.status == 200
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        urllib.request.urlopen(f"{aws.endpoint}/moto-api/data.json", context=ssl.create_default_context())
    plain = aws.endpoint.replace("https://", "http://")
    with pytest.raises((urllib.error.URLError, ConnectionError)):
        urllib.request.urlopen(f"{plain}/moto-api/data.json", timeout=5)
    assert not list(aws.folder.glob("*ca*key*")), "the CA's key is never written"


def test_the_platform_teams_prerequisites_have_the_ids_teams_yaml_names(aws):
    made = provide_prerequisites(aws, CONFIG)
    assert any(CONFIG.platform.state_bucket in line for line in made)
    s3 = client(aws, "s3", CONFIG.platform.state_region)
    assert s3.get_bucket_versioning(Bucket=CONFIG.platform.state_bucket)["Status"] == "Enabled"
    for team in CONFIG.teams:
        ec2 = client(aws, "ec2", team.region)
        vpc = ec2.describe_vpcs(VpcIds=[team.network.vpc_id])["Vpcs"][0]
        assert vpc["CidrBlock"] == team.network.vpc_cidr
        subnets = ec2.describe_subnets(SubnetIds=team.network.subnet_ids)["Subnets"]
        assert sorted(s["SubnetId"] for s in subnets) == sorted(team.network.subnet_ids)
        assert {s["VpcId"] for s in subnets} == {team.network.vpc_id}
        assert len({s["AvailabilityZone"] for s in subnets}) == len(subnets), "one zone each"
    # a subnet teams.yaml does not name does not exist: what the stacks would be refused with
    with pytest.raises(ClientError, match="InvalidSubnetID.NotFound"):
        client(aws, "ec2").describe_subnets(SubnetIds=["subnet-0a1b2c3d4e5f69999"])


def test_a_tls_only_bucket_policy_lets_tls_requests_through_and_logging_into_a_bucket_that_lets_s3_deliver(aws):
    s3 = client(aws, "s3")
    for name in ("logs", "data"):
        s3.create_bucket(Bucket=name, CreateBucketConfiguration={"LocationConstraint": "eu-west-1"})
    deny_without_tls = {
        "Effect": "Deny",
        "Principal": "*",
        "Action": "s3:*",
        "Resource": ["arn:aws:s3:::data", "arn:aws:s3:::data/*"],
        "Condition": {"Bool": {"aws:SecureTransport": "false"}},
    }
    s3.put_bucket_policy(Bucket="data", Policy=json.dumps({"Version": "2012-10-17", "Statement": [deny_without_tls]}))
    s3.put_object(Bucket="data", Key="k", Body=b"v")  # moto alone denies it: the Bool condition is not read
    assert s3.get_object(Bucket="data", Key="k")["Body"].read() == b"v"
    deny_all = {**deny_without_tls, "Condition": {"Bool": {"aws:SecureTransport": "true"}}}
    s3.put_bucket_policy(Bucket="data", Policy=json.dumps({"Version": "2012-10-17", "Statement": [deny_all]}))
    with pytest.raises(ClientError, match="Forbidden|AccessDenied"):
        s3.put_object(Bucket="data", Key="k2", Body=b"v")  # a deny whose condition holds still denies
    s3.delete_bucket_policy(Bucket="data")

    logging = {"LoggingEnabled": {"TargetBucket": "logs", "TargetPrefix": "s3-access/data/"}}
    with pytest.raises(ClientError, match="InvalidTargetBucketForLogging"):
        s3.put_bucket_logging(Bucket="data", BucketLoggingStatus=logging)  # no delivery permission yet
    delivery = {
        "Effect": "Allow",
        "Principal": {"Service": "logging.s3.amazonaws.com"},
        "Action": "s3:PutObject",
        "Resource": "arn:aws:s3:::logs/s3-access/data/*",
    }
    tls_only = {**deny_without_tls, "Resource": ["arn:aws:s3:::logs", "arn:aws:s3:::logs/*"]}
    s3.put_bucket_policy(Bucket="logs", Policy=json.dumps({"Version": "2012-10-17", "Statement": [tls_only, delivery]}))
    s3.put_bucket_logging(Bucket="data", BucketLoggingStatus=logging)  # moto alone fails on the "*" principal
    assert s3.get_bucket_logging(Bucket="data")["LoggingEnabled"]["TargetPrefix"] == "s3-access/data/"


def test_msk_budgets_emr_and_lambda_keep_and_serve_what_the_provider_reads_back(aws, tmp_path):
    kafka = client(aws, "kafka")
    arn = kafka.create_cluster(
        ClusterName="c",
        KafkaVersion="3.8.x",
        NumberOfBrokerNodes=2,
        BrokerNodeGroupInfo={"InstanceType": "kafka.m7g.large", "ClientSubnets": ["subnet-1", "subnet-2"]},
    )["ClusterArn"]
    described = kafka.describe_cluster(ClusterArn=arn)["ClusterInfo"]
    assert described["State"] == "ACTIVE"
    assert "ConfigurationArn" not in described["CurrentBrokerSoftwareInfo"], "no configuration was given"
    assert kafka.get_bootstrap_brokers(ClusterArn=arn)["BootstrapBrokerStringSaslIam"] == "127.0.0.1:19092"
    kafka.delete_cluster(ClusterArn=arn)
    with pytest.raises(ClientError, match="NotFoundException"):
        kafka.describe_cluster_v2(ClusterArn=arn)

    budgets = client(aws, "budgets", "us-east-1")
    notification = {"NotificationType": "ACTUAL", "ComparisonOperator": "GREATER_THAN", "Threshold": 100.0}
    subscriber = {"SubscriptionType": "EMAIL", "Address": "ops@example.com"}
    budgets.create_budget(
        AccountId="123456789012",
        Budget={
            "BudgetName": "b",
            "BudgetLimit": {"Amount": "10", "Unit": "USD"},
            "TimeUnit": "MONTHLY",
            "BudgetType": "COST",
        },
        NotificationsWithSubscribers=[{"Notification": notification, "Subscribers": [subscriber]}],
        ResourceTags=[{"Key": "team", "Value": "payments"}],
    )
    subscribers = budgets.describe_subscribers_for_notification(
        AccountId="123456789012", BudgetName="b", Notification=notification
    )["Subscribers"]
    assert subscribers == [subscriber]
    budget_arn = "arn:aws:budgets::123456789012:budget/b"
    assert budgets.list_tags_for_resource(ResourceARN=budget_arn)["ResourceTags"] == [
        {"Key": "team", "Value": "payments"}
    ]
    budgets.untag_resource(ResourceARN=budget_arn, ResourceTagKeys=["team"])
    assert budgets.list_tags_for_resource(ResourceARN=budget_arn)["ResourceTags"] == []

    emr = client(aws, "emr")
    cluster = emr.run_job_flow(
        Name="e",
        ReleaseLabel="emr-7.0.0",
        Instances={"MasterInstanceType": "m5.xlarge", "InstanceCount": 1, "KeepJobFlowAliveWhenNoSteps": True},
        JobFlowRole="EMR_EC2_DefaultRole",
        ServiceRole="EMR_DefaultRole",
        AutoTerminationPolicy={"IdleTimeout": 3600},
        ManagedScalingPolicy={
            "ComputeLimits": {"UnitType": "Instances", "MinimumCapacityUnits": 1, "MaximumCapacityUnits": 4}
        },
    )["JobFlowId"]
    assert emr.get_auto_termination_policy(ClusterId=cluster)["AutoTerminationPolicy"] == {"IdleTimeout": 3600}
    limits = emr.get_managed_scaling_policy(ClusterId=cluster)["ManagedScalingPolicy"]["ComputeLimits"]
    assert limits["MaximumCapacityUnits"] == 4
    emr.remove_managed_scaling_policy(ClusterId=cluster)
    assert "ManagedScalingPolicy" not in emr.get_managed_scaling_policy(ClusterId=cluster)
    assert emr.list_instance_fleets(ClusterId=cluster)["InstanceFleets"] == []

    code = tmp_path / "f.zip"
    import zipfile

    with zipfile.ZipFile(code, "w") as archive:
        archive.writestr("handler.py", "def handle(event, context):\n    return event\n")
    iam = client(aws, "iam")
    role = iam.create_role(RoleName="r", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    lam = client(aws, "lambda")
    dlq = "arn:aws:sqs:eu-west-1:123456789012:dlq"
    lam.create_function(
        FunctionName="f",
        Runtime="python3.11",
        Role=role,
        Handler="handler.handle",
        Code={"ZipFile": code.read_bytes()},
        DeadLetterConfig={"TargetArn": dlq},
        LoggingConfig={"LogFormat": "JSON", "LogGroup": "/aws/lambda/f"},
    )
    config = lam.get_function_configuration(FunctionName="f")
    assert config["DeadLetterConfig"] == {"TargetArn": dlq}
    assert config["LoggingConfig"]["LogFormat"] == "JSON"


def test_emptying_a_versioned_bucket_of_more_versions_than_a_listing_page_leaves_nothing(aws):
    """The destroy's emptying (``--delete-data``) of a bucket holding more than a page of versions: objects, their
    overwritten versions and delete markers. Pages of 100 here (1000 in a destroy), so that the bucket is filled
    with 10 times fewer requests."""
    from concurrent.futures import ThreadPoolExecutor

    from infra.terraform import _empty, _object_count

    s3 = client(aws, "s3")
    bucket = "a-team-logs"
    s3.create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": "eu-west-1"})
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    keys = [f"s3-access/checkpoints/{n:05d}" for n in range(110)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda key: s3.put_object(Bucket=bucket, Key=key, Body=b"1"), keys))
        list(pool.map(lambda key: s3.put_object(Bucket=bucket, Key=key, Body=b"2"), keys[:10]))
        list(pool.map(lambda key: s3.delete_object(Bucket=bucket, Key=key), keys[10:20]))
    assert _object_count(s3, bucket) == 130
    _empty(s3, bucket, page_size=100)
    assert _object_count(s3, bucket) == 0
    s3.delete_bucket(Bucket=bucket)  # S3 deletes only an empty bucket


def test_the_artifacts_go_to_the_bucket_of_the_team_the_given_teams_file_names(aws, tmp_path, monkeypatch):
    """``python -m infra.package push --teams`` (and ``make deploy-infra`` with another teams file) push into the
    artifacts bucket of the team as that file names it, not as the project's own ``teams.yaml`` does."""
    from infra import package

    text = yaml.safe_load((ROOT / "infra" / "teams.yaml").read_text())
    text["teams"][0]["name"] = "fraud"  # a team only this file has
    teams = tmp_path / "teams.yaml"
    teams.write_text(yaml.safe_dump(text))
    team = load_teams(teams).team("fraud")
    bucket = team.bucket("artifacts", CONFIG.platform.environment)
    s3 = client(aws, "s3", team.region)
    s3.create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": team.region})
    dist = tmp_path / "dist"
    (dist / "jars").mkdir(parents=True)
    (dist / "spark_sql_runner-0.1.0-py3-none-any.whl").write_bytes(b"wheel")
    (dist / "deploy-lambda.zip").write_bytes(b"zip")
    (dist / package.BOOTSTRAP.name).write_bytes(b"#!/bin/sh\n")
    (dist / "jars" / "a.jar").write_bytes(b"jar")
    (dist / "jars" / package.SUMS).write_text("sums\n")
    for name, value in {"DIST": dist, "JARS": dist / "jars", "LAMBDA_ZIP": dist / "deploy-lambda.zip"}.items():
        monkeypatch.setattr(package, name, value)
    monkeypatch.setattr(package, "ROOT", tmp_path)
    monkeypatch.setattr(package, "missing", lambda: [])
    for name, value in aws.env(team.region).items():
        monkeypatch.setenv(name, value)
    with pytest.raises(TeamsError, match="no team 'fraud'"):  # the project's teams.yaml has no such team
        package.push("fraud")
    package.main(["push", "--team", "fraud", "--teams", str(teams)])
    held = {o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]}
    assert {"runner/spark_sql_runner-0.1.0-py3-none-any.whl", "runner/SHA256SUMS", "jars/a.jar"} <= held, held


def test_a_teams_file_naming_a_subnet_that_does_not_exist_stops_the_deploy_before_anything_changes(aws, tmp_path):
    provide_prerequisites(aws, CONFIG)
    team = CONFIG.teams[0]
    missing, elsewhere = "subnet-0a1b2c3d4e5f69999", CONFIG.teams[1].network.subnet_ids[0]
    text = yaml.safe_load((ROOT / "infra" / "teams.yaml").read_text())
    text["teams"][0]["network"]["subnet-ids"] = [team.network.subnet_ids[0], missing, elsewhere]
    bad = tmp_path / "teams.yaml"
    bad.write_text(yaml.safe_dump(text))
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("AWS_")}, **aws.env(team.region)}
    result = subprocess.run(
        [sys.executable, "-m", "infra.terraform", "deploy", "--team", team.name, "--teams", str(bad)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"subnet {missing} does not exist" in result.stderr, result.stderr
    assert f"subnet {elsewhere} is in {CONFIG.teams[1].network.vpc_id}, not in {team.network.vpc_id}" in result.stderr
    assert "Nothing was changed." in result.stderr and "terraform" not in result.stdout
    assert not team_resources(aws, team)["buckets"], "nothing applied"


def test_the_node_stand_in_reads_emr_paths_under_its_folder_and_never_writes_the_machines_own(tmp_path):
    from infra.localplatform import PrimaryNode, node_text

    manager = "http://127.0.0.1:41234"
    unit = (
        "ExecStart=/usr/local/bin/sql-runner console --resource-manager http://localhost:8088"
        " --spark-submit /usr/bin/spark-submit"
    )
    assert node_text(tmp_path, manager, unit) == (
        f"ExecStart={tmp_path}/usr/local/bin/sql-runner console --resource-manager {manager}"
        f" --spark-submit {tmp_path}/usr/bin/spark-submit"
    )
    assert node_text(tmp_path, manager, "file:/etc/sql-runner/a.json") == f"file:{tmp_path}/etc/sql-runner/a.json"
    # what the node does not stand in for stays the machine's: the shell, its tools, paths merely alike
    for kept in (
        "#!/usr/bin/env bash",
        "/bin/bash -c",
        "/usr/bin",
        "/usr/local2/x",
        "/tmp/usr/local/x",
        "s3://b/usr/local",
    ):
        assert node_text(tmp_path, manager, kept) == kept
    node = PrimaryNode(tmp_path / "node", {}, yarn=None, cluster_id="j-1", region="eu-west-1")
    assert node.path("/etc/sql-runner/console-token") == tmp_path / "node" / "etc/sql-runner/console-token"
    for outside in ("/usr/bin", "/etc/passwd", "/usr/bin/sudo"):
        with pytest.raises(ValueError, match="not a path of the node stand-in"):
            node.path(outside)


HANDLER = """
import json, os, time

def handle(event, context):
    key = event["Records"][0]["s3"]["object"]["key"]
    folder = os.environ["SEEN"]
    with open(os.path.join(folder, f"{time.time_ns()}.json"), "w") as out:
        json.dump({"key": key, "start": time.time()}, out)
    time.sleep(9.0 if key.startswith("in/slow") else 1.0)
    with open(os.path.join(folder, f"{time.time_ns()}-end.json"), "w") as out:
        json.dump({"key": key, "end": time.time()}, out)
    if key.startswith("in/bad"):
        raise ValueError(f"cannot take {key}")
    return {"took": key}
"""


@pytest.mark.e2e  # a Python with boto3 made for the runtime, the function's zip run in subprocesses
def test_the_lambda_stand_in_runs_what_the_notification_sends_within_reserved_concurrency_then_dead_letters(
    aws, tmp_path
):
    """The bucket's notification (prefix, events) decides what reaches the function; the function's zip runs at its
    handler with its environment, never more at once than its reserved concurrency; a failing invocation is tried
    three times in all, then its event goes to the dead-letter queue with the error."""
    import io
    import zipfile

    from infra.localplatform import DeployLambda

    seen = tmp_path / "seen"
    seen.mkdir()
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.writestr("handler.py", HANDLER)
    s3, sqs, lam = client(aws, "s3"), client(aws, "sqs"), client(aws, "lambda")
    s3.create_bucket(Bucket="pushes", CreateBucketConfiguration={"LocationConstraint": "eu-west-1"})
    s3.put_bucket_versioning(Bucket="pushes", VersioningConfiguration={"Status": "Enabled"})
    dlq = sqs.create_queue(QueueName="f-dlq")["QueueUrl"]
    role = client(aws, "iam").create_role(RoleName="f", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    function = lam.create_function(
        FunctionName="f",
        Runtime="python3.11",
        Role=role,
        Handler="handler.handle",
        Code={"ZipFile": archive.getvalue()},
        Timeout=3,
        Environment={"Variables": {"SEEN": str(seen)}},
        DeadLetterConfig={"TargetArn": "arn:aws:sqs:eu-west-1:123456789012:f-dlq"},
    )["FunctionArn"]
    lam.put_function_concurrency(FunctionName="f", ReservedConcurrentExecutions=1)
    s3.put_bucket_notification_configuration(
        Bucket="pushes",
        NotificationConfiguration={
            "LambdaFunctionConfigurations": [
                {
                    "LambdaFunctionArn": function,
                    "Events": ["s3:ObjectCreated:*"],
                    "Filter": {"Key": {"FilterRules": [{"Name": "prefix", "Value": "in/"}]}},
                }
            ]
        },
    )
    runtime = DeployLambda(tmp_path / "lambda", aws.env("eu-west-1")).start()
    try:
        for key in ("in/a", "in/b", "elsewhere/c", "in/bad", "in/slow"):
            s3.put_object(Bucket="pushes", Key=key, Body=b"x")
        done = runtime.wait_idle(120)
    finally:
        runtime.stop()
    assert sorted((i.event["Records"][0]["s3"]["object"]["key"], i.outcome, i.attempts) for i in done) == [
        ("in/a", "ok", 1),
        ("in/b", "ok", 1),
        ("in/bad", "dead-letter", 3),
        ("in/slow", "dead-letter", 3),  # past the function's timeout each time
    ], "the notification's prefix keeps elsewhere/ out"
    assert all("versionId" in i.event["Records"][0]["s3"]["object"] for i in done), "S3 names the object version"
    runs = [json.loads(f.read_text()) for f in seen.iterdir()]
    assert sum("start" in run and run["key"] == "in/slow" for run in runs) == 3, "each attempt was started"
    assert not any("end" in run and run["key"] == "in/slow" for run in runs), "and ended at the timeout"
    timely = [run for run in runs if run["key"] != "in/slow"]  # one run at a time: reserved 1
    starts, ends = sorted(r["start"] for r in timely if "start" in r), sorted(r["end"] for r in timely if "end" in r)
    assert len(starts) == len(ends) == 5
    assert all(start >= end - 0.05 for start, end in zip(starts[1:], ends[:-1], strict=True)), "one at a time"
    messages = sqs.receive_message(QueueUrl=dlq, MessageAttributeNames=["All"], MaxNumberOfMessages=10)["Messages"]
    errors = {
        json.loads(m["Body"])["Records"][0]["s3"]["object"]["key"]: m["MessageAttributes"]["ErrorMessage"][
            "StringValue"
        ]
        for m in messages
    }
    assert errors.keys() == {"in/bad", "in/slow"}
    assert "cannot take in/bad" in errors["in/bad"] and "timed out after 3 seconds" in errors["in/slow"], errors


def milestone(started: float, what: str) -> None:
    """Where the journey is, in seconds from its start: shown with a failure's output, and with ``-s``."""
    print(f"{time.monotonic() - started:5.0f}s {what}", flush=True)


def infra_terraform(env: dict[str, str], *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "infra.terraform", *args, "--only", "team"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finished(process: subprocess.Popen, timeout: int = 900) -> tuple[int, str, str]:
    out, err = process.communicate(timeout=timeout)
    return process.returncode, out, err


def team_resources(aws: LocalAws, team) -> dict[str, list[str]]:
    """What of ``team`` the endpoint holds, by the names the stacks give (``sql-runner-<env>-<team>``)."""
    prefix = f"sql-runner-{CONFIG.platform.environment}-{team.name}"
    s3, emr, kafka = client(aws, "s3", team.region), client(aws, "emr", team.region), client(aws, "kafka", team.region)
    lam, iam, ec2 = client(aws, "lambda", team.region), client(aws, "iam", team.region), client(aws, "ec2", team.region)
    alive = ("STARTING", "BOOTSTRAPPING", "RUNNING", "WAITING", "TERMINATING")
    return {
        "buckets": [b["Name"] for b in s3.list_buckets()["Buckets"] if b["Name"].startswith(prefix)],
        "emr": [c["Id"] for c in emr.list_clusters(ClusterStates=list(alive))["Clusters"] if c["Name"] == prefix],
        "msk": [c["ClusterName"] for c in kafka.list_clusters_v2()["ClusterInfoList"] if c["ClusterName"] == prefix],
        "lambda": [
            f["FunctionName"] for f in lam.list_functions()["Functions"] if f["FunctionName"].startswith(prefix)
        ],
        "roles": [r["RoleName"] for r in iam.list_roles()["Roles"] if r["RoleName"].startswith(prefix)],
        "security groups": [
            g["GroupName"]
            for g in ec2.describe_security_groups()["SecurityGroups"]
            if g["GroupName"].startswith(prefix)
        ],
    }


@pytest.fixture
def platform(tmp_path):
    """The local endpoint, with its own broker standing for MSK and its own YARN for the team's EMR cluster."""
    from demo.kafka_broker import KafkaBroker
    from demo.yarn_cluster import YarnCluster

    broker = KafkaBroker(tmp_path / "kafka").start(log=lambda message: None)
    yarn = YarnCluster(folder=tmp_path / "yarn").start()
    local = LocalAws(tmp_path / "local-aws", kafka_bootstrap=broker.bootstrap).start()
    # the nodes' folders, where the node's unprivileged user can reach them (pytest's own are root's only)
    nodes = Path(tempfile.mkdtemp(prefix="emr-nodes-"))
    nodes.chmod(0o755)
    try:
        yield local, broker, yarn, nodes
    finally:
        local.stop()
        yarn.stop(keep=True)  # its containers' logs stay in the test's folder
        broker.stop()
        shutil.rmtree(nodes, ignore_errors=True)


@pytest.mark.infra
@pytest.mark.platform
@pytest.mark.spark
@pytest.mark.timeout(4800)
def test_the_platform_teams_journey_from_deploy_infra_to_rows_out_and_destroy(platform, tmp_path):
    """Every team's stack applied at once by the real ``python -m infra.terraform deploy`` (artifacts bucket,
    artifacts, the rest), then planned again with nothing to change; the first team's whole journey on it
    (:func:`journey`); ``destroy`` refusing, changing nothing, while the team's buckets hold data, and with
    ``--delete-data`` leaving nothing of the team (EMR's termination protection lifted, the cluster terminated
    with what ran on it, the buckets emptied) and the other team untouched; then the other team, whose logs
    bucket holds S3's access logs, refused the same way and destroyed with ``--delete-data``."""
    aws, broker, yarn, nodes = platform
    # the machines this runs on have both (Terraform 1.11, the AWS provider under /opt/tf-plugins): a missing one
    # fails here, where a skip would leave the platform unchecked
    assert shutil.which("terraform"), "terraform is not on PATH (Terraform 1.11 or later)"
    assert (PLUGINS / "registry.terraform.io" / "hashicorp" / "aws").is_dir(), f"no AWS provider mirror at {PLUGINS}"
    provide_prerequisites(aws, CONFIG)
    rc = provider_mirror_config(tmp_path / "terraform.rc", PLUGINS)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("AWS_")},
        **aws.env(CONFIG.platform.state_region),
        "TF_CLI_CONFIG_FILE": str(rc),
        "TF_IN_AUTOMATION": "1",
    }
    started = time.monotonic()
    built = subprocess.run(
        [sys.executable, "-m", "infra.package", "all"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert built.returncode == 0, built.stdout + built.stderr
    milestone(started, "make package done")
    outs = {team.name: tmp_path / f"out-{team.name}" for team in CONFIG.teams}
    deploys = {
        team.name: infra_terraform(env, "deploy", "--team", team.name, "--auto-approve", "--out", str(outs[team.name]))
        for team in CONFIG.teams
    }
    for name, process in deploys.items():
        code, out, err = finished(process)
        assert code == 0, f"{name}: {out[-4000:]}{err[-3000:]}"
        assert "Apply complete! Resources: 61 added" in out, out[-3000:]
        milestone(started, f"{name}'s stack applied")
    for team in CONFIG.teams:
        stack = outs[team.name] / "stacks" / f"team-{team.name}"
        plan = subprocess.run(
            ["terraform", f"-chdir={stack}", "plan", "-detailed-exitcode", "-no-color", "-input=false"],
            env={**env, "AWS_ENDPOINT_URL_S3": aws.endpoint},
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert plan.returncode == 0 and "No changes." in plan.stdout, plan.stdout[-4000:] + plan.stderr[-2000:]
        held = team_resources(aws, team)
        assert len(held["buckets"]) == 5 and len(held["emr"]) == 1 and held["msk"] and held["lambda"], held
        milestone(started, f"{team.name}'s stack planned again: no change")

    team, other = CONFIG.teams[0], CONFIG.teams[1]
    with contextlib.ExitStack() as stands:
        journey(aws, broker, yarn, env, team, outs[team.name], tmp_path, nodes, started, stands)

        manifests = team.bucket("manifests", CONFIG.platform.environment)

        def held(bucket: str) -> list:  # each version and delete marker, and when it was written
            listed = client(aws, "s3", team.region).list_object_versions(Bucket=bucket)
            versions = listed.get("Versions", []) + listed.get("DeleteMarkers", [])
            return [(v["Key"], v["VersionId"], str(v["LastModified"])) for v in versions]

        held_objects = held(manifests)
        before = team_resources(aws, team)
        code, out, err = finished(
            infra_terraform(env, "destroy", "--team", team.name, "--auto-approve", "--out", str(outs[team.name]))
        )
        assert code == 2 and f"s3://{manifests} (" in err and "Nothing was changed." in err, out + err
        milestone(started, "destroy refused")
        assert team_resources(aws, team) == before
        # the team's session still runs and writes its health: nothing is gone that was there
        assert set(held_objects) <= set(held(manifests)), "nothing deleted"

        destroying = time.strftime("%H:%M:%S", time.gmtime())
        code, out, err = finished(
            infra_terraform(
                env, "destroy", "--team", team.name, "--auto-approve", "--delete-data", "--out", str(outs[team.name])
            )
        )
        said = [line for line in out.splitlines() if not line.startswith(("\x1b", "aws_", " "))]
        left = {bucket: held(bucket)[:10] for bucket in team_resources(aws, team)["buckets"]}
        assert code == 0, f"{err[-3000:]}\nfrom {destroying}: {said[:30]}\nleft in the team's buckets: {left}"
        assert "Destroy complete!" in out and "emptying s3://" in out, out
        assert f"terminating {before['emr'][0]}" in out, out
        milestone(started, "destroyed with its data")
        assert not yarn.active_apps(), "the cluster's termination ended what ran on it"
        assert team_resources(aws, team) == {kind: [] for kind in before}
        assert all(team_resources(aws, other).values()), "the other team's environment is untouched"
        # the other team ran nothing, but S3 logged the apply's and the plan's requests into its logs bucket: kept
        # unless asked (its artifacts are not: make package makes them again)
        code, out, err = finished(
            infra_terraform(env, "destroy", "--team", other.name, "--auto-approve", "--out", str(outs[other.name]))
        )
        other_logs = other.bucket("logs", CONFIG.platform.environment)
        assert code == 2 and err.count("s3://") == 1 and f"s3://{other_logs} (" in err, out[-4000:] + err[-3000:]
        assert all(team_resources(aws, other).values()), "nothing changed"
        code, out, err = finished(
            infra_terraform(
                env, "destroy", "--team", other.name, "--auto-approve", "--delete-data", "--out", str(outs[other.name])
            )
        )
        assert code == 0, out[-4000:] + err[-3000:]
        assert team_resources(aws, other) == {kind: [] for kind in before}
        milestone(started, "the other team destroyed")


META = """,
  __create_timestamp TIMESTAMP(3), __query_name STRING, __query_description STRING, __query_id STRING,
  __query_version INT, __query_create_timestamp TIMESTAMP(3)"""
LAKE = "payments-lake"  # the query author's own bucket, for a table of files on s3://
TABLES = f"""
CREATE TABLE `payments`.`card-transactions` (
  transaction_id STRING, account_id STRING NOT NULL, payee STRING, amount DOUBLE, ts TIMESTAMP(3)
) WITH ('connector' = 'kafka', 'topic' = 'card-transactions', 'format' = 'json',
        'properties.bootstrap.servers' = '${{MSK_BOOTSTRAP_SERVERS}}', 'scan.startup.mode' = 'earliest-offset');

CREATE TABLE `payments`.`high-value-tx` (
  transaction_id STRING, account_id STRING, amount DOUBLE{META}
) WITH ('connector' = 'kafka', 'topic' = 'high-value-tx', 'format' = 'json',
        'properties.bootstrap.servers' = '${{MSK_BOOTSTRAP_SERVERS}}');

CREATE TABLE `payments`.`payee-amounts` (
  transaction_id STRING, payee STRING, amount DOUBLE{META}
) WITH ('connector' = 'filesystem', 'path' = 's3://{LAKE}/payees/', 'format' = 'json');
"""


def high_value(also: str = "", keys: str = '"transaction_id"') -> bytes:
    """The application-mode manifest: each transaction once (its key kept as state), the high values of them."""
    return (
        "name: high-value\ntarget-table: '`payments`.`high-value-tx`'\ntrigger-interval: 1 second\ncode: |\n"
        f'  rows = table("`payments`.`card-transactions`").dropDuplicates([{keys}])\n'
        f'  execution_output = rows.where("amount > 500"){also}.select("transaction_id", "account_id", "amount")\n'
    ).encode()


PAYEES = (
    b"name: payees\nmode: session\ntarget-table: '`payments`.`payee-amounts`'\ntrigger-interval: 1 second\nsql: |\n"
    b"  SELECT transaction_id, payee, amount FROM `payments`.`card-transactions`\n"
)


def journey(
    aws: LocalAws,
    broker,
    yarn,
    env: dict[str, str],
    team,
    out: Path,
    tmp_path: Path,
    nodes: Path,
    started: float,
    stands: contextlib.ExitStack,
) -> None:
    """The first team's journey on its applied stack: the topics, the EMR primary node's bootstrap (a tampered
    wheel failing it first), the cluster's first steps on YARN, query authors' pushes turned into steps by the
    deploy Lambda, rows out of the output topic and the s3:// table, a compatible and an incompatible change,
    bad pushes, the console, the cluster replaced."""
    import gzip

    from demo.committed_rows import committed_bucket_rows
    from demo.kafka_broker import KafkaClient
    from infra import localplatform
    from runner.core.bucket import S3Bucket
    from tests.clihelpers import wait_for

    code, out_text, err = finished(
        subprocess.Popen(
            [sys.executable, "-m", "infra.terraform", "deploy", "--team", team.name, "--auto-approve"]
            + ["--only", "topics", "--out", str(out)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    )
    assert code == 0, out_text + err
    kafka = KafkaClient(broker.bootstrap)
    topics = kafka.admin().list_topics(timeout=10).topics
    for topic in team.topics:
        assert len(topics[topic.name].partitions) == topic.partitions, f"{topic.name} as teams.yaml sets it"
    milestone(started, "topics")

    s3, emr = client(aws, "s3", team.region), client(aws, "emr", team.region)
    manifests = team.bucket("manifests", CONFIG.platform.environment)
    artifacts = team.bucket("artifacts", CONFIG.platform.environment)
    logs = team.bucket("logs", CONFIG.platform.environment)
    cluster_id = team_resources(aws, team)["emr"][0]
    node_env = aws.env(team.region)

    # a runner wheel changed in the artifacts bucket: the bootstrap fails, says why in its log, the cluster ends
    wheel = next(
        o["Key"]
        for o in s3.list_objects_v2(Bucket=artifacts, Prefix="runner/")["Contents"]
        if o["Key"].endswith(".whl")
    )
    good = s3.get_object(Bucket=artifacts, Key=wheel)["Body"].read()
    s3.put_object(Bucket=artifacts, Key=wheel, Body=good + b"\0")
    tampered = localplatform.PrimaryNode(nodes / "tampered", node_env, yarn, cluster_id, team.region)
    tampered.provision()
    milestone(started, "a node provisioned")
    with pytest.raises(localplatform.BootstrapFailed, match="bootstrap action 1 returned a non-zero return code"):
        tampered.bootstrap(emr, s3)
    tampered.stop_services()
    described = emr.describe_cluster(ClusterId=cluster_id)["Cluster"]["Status"]
    assert described["State"] == "TERMINATED_WITH_ERRORS", described
    shipped = f"emr/{cluster_id}/node/{tampered.instance_id}/bootstrap-actions/1/stderr.gz"
    log = gzip.decompress(s3.get_object(Bucket=logs, Key=shipped)["Body"].read()).decode()
    assert "differs from its SHA256SUMS" in log, log
    milestone(started, "its bootstrap failed on the changed wheel")
    assert not tampered.path("/usr/local/bin/sql-runner").exists(), "nothing installed from the changed wheel"
    # the platform team deploys again: the artifacts pushed anew, the ended cluster replaced by Terraform
    code, out_text, err = finished(
        infra_terraform(env, "deploy", "--team", team.name, "--auto-approve", "--out", str(out))
    )
    assert code == 0, out_text[-4000:] + err[-3000:]
    assert "aws_emr_cluster.emr: Creation complete" in out_text, out_text[-4000:]
    cluster_id = team_resources(aws, team)["emr"][0]
    milestone(started, "the cluster replaced by deploy-infra")
    # what an earlier release's push left beside this one's jars: the runner's jar of other sources, a connector of
    # another version; every jar of the node's folder is on every application's classpath
    stale = ["jars/sql-runner-engine-0000000000000000.jar", "jars/kafka-clients-3.0.0.jar"]
    for key in stale:
        s3.put_object(Bucket=artifacts, Key=key, Body=b"an earlier release's jar")
    sums = s3.get_object(Bucket=artifacts, Key="jars/SHA256SUMS")["Body"].read().decode()
    named = {line.split()[1] for line in sums.splitlines() if line.strip()}
    assert named and not {key.removeprefix("jars/") for key in stale} & named, named

    node = localplatform.PrimaryNode(nodes / "primary", node_env, yarn, cluster_id, team.region)
    node.provision()
    milestone(started, "the new node provisioned")
    assert node.bootstrap(emr, s3) == [
        "install sql-runner and the Kafka connector",
        "the console on the primary node, its metrics to CloudWatch",
    ]
    assert node.path("/usr/local/bin/sql-runner").is_file()
    installed = {p.name for p in node.path("/usr/lib/sql-runner/jars").iterdir()}
    assert installed == named, f"only the jars SHA256SUMS names: {sorted(installed ^ named)}"
    assert node.path("/usr/lib/sql-runner/SHA256SUMS").read_text() == sums, "beside the folder, off the classpath"
    milestone(started, "the new node bootstrapped")
    # the scripts ran as the node's unprivileged user, what needs root through sudo: the user's own write into
    # the image's /usr/local is refused, sudo's is done as root
    if os.geteuid() == 0:  # as on these machines: the node's user is nobody, root only through the node's sudo
        assert node.user.pw_name == "nobody"
        probe = node.path("/usr/local/probe")
        assert node.run(["touch", "/usr/local/probe"], stderr=subprocess.DEVNULL).wait() != 0 and not probe.exists()
        assert node.run(["sudo", "touch", "/usr/local/probe"]).wait() == 0 and probe.stat().st_uid == 0
        assert node.path("/etc/sql-runner/console-token").stat().st_uid == 0, "the service's token, root's"
        # the same sudo from a process the node did not start, as the same user: refused
        stranger = subprocess.run(
            [str(node.bin / "sudo"), "touch", str(probe)], user="nobody", capture_output=True, text=True, check=False
        )
        assert stranger.returncode == 1 and "not a process of the node" in stranger.stderr, stranger
    lambda_ = localplatform.DeployLambda(tmp_path / "lambda", node_env).start()
    milestone(started, "the Lambda's runtime ready")
    steps = localplatform.StepRunner(node, emr, s3).start()
    # what runs the cluster runs until the outer test ends, through its destroy (which terminates the cluster)
    stands.callback(node.stop_services)
    stands.callback(lambda_.stop)
    stands.callback(steps.stop)
    first = steps.wait_idle(600)
    assert {state for _, state in first} == {"COMPLETED"}, first
    milestone(started, "the cluster's first steps completed")
    s3.create_bucket(Bucket=LAKE, CreateBucketConfiguration={"LocationConstraint": team.region})

    # the query author pushes with boto3, as with the AWS CLI
    def push(name: str, body: bytes) -> None:
        s3.put_object(Bucket=manifests, Key=f"manifests/{name}", Body=body)

    def settled() -> list[tuple[str, str]]:
        lambda_.wait_idle(120)
        time.sleep(2)  # a step added last is seen by the next poll
        return steps.wait_idle(600)

    # a small shuffle for a small machine: each stateful partition is a RocksDB instance restored from S3
    push("job-template.yaml", b'sparkProperties: {spark.sql.shuffle.partitions: "2"}\n')
    push("tables/payments.sql", TABLES.encode())
    push("high-value.yaml", high_value())
    push("payees.yaml", PAYEES)
    ran = settled()
    assert all(state == "COMPLETED" for _, state in ran), ran
    milestone(started, "the pushes' steps completed")

    def produce(first: int, last: int) -> None:
        made = [
            {
                "transaction_id": f"t{i}",
                "account_id": f"a{i % 3}",
                "payee": f"p{i % 4}",
                "amount": 100.0 * i,
                "ts": f"2026-11-27 10:{i // 60:02d}:{i % 60:02d}",
            }
            for i in range(first, last + 1)
        ]
        kafka.produce("card-transactions", [json.dumps(e) for e in made])

    produce(1, 10)
    lake = S3Bucket(LAKE, client=s3)

    def output() -> list[dict]:
        return [json.loads(r.value) for r in kafka.records("high-value-tx", timeout=10)]

    def applications() -> list:
        apps = (yarn.rest("apps").get("apps") or {}).get("app") or []
        return [(a["name"], a["state"], a["finalStatus"], a["diagnostics"][-500:]) for a in apps]

    def wait(what: str, check, timeout: float = 240) -> None:
        wait_for(check, what, timeout, explain=lambda: f"YARN's applications: {applications()}")

    wait("the high-value rows in the output topic", lambda: len(output()) == 5)
    milestone(started, "the first output row (from make deploy-infra)")
    assert Counter(r["transaction_id"] for r in output()) == Counter(f"t{i}" for i in range(6, 11))
    wait("every row in s3://payments-lake/payees/", lambda: len(committed_bucket_rows(lake, "payees")) == 10)
    milestone(started, "every row in the s3:// table")

    def step_log(name: str) -> str:
        """The newest step whose name starts with ``name``: its output, from the cluster's log URI."""
        listed = emr.list_steps(ClusterId=cluster_id)["Steps"]  # newest first
        step = next(s for s in listed if s["Name"].startswith(name))
        key = f"emr/{cluster_id}/steps/{step['Id']}/stdout.gz"
        text = gzip.decompress(s3.get_object(Bucket=logs, Key=key)["Body"].read()).decode()
        return " ".join(text.split())  # as one line: the output is wrapped at 80 columns

    def high_values() -> Counter:
        return Counter(row["transaction_id"] for row in output())

    # the console the bootstrap started, with a token made as docs/aws.md says
    service = node.path("/var/log/sql-runner-console.service.log").read_text()
    assert "console on http://127.0.0.1:8099/" in service, service
    token_args = shlex.split(node.path("/etc/sql-runner/token.args").read_text())
    token_args[token_args.index("cloudwatch-agent")] = "operator"
    made = node.run(token_args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    token = made.communicate(timeout=120)[0].strip().splitlines()[-1]
    overview = urllib.request.Request(
        "http://127.0.0.1:8099/api/overview", headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(overview, timeout=30) as answer:
        rows = json.loads(answer.read())["rows"]
    assert {row["name"]: row["mode"] for row in rows} == {"high-value": "application", "payees": "session"}, rows
    for row in rows:
        # both have committed micro-batches and run; a query whose source has been quiet for ten triggers and a
        # minute is shown stalled, by design (docs/console.md), which a loaded machine can take this long to reach
        assert row["last_batch"] is not None, row
        allowed = Stall().after(row["trigger_seconds"])  # the console service runs with the defaults
        if abs(row["last_batch_age_s"] - allowed) > 1:
            assert row["state"] == ("stalled" if row["last_batch_age_s"] > allowed else "running"), row
    milestone(started, "the console shows both")

    # a compatible change: v1 stops with a savepoint in the team's savepoints bucket and is restored from it
    push("high-value.yaml", high_value(also='.where("amount < 1000000")'))  # after the deduplication
    assert {state for _, state in settled()} == {"COMPLETED"}
    deployed = step_log("sql-runner deploy high-value")
    assert "restore v1 from the savepoint taken when v1 stops" in deployed, deployed
    savepoints = team.bucket("savepoints", CONFIG.platform.environment)
    taken = s3.list_objects_v2(Bucket=savepoints, Prefix="savepoints/high-value/1/").get("Contents", [])
    assert any(o["Key"].endswith("/_SAVEPOINT.json") for o in taken), "the savepoint is in the savepoints bucket"
    produce(11, 13)
    wait("v1 restored reading on", lambda: set(high_values()) == {f"t{i}" for i in range(6, 14)}, 420)
    milestone(started, "v1 restored from its savepoint")

    # an incompatible change (other state keys): v2 starts clean, from the offsets v1 committed
    push("high-value.yaml", high_value(keys='"transaction_id", "account_id"'))
    assert {state for _, state in settled()} == {"COMPLETED"}
    deployed = step_log("sql-runner deploy high-value")
    assert "start v2 with clean state" in deployed, deployed
    produce(14, 15)
    wait("v2's rows", lambda: set(high_values()) == {f"t{i}" for i in range(6, 16)})
    versions = {row["transaction_id"]: row["__query_version"] for row in output()}
    assert {versions[f"t{i}"] for i in (14, 15)} == {2} and {versions[f"t{i}"] for i in range(6, 14)} == {1}
    milestone(started, "v2 started clean")

    # bad pushes: a malformed manifest adds no step and is reported by the Lambda; one naming a table that is
    # not declared is refused by its step, reported the same way; deleting it clears the report
    before = len(emr.list_steps(ClusterId=cluster_id)["Steps"])
    push("malformed.yaml", b"name: malformed\ntarget-table: '`payments`.`high-value-tx`'\n")
    lambda_.wait_idle(120)
    report = json.loads(s3.get_object(Bucket=manifests, Key="errors/malformed.json")["Body"].read())
    assert any("MANIFEST_MISSING_QUERY" in line for line in report["problems"]), report
    assert len(emr.list_steps(ClusterId=cluster_id)["Steps"]) == before, "a malformed manifest adds no step"
    s3.delete_object(Bucket=manifests, Key="manifests/malformed.yaml")
    push(
        "missing-table.yaml",
        PAYEES.replace(b"payees", b"missing-table")
        .replace(b"mode: session\n", b"")
        .replace(b"`card-transactions`", b"`cards`"),
    )
    ran = settled()
    assert next(state for name, state in ran if name.startswith("sql-runner deploy missing-table")) == "FAILED", ran
    report = json.loads(s3.get_object(Bucket=manifests, Key="errors/missing-table.json")["Body"].read())
    assert any("UNKNOWN_TABLE" in line and "`payments`.`cards`" in line for line in report["problems"]), report
    s3.delete_object(Bucket=manifests, Key="manifests/missing-table.yaml")
    settled()
    assert "Contents" not in s3.list_objects_v2(Bucket=manifests, Prefix="errors/missing-table"), "cleared"
    milestone(started, "bad pushes reported")

    # the cluster replaced: every YARN application ends, the cluster's first steps run again, every job resumes
    # from its saved state with outputs exact
    for app in yarn.active_apps():
        yarn.kill(app["id"])
    wait("every application ended", lambda: not yarn.active_apps(), 120)
    firsts = sorted(
        emr.list_steps(ClusterId=cluster_id)["Steps"], key=lambda s: s["Status"]["Timeline"]["CreationDateTime"]
    )[:2]
    emr.add_job_flow_steps(
        JobFlowId=cluster_id,
        Steps=[
            {
                "Name": f["Name"],
                "ActionOnFailure": "CONTINUE",
                "HadoopJarStep": {"Jar": "command-runner.jar", "Args": f["Config"]["Args"]},
            }
            for f in firsts
        ],
    )
    again = settled()[:2]  # the newest: the first steps added again
    assert sorted(again) == sorted((f["Name"], "COMPLETED") for f in firsts), again
    milestone(started, "the cluster's first steps ran again")
    produce(16, 20)
    wait("the high-value rows after the replacement", lambda: set(high_values()) == {f"t{i}" for i in range(6, 21)})
    wait("the payees after the replacement", lambda: len(committed_bucket_rows(lake, "payees")) == 20)
    assert max(high_values().values()) == 1, "no row twice across the versions and the replacement"
    payees = Counter(row["transaction_id"] for row in committed_bucket_rows(lake, "payees"))
    assert set(payees) == {f"t{i}" for i in range(1, 21)} and max(payees.values()) == 1
