"""AWS on this machine (infra/localaws.py): moto's server over TLS with a throwaway CA, the prerequisites of
``teams.yaml``, and the named corrections where moto 5.2.5 serves an API the stacks' provider calls otherwise
than AWS; then the real ``infra.terraform deploy`` of a team's stack against it, a plan with no change."""

from __future__ import annotations

import json
import os
import shutil
import ssl
import subprocess
import sys
import urllib.request
from pathlib import Path

import boto3
import pytest
import yaml
from botocore.exceptions import ClientError

from infra.localaws import LocalAws, provide_prerequisites
from infra.teams import load_teams

ROOT = Path(__file__).resolve().parents[1]
PLUGINS = Path("/opt/tf-plugins")
CONFIG = load_teams()

pytestmark = pytest.mark.s3


@pytest.fixture
def aws(tmp_path):
    local = LocalAws(tmp_path / "local-aws", kafka_bootstrap="127.0.0.1:19092").start()
    yield local
    local.stop()


def client(aws: LocalAws, service: str, region: str = "eu-west-1"):
    env = aws.env(region)
    return boto3.client(
        service,
        region_name=region,
        endpoint_url=aws.endpoint,
        verify=env["AWS_CA_BUNDLE"],
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
    )


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


@pytest.mark.infra
@pytest.mark.platform
@pytest.mark.timeout(1200)
def test_every_teams_stack_applies_on_the_local_endpoint_converges_and_is_destroyed_only_with_its_data(aws, tmp_path):
    """The real ``python -m infra.terraform deploy`` of each team's stack at once (artifacts bucket, artifacts,
    the rest); a second ``terraform plan`` finds nothing to change (no perpetual diff); ``destroy`` refuses,
    changing nothing, while the team's buckets hold data, and with ``--delete-data`` leaves nothing of the
    team (EMR's termination protection lifted, the buckets emptied) and the other team untouched."""
    # the machines this runs on have both (Terraform 1.11, the AWS provider under /opt/tf-plugins): a missing one
    # fails here, where a skip would leave the platform unchecked
    assert shutil.which("terraform"), "terraform is not on PATH (Terraform 1.11 or later)"
    assert (PLUGINS / "registry.terraform.io" / "hashicorp" / "aws").is_dir(), f"no AWS provider mirror at {PLUGINS}"
    provide_prerequisites(aws, CONFIG)
    rc = tmp_path / "terraform.rc"
    hashicorp = '["registry.terraform.io/hashicorp/*"]'
    rc.write_text(
        f'provider_installation {{\n  filesystem_mirror {{\n    path = "{PLUGINS}"\n    include = {hashicorp}\n  }}\n'
        f"  direct {{\n    exclude = {hashicorp}\n  }}\n}}\n"
    )
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("AWS_")},
        **aws.env(CONFIG.platform.state_region),
        "TF_CLI_CONFIG_FILE": str(rc),
        "TF_IN_AUTOMATION": "1",
    }
    built = subprocess.run(
        [sys.executable, "-m", "infra.package", "all"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert built.returncode == 0, built.stdout + built.stderr
    outs = {team.name: tmp_path / f"out-{team.name}" for team in CONFIG.teams}
    deploys = {
        team.name: infra_terraform(env, "deploy", "--team", team.name, "--auto-approve", "--out", str(outs[team.name]))
        for team in CONFIG.teams
    }
    for name, process in deploys.items():
        code, out, err = finished(process)
        assert code == 0, f"{name}: {out[-4000:]}{err[-3000:]}"
        assert "Apply complete! Resources: 61 added" in out, out[-3000:]
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

    team, other = CONFIG.teams[0], CONFIG.teams[1]
    manifests = team.bucket("manifests", CONFIG.platform.environment)
    client(aws, "s3", team.region).put_object(Bucket=manifests, Key="manifests/q.yaml", Body=b"name: q\n")
    before = team_resources(aws, team)
    code, out, err = finished(
        infra_terraform(env, "destroy", "--team", team.name, "--auto-approve", "--out", str(outs[team.name]))
    )
    assert code == 2 and f"s3://{manifests} (1 objects)" in err and "Nothing was changed." in err, out + err
    assert team_resources(aws, team) == before
    emr = client(aws, "emr", team.region)
    assert emr.describe_cluster(ClusterId=before["emr"][0])["Cluster"]["TerminationProtected"] is True

    code, out, err = finished(
        infra_terraform(
            env, "destroy", "--team", team.name, "--auto-approve", "--delete-data", "--out", str(outs[team.name])
        )
    )
    assert code == 0, out[-4000:] + err[-3000:]
    assert "Destroy complete!" in out and "emptying s3://" in out and "lifting the termination protection" in out, out
    assert team_resources(aws, team) == {kind: [] for kind in before}
    assert all(team_resources(aws, other).values()), "the other team's environment is untouched"
