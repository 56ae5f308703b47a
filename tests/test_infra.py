"""The per-team AWS stacks: synthesised once per session, then asserted resource by resource."""

from __future__ import annotations

import base64
import json
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from infra.teams import TEAMS_FILE, TeamsError, load_teams
from tests.clihelpers import parsed_command

ROOT = Path(__file__).resolve().parents[1]
PLUGINS = Path("/opt/tf-plugins")
CONFIG = load_teams()
TEAMS = [t.name for t in CONFIG.teams]


@pytest.fixture(scope="session")
def stacks(tmp_path_factory) -> dict[str, dict]:
    from infra.main import synth

    out = tmp_path_factory.mktemp("cdktf.out")
    names = synth(TEAMS_FILE, out)
    return {name: json.loads((out / "stacks" / name / "cdk.tf.json").read_text()) for name in names} | {
        "_dir": {"path": str(out)}
    }


def resources(stack: dict, kind: str) -> dict[str, dict]:
    return stack["resource"].get(kind, {})


def one(stack: dict, kind: str, name: str) -> dict:
    return stack["resource"][kind][name]


def test_one_stack_and_one_topics_stack_per_team(stacks):
    assert len(TEAMS) >= 2
    assert set(stacks) - {"_dir"} == {f"team-{t}" for t in TEAMS} | {f"team-{t}-topics" for t in TEAMS}


@pytest.mark.parametrize("team", TEAMS)
def test_tags_state_and_budget_are_per_team(stacks, team):
    stack, spec = stacks[f"team-{team}"], CONFIG.team(team)
    tags = stack["provider"]["aws"][0]["default_tags"][0]["tags"]
    assert tags == {
        "team": team,
        "cost-centre": spec.cost_centre,
        "environment": CONFIG.platform.environment,
        "managed-by": "sql-runner-infra",
    }
    backend = stack["terraform"]["backend"]["s3"]
    assert backend == {
        "bucket": CONFIG.platform.state_bucket,
        "key": f"teams/{team}/terraform.tfstate",
        "region": CONFIG.platform.state_region,
        "encrypt": True,
        "use_lockfile": True,
    }
    assert stack["terraform"]["required_providers"]["aws"]["version"] == "5.100.0"
    budget = one(stack, "aws_budgets_budget", "budget")
    assert budget["limit_amount"] == str(spec.budget_usd_per_month) and budget["time_unit"] == "MONTHLY"
    assert budget["cost_filter"] == [{"name": "TagKeyValue", "values": [f"user:team${team}"]}]


@pytest.mark.parametrize("team", TEAMS)
def test_buckets_are_encrypted_versioned_private_tls_only_logged_and_expire_old_versions(stacks, team):
    stack = stacks[f"team-{team}"]
    buckets = resources(stack, "aws_s3_bucket")
    roles = ("manifests", "checkpoints", "savepoints", "artifacts", "logs")
    assert {b["bucket"] for b in buckets.values()} == {f"sql-runner-prod-{team}-{r}" for r in roles}
    for role in roles:
        ref = f"${{aws_s3_bucket.{role}-bucket.id}}"
        assert one(stack, "aws_s3_bucket_versioning", f"{role}-versioning")["versioning_configuration"] == {
            "status": "Enabled"
        }
        [rule] = one(stack, "aws_s3_bucket_server_side_encryption_configuration", f"{role}-encryption")["rule"]
        assert rule["apply_server_side_encryption_by_default"] == {
            "sse_algorithm": "aws:kms",
            "kms_master_key_id": "${aws_kms_key.key.arn}",
        }
        block = one(stack, "aws_s3_bucket_public_access_block", f"{role}-public-access")
        assert block["bucket"] == ref and all(
            block[k] is True
            for k in ("block_public_acls", "block_public_policy", "ignore_public_acls", "restrict_public_buckets")
        )
        policy = json.loads(one(stack, "aws_s3_bucket_policy", f"{role}-tls-only")["policy"])
        deny = policy["Statement"][0]
        assert deny["Effect"] == "Deny" and deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
        lifecycle = one(stack, "aws_s3_bucket_lifecycle_configuration", f"{role}-lifecycle")["rule"]
        assert lifecycle[0]["noncurrent_version_expiration"][0]["noncurrent_days"] > 0
        if role != "logs":
            logging = one(stack, "aws_s3_bucket_logging", f"{role}-access-logs")
            assert logging["target_bucket"] == "${aws_s3_bucket.logs-bucket.id}"
    assert one(stack, "aws_kms_key", "key")["enable_key_rotation"] is True


@pytest.mark.parametrize("team", TEAMS)
def test_emr_runs_the_teams_sizing_installs_the_runner_and_starts_the_session_and_jobs_first(stacks, team):
    stack, spec = stacks[f"team-{team}"], CONFIG.team(team)
    emr = one(stack, "aws_emr_cluster", "emr")
    assert emr["release_label"] == spec.emr.release_label and emr["applications"] == ["Spark"]
    assert emr["master_instance_group"]["instance_type"] == spec.emr.master.instance_type
    assert emr["core_instance_group"]["instance_count"] == spec.emr.core.count
    assert emr["step_concurrency_level"] == spec.emr.step_concurrency
    assert emr["security_configuration"] == "${aws_emr_security_configuration.emr-security.name}"
    assert emr["log_uri"] == "s3://${aws_s3_bucket.logs-bucket.bucket}/emr/"
    bootstrap, console = emr["bootstrap_action"]
    assert bootstrap["path"] == "s3://${aws_s3_bucket.artifacts-bucket.bucket}/bootstrap/install-runner.sh"
    assert console["path"] == "s3://${aws_s3_bucket.artifacts-bucket.bucket}/bootstrap/console-metrics.sh"
    session, jobs = (step["hadoop_jar_step"][0]["args"] for step in emr["step"])
    assert session[:4] == ["/usr/local/bin/sql-runner", "session", "start", "--from-store"]
    assert jobs[:3] == ["/usr/local/bin/sql-runner", "deploy", "--from-store"]
    assert jobs[-3:] == ["--all", "--mode", "application"]  # the session applies the session-mode manifests
    assert parsed_command(session)[0] == "session start"
    assert parsed_command(session)[1]["control_address"] == "0.0.0.0"  # the driver runs on a core node
    assert parsed_command(jobs)[0] == "deploy" and parsed_command(jobs)[1]["mode"] == "application"
    for args in (session, jobs):
        params = parsed_command(args)[1]
        assert params["team"] == team and params["target"] == "yarn" and params["from_store"]
        assert params["manifests_bucket"] == "${aws_s3_bucket.manifests-bucket.bucket}"
    assert emr["lifecycle"]["ignore_changes"] == ["step"]
    security = json.loads(one(stack, "aws_emr_security_configuration", "emr-security")["configuration"])
    assert security["EncryptionConfiguration"]["EnableAtRestEncryption"] is True
    limits = one(stack, "aws_emr_managed_scaling_policy", "emr-scaling")["compute_limits"][0]
    assert limits["maximum_core_capacity_units"] == spec.emr.max_core_instances


@pytest.mark.parametrize("team", TEAMS)
def test_the_primary_node_serves_the_console_and_ships_its_metrics_to_cloudwatch(stacks, team):
    """The console runs read-only on the primary node; the CloudWatch agent scrapes its /metrics with a token
    read from a file and sends them, as embedded metric format, to the team's own log group."""
    stack = stacks[f"team-{team}"]
    emr = one(stack, "aws_emr_cluster", "emr")
    console = emr["bootstrap_action"][1]
    assert console["args"] == ["s3://${aws_s3_bucket.artifacts-bucket.bucket}/console/"]
    objects = {o["key"]: o for o in resources(stack, "aws_s3_object").values()}
    for name in ("console.args", "token.args", "prometheus.yaml", "cloudwatch-agent.json"):
        assert objects[f"console/{name}"]["bucket"] == "${aws_s3_bucket.artifacts-bucket.bucket}"
    script = base64.b64decode(objects["bootstrap/console-metrics.sh"]["content_base64"]).decode()
    assert "isMaster" in script and "amazon-cloudwatch-agent-ctl" in script and "umask 077" in script
    command, options = parsed_command(shlex.split(objects["console/console.args"]["content"]))
    assert command == "console" and options["from_store"] and options["team"] == team
    assert options["address"] == "127.0.0.1" and not options["allow_actions"]  # read-only, on the node itself
    assert options["manifests_bucket"] == "${aws_s3_bucket.manifests-bucket.bucket}"
    command, options = parsed_command(shlex.split(objects["console/token.args"]["content"]))
    assert command == "console" and options["print_token"] and options["token_name"] == "cloudwatch-agent"
    scrape = yaml.safe_load(objects["console/prometheus.yaml"]["content"])["scrape_configs"][0]
    assert scrape["static_configs"][0]["targets"] == [f"127.0.0.1:{options['port']}"]
    assert scrape["authorization"] == {"type": "Bearer", "credentials_file": "/etc/sql-runner/console-token"}
    agent = json.loads(objects["console/cloudwatch-agent.json"]["content"])["logs"]["metrics_collected"]["prometheus"]
    logs = one(stack, "aws_cloudwatch_log_group", "metrics-logs")
    assert agent["log_group_name"] == "${aws_cloudwatch_log_group.metrics-logs.name}" and logs["kms_key_id"]
    assert agent["prometheus_config_path"] == "/etc/sql-runner/prometheus.yaml"
    emf = agent["emf_processor"]
    assert emf["metric_namespace"] == f"sql-runner/{team}"
    selectors = [(d["dimensions"], s) for d in emf["metric_declaration"] for s in d["metric_selectors"]]
    assert ([["team", "query", "state"]], "^sql_runner_query_state$") in selectors
    from runner.console.metrics import QUERY_GAUGES

    for name, *_ in QUERY_GAUGES:  # every per-query figure /metrics serves reaches CloudWatch
        assert any(dims == [["team", "query"]] and re.match(s, name) for dims, s in selectors), name
    assert not any(re.match(s, "sql_runner_query_state") for dims, s in selectors if dims == [["team", "query"]])
    policy = json.loads(one(stack, "aws_iam_role_policy", "emr-instance-policy")["policy"])
    writes = [st for st in policy["Statement"] if "logs:PutLogEvents" in st["Action"]]
    assert writes == [
        {
            "Effect": "Allow",
            "Action": ["logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"],
            "Resource": ["${aws_cloudwatch_log_group.metrics-logs.arn}:*"],
        }
    ]


@pytest.mark.parametrize("team", TEAMS)
def test_msk_is_private_encrypted_and_iam_authenticated(stacks, team):
    stack, spec = stacks[f"team-{team}"], CONFIG.team(team)
    msk = one(stack, "aws_msk_cluster", "msk")
    assert msk["number_of_broker_nodes"] == spec.msk.brokers and msk["kafka_version"] == spec.msk.kafka_version
    assert msk["encryption_info"]["encryption_at_rest_kms_key_arn"] == "${aws_kms_key.key.arn}"
    assert msk["encryption_info"]["encryption_in_transit"] == {"client_broker": "TLS", "in_cluster": True}
    assert msk["client_authentication"]["sasl"] == {"iam": True}
    assert msk["broker_node_group_info"]["connectivity_info"]["public_access"] == {"type": "DISABLED"}
    assert msk["broker_node_group_info"]["client_subnets"] == spec.network.subnet_ids


# What EC2 accepts in a security group's description and in a rule's (CreateSecurityGroup,
# AuthorizeSecurityGroupIngress): `terraform validate` checks neither, an apply is refused.
GROUP_DESCRIPTION = re.compile(r"^[0-9A-Za-z_ .:/()#,@\[\]+=&;{}!$*-]{1,255}$")


@pytest.mark.parametrize("team", TEAMS)
def test_every_security_group_description_is_one_ec2_accepts(stacks, team):
    """An apostrophe ("the team's nodes") passed `terraform validate` and stopped the first apply."""
    groups = resources(stacks[f"team-{team}"], "aws_security_group")
    assert groups
    said = []
    for name, group in groups.items():
        said.append((name, group["description"]))
        for direction in ("ingress", "egress"):
            said += [(f"{name} {direction}", rule["description"]) for rule in group.get(direction, [])]
    refused = [(where, text) for where, text in said if not GROUP_DESCRIPTION.match(text)]
    assert not refused, refused


@pytest.mark.parametrize("team", TEAMS)
def test_topics_stack_creates_the_teams_topics_on_its_cluster(stacks, team):
    stack, spec = stacks[f"team-{team}-topics"], CONFIG.team(team)
    assert stack["terraform"]["required_providers"]["kafka"]["source"] == "Mongey/kafka"
    topics = resources(stack, "kafka_topic")
    assert {
        t["name"]: (t["partitions"], t["replication_factor"], t["config"]["retention.ms"]) for t in topics.values()
    } == {t.name: (t.partitions, t.replication, str(t.retention_hours * 3_600_000)) for t in spec.topics}
    assert stack["data"]["aws_msk_cluster"]["cluster"]["cluster_name"] == f"sql-runner-prod-{team}"
    assert stack["provider"]["kafka"][0]["sasl_mechanism"] == "aws-iam"


@pytest.mark.parametrize("team", TEAMS)
def test_the_deploy_lambda_fires_on_manifests_only_with_a_dead_letter_queue_and_tracing(stacks, team):
    stack = stacks[f"team-{team}"]
    [notification] = resources(stack, "aws_s3_bucket_notification").values()
    assert notification["bucket"] == "${aws_s3_bucket.manifests-bucket.id}"
    [trigger] = notification["lambda_function"]
    assert trigger["filter_prefix"] == "manifests/"
    assert trigger["events"] == ["s3:ObjectCreated:*", "s3:ObjectRemoved:*"]
    function = one(stack, "aws_lambda_function", "deploy")
    assert function["handler"] == "runner.aws.deploy_lambda.handler" and function["runtime"] == "python3.11"
    assert function["dead_letter_config"]["target_arn"] == "${aws_sqs_queue.deploy-dlq.arn}"
    assert function["tracing_config"]["mode"] == "Active" and function["reserved_concurrent_executions"] > 0
    assert function["environment"]["variables"]["TEAM"] == team
    assert one(stack, "aws_cloudwatch_log_group", "deploy-logs")["retention_in_days"] >= 365
    # it reads the desired manifests and the deployed records (whether a job runs in the session), nothing else
    policy = json.loads(one(stack, "aws_iam_role_policy", "deploy-policy")["policy"])
    [reads] = [s["Resource"] for s in policy["Statement"] if "s3:GetObject" in s["Action"]]
    assert sorted(reads) == sorted(
        f"${{aws_s3_bucket.manifests-bucket.arn}}/{prefix}*" for prefix in ("manifests/", "deployed/")
    )
    # the runner writes deployed/, history/, errors/, status/ ...: none of them is under manifests/
    from runner.core import layout

    for key in (
        layout.deployed("x"),
        layout.history("x"),
        layout.deploy_error("x"),
        layout.status("x"),
        layout.lock("x"),
        layout.deploy_request("x", "v"),
        layout.job_record("x"),
        layout.stop_request("x"),
    ):
        assert not key.startswith(trigger["filter_prefix"]), key


def _policies(stack: dict) -> list[str]:
    texts = [r["policy"] for r in resources(stack, "aws_iam_role_policy").values()]
    texts += [r["assume_role_policy"] for r in resources(stack, "aws_iam_role").values()]
    return texts


@pytest.mark.parametrize("team", TEAMS)
def test_iam_policies_reach_only_the_teams_own_resources(stacks, team):
    stack = stacks[f"team-{team}"]
    others = [t for t in TEAMS if t != team]
    own_resources = {f"{kind}.{name}" for kind, items in stack["resource"].items() for name in items}
    for text in _policies(stack):
        for other in others:
            assert other not in text, f"team {team}'s policy mentions team {other}"
        for statement in json.loads(text)["Statement"]:
            resources_ = statement.get("Resource", [])
            for resource in [resources_] if isinstance(resources_, str) else resources_:
                refs = re.findall(r"\$\{(aws_[a-z0-9_]+\.[A-Za-z0-9_-]+)\.", resource)
                if resource == "*":
                    assert set(statement["Action"]) <= {"xray:PutTraceSegments", "xray:PutTelemetryRecords"}
                elif refs:
                    assert all(ref in own_resources for ref in refs), resource
                else:
                    assert f"sql-runner-prod-{team}" in resource, resource
    attachments = [a["policy_arn"] for a in resources(stack, "aws_iam_role_policy_attachment").values()]
    assert attachments == ["arn:aws:iam::aws:policy/service-role/AmazonEMRServicePolicy_v2"]


def test_a_mistake_in_teams_yaml_names_the_team_and_field(tmp_path):
    text = TEAMS_FILE.read_text().replace(
        "master: {instance-type: m6g.xlarge, count: 1}", "master: {instance-type: m6g.xlarge, count: 2}", 1
    )
    text = text.replace("brokers: 2\n", "brokers: 3\n")
    bad = tmp_path / "teams.yaml"
    bad.write_text(text)
    with pytest.raises(TeamsError) as caught:
        load_teams(bad)
    message = str(caught.value)
    assert "teams[payments].emr: Value error, master.count must be 1 or 3" in message
    assert "teams[risk]: Value error, msk.brokers (3) must be a multiple of the number of subnets (2)" in message


def _terraform_validate(stack_dir: Path) -> subprocess.CompletedProcess:
    subprocess.run(
        [
            "terraform",
            f"-chdir={stack_dir}",
            "init",
            "-backend=false",
            "-input=false",
            "-no-color",
            f"-plugin-dir={PLUGINS}",
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return subprocess.run(
        ["terraform", f"-chdir={stack_dir}", "validate", "-json", "-no-color"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.parametrize("team", TEAMS)
def test_terraform_validates_each_team_stack_offline(stacks, team, tmp_path):
    if shutil.which("terraform") is None or not (PLUGINS / "registry.terraform.io" / "hashicorp" / "aws").is_dir():
        pytest.skip(f"terraform or the AWS provider mirror at {PLUGINS} is missing on this machine")
    stack_dir = tmp_path / f"team-{team}"
    stack_dir.mkdir()
    (stack_dir / "cdk.tf.json").write_text(json.dumps(stacks[f"team-{team}"]))
    result = _terraform_validate(stack_dir)
    assert json.loads(result.stdout)["valid"] is True, result.stdout


@pytest.mark.parametrize("team", TEAMS)
def test_terraform_validates_each_topics_stack_when_the_kafka_provider_is_mirrored(stacks, team, tmp_path):
    if shutil.which("terraform") is None or not (PLUGINS / "registry.terraform.io" / "mongey" / "kafka").is_dir():
        pytest.skip(
            f"the Kafka provider (Mongey/kafka) is not in the mirror at {PLUGINS}; topics stacks are "
            "validated where it is"
        )
    stack_dir = tmp_path / f"team-{team}-topics"
    stack_dir.mkdir()
    (stack_dir / "cdk.tf.json").write_text(json.dumps(stacks[f"team-{team}-topics"]))
    assert json.loads(_terraform_validate(stack_dir).stdout)["valid"] is True


@pytest.mark.infra
def test_the_lambda_zip_validates_manifests_without_spark(tmp_path):
    from infra.package import lambda_zip

    with zipfile.ZipFile(lambda_zip()) as archive:
        archive.extractall(tmp_path)
    assert sorted(p.name for p in (tmp_path / "runner").iterdir()) == ["__init__.py", "authoring", "aws", "core"]
    assert not (tmp_path / "jobs").exists(), "no Spark code in the Lambda"
    probe = (
        "import sys; sys.path.insert(0, sys.argv[1]); import runner.aws.deploy_lambda as d; "
        "from runner.authoring.manifest_file import parse_manifest; "
        "m = parse_manifest('name: a\\ntarget-table: t\\nsql: SELECT 1\\n'); "
        "assert not {'pyspark', 'typer', 'click'} & set(sys.modules); print(m.name, d.PREFIX)"
    )
    result = subprocess.run(
        [sys.executable, "-S", "-c", probe, str(tmp_path)], capture_output=True, text=True, check=False, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["a", "manifests/"]


SKIPS = ROOT / "infra" / "checkov-skips.yaml"
CHECKOV = ROOT / ".venv-checkov" / "bin" / "checkov"


def test_checkov_passes_every_stack_outside_the_justified_skip_list(stacks):
    import yaml

    if not CHECKOV.exists():
        pytest.skip(f"checkov is not installed at {CHECKOV} (make test installs it)")
    skips = yaml.safe_load(SKIPS.read_text())
    assert all(len(entry["reason"].split()) >= 10 for entry in skips), "every skip says why"
    ids = [entry["id"] for entry in skips]
    result = subprocess.run(
        [
            str(CHECKOV),
            "--skip-download",
            "--framework",
            "terraform_json",
            "--quiet",
            "--compact",
            "-o",
            "json",
            "-d",
            str(Path(stacks["_dir"]["path"]) / "stacks"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    reports = json.loads(result.stdout)
    reports = reports if isinstance(reports, list) else [reports]
    failed = {(f["check_id"], f["resource"]) for r in reports for f in r.get("results", {}).get("failed_checks", [])}
    assert sum(r["summary"]["passed"] for r in reports) > 100
    assert sorted(f for f in failed if f[0] not in ids) == [], "failed checks outside the skip list"
    stale = set(ids) - {check for check, _ in failed}
    assert not stale, f"skip entries that no longer match a failing check: {stale}"


@pytest.mark.infra
def test_deploy_infra_without_credentials_stops_before_doing_anything(tmp_path):
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env |= {
        "AWS_CONFIG_FILE": str(tmp_path / "none"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    out = tmp_path / "cdktf.out"
    result = subprocess.run(
        [sys.executable, "-m", "infra.terraform", "deploy", "--team", TEAMS[0], "--out", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 2
    assert "no AWS credentials found" in result.stderr and "Nothing was changed." in result.stderr
    assert not out.exists(), "nothing synthesised, no terraform run"
    unknown = subprocess.run(
        [sys.executable, "-m", "infra.terraform", "deploy", "--team", "nobody"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert unknown.returncode == 2 and "no team 'nobody' in teams.yaml" in unknown.stderr
    usage = subprocess.run(
        ["make", "--no-print-directory", "deploy-infra"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert usage.returncode == 2 and "usage: make deploy-infra TEAM=" in usage.stdout


# A stand-in for Terraform (only its answer to Ctrl-C matters here): on SIGINT it takes a second to finish what is
# under way and write its state, as Terraform's graceful stop does, then exits 1.
# With INTERRUPT_AT_ONCE it has Ctrl-C's signal as it starts, and the command that starts it has it while it is
# still starting it (the signal is sent between the fork and the exec).
GRACEFUL_TERRAFORM = """#!/usr/bin/env bash
trap 'sleep 1; echo "$*" > "$STATE_WRITTEN"; exit 1' INT
echo started > "$STARTED"
if [ -n "$INTERRUPT_AT_ONCE" ]; then kill -INT $$; fi
while true; do sleep 0.1; done
"""


@pytest.mark.parametrize("moment", ["as it runs", "as it starts"])
def test_ctrl_c_during_a_terraform_command_lets_terraform_stop_gracefully_and_says_so(tmp_path, moment):
    import os
    import signal
    import time

    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "terraform").write_text(GRACEFUL_TERRAFORM)
    (bin_ / "terraform").chmod(0o755)
    started, written = tmp_path / "started", tmp_path / "state-written"
    env = {
        **os.environ,
        "PATH": f"{bin_}:{os.environ['PATH']}",
        "STARTED": str(started),
        "STATE_WRITTEN": str(written),
        **({"INTERRUPT_AT_ONCE": "1"} if moment == "as it starts" else {}),
    }
    program = (
        "import os, signal, subprocess, functools\n"
        "interrupt = lambda: os.kill(os.getppid(), signal.SIGINT)\n"
        "subprocess.Popen = functools.partial(subprocess.Popen, preexec_fn=interrupt)\n"
        if moment == "as it starts"
        else ""
    ) + (
        "import sys; from pathlib import Path; from infra.terraform import Stop, terraform\n"
        "try:\n    terraform(Path(sys.argv[1]), 'apply', '-auto-approve')\n"
        "except Stop as error:\n    print(error, file=sys.stderr); sys.exit(2)\n"
    )
    # as make deploy-infra runs in a terminal: Ctrl-C reaches its whole process group
    process = subprocess.Popen(
        [sys.executable, "-c", program, str(tmp_path / "stack")],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert started.exists(), "terraform started"
    if moment == "as it runs":
        os.killpg(process.pid, signal.SIGINT)
    _, err = process.communicate(timeout=60)
    # Terraform was waited for through its graceful stop, not killed a moment after the interrupt
    assert written.exists() and "-chdir=" in written.read_text(), "its state written"
    assert process.returncode == 2, err
    assert "interrupted: terraform apply in" in err and "stopped (exit 1) with its state written" in err, err
    assert "Traceback" not in err, err


def test_the_platform_guide_shows_what_teams_yaml_runs():
    from infra.main import summary

    guide = (ROOT / "docs" / "aws.md").read_text()
    assert summary() in guide, "docs/aws.md's team table is stale: python -m infra.main --summary"


@pytest.mark.parametrize("team", TEAMS)
def test_jobs_reach_msk_out_of_the_box_and_read_only_the_teams_parameters_and_secrets(stacks, team):
    from infra.stack import MSK_IAM_CLIENT
    from jobs.kafka import PLATFORM_DEFAULTS_PREFIX
    from runner.targets.yarn import YARN_MAX_ATTEMPTS

    stack, prefix = stacks[f"team-{team}"], f"sql-runner-prod-{team}"
    parameter = one(stack, "aws_ssm_parameter", "msk-bootstrap")
    assert parameter["name"] == f"/{prefix}/MSK_BOOTSTRAP_SERVERS"
    assert parameter["value"] == "${aws_msk_cluster.msk.bootstrap_brokers_sasl_iam}"
    assert parameter["type"] == "SecureString" and parameter["key_id"] == "${aws_kms_key.key.arn}"

    statements = json.loads(one(stack, "aws_iam_role_policy", "emr-instance-policy")["policy"])["Statement"]
    reads = {
        action: s["Resource"]
        for s in statements
        for action in s["Action"]
        if action.startswith(("ssm:", "secretsmanager:"))
    }
    assert set(reads) == {
        "ssm:GetParameter",
        "ssm:GetParameters",
        "secretsmanager:GetSecretValue",
        "secretsmanager:DescribeSecret",
    }
    for where in reads.values():
        scoped = [r for r in where if not r.startswith("${aws_ssm_parameter.msk-bootstrap")]
        assert scoped and all(r.endswith(f"/{prefix}/*") or r.endswith(f":secret:{prefix}/*") for r in scoped), where
        assert all(team in r or r.startswith("${aws_ssm_parameter") for r in where)

    emr = one(stack, "aws_emr_cluster", "emr")
    configurations = {c["Classification"]: c["Properties"] for c in json.loads(emr["configurations_json"])}
    client = {
        k[len(PLATFORM_DEFAULTS_PREFIX) :]: v
        for k, v in configurations["spark-defaults"].items()
        if k.startswith(PLATFORM_DEFAULTS_PREFIX)
    }
    assert client == MSK_IAM_CLIENT and client["properties.sasl.mechanism"] == "AWS_MSK_IAM"
    assert configurations["yarn-site"]["yarn.resourcemanager.am.max-attempts"] == str(YARN_MAX_ATTEMPTS)
    for step in emr["step"]:
        params = parsed_command(step["hadoop_jar_step"][0]["args"])[1]
        assert params["parameters_prefix"] == f"/{prefix}/" and params["aws_region"] == CONFIG.team(team).region
    variables = one(stack, "aws_lambda_function", "deploy")["environment"]["variables"]
    assert variables["PARAMETERS_PREFIX"] == f"/{prefix}/"
    script = (ROOT / "infra" / "bootstrap" / "install-runner.sh").read_text()
    assert "SHA256SUMS" in script and "exit 1" in script


@pytest.mark.s3
@pytest.mark.infra  # infra.stack: CDK for Terraform's runtime
def test_the_documented_kafka_table_resolves_on_the_cluster_from_the_teams_parameter(monkeypatch):
    """The Kafka table of docs/tables.md, unchanged, with the Spark properties the cluster gives every job: SASL/IAM
    client settings and the bootstrap address from the team's parameter (moto SSM)."""
    import boto3
    from moto import mock_aws

    from infra.stack import MSK_IAM_CLIENT
    from jobs import kafka
    from runner.authoring.ddl import parse_ddl
    from runner.core.placeholders import Sources, Values, resolved_options

    tables = (ROOT / "docs" / "tables.md").read_text()
    ddl = tables[tables.index("CREATE TABLE `kafka`.`transactions`") :]
    table = parse_ddl(ddl[: ddl.index(";") + 1])[0]
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        brokers = "b-1.payments.kafka.eu-west-1.amazonaws.com:9098,b-2.payments.kafka.eu-west-1.amazonaws.com:9098"
        boto3.client("ssm").put_parameter(
            Name="/sql-runner-prod-payments/MSK_BOOTSTRAP_SERVERS", Value=brokers, Type="SecureString"
        )
        # a core node: no env
        values = Values({}, Sources(parameters_prefix="/sql-runner-prod-payments/", region="eu-west-1"))
        options = kafka.with_platform_defaults(resolved_options(table, values), MSK_IAM_CLIENT)
    reader = kafka.source_options(table, options)
    assert reader["kafka.bootstrap.servers"] == brokers
    assert reader["kafka.security.protocol"] == "SASL_SSL" and reader["kafka.sasl.mechanism"] == "AWS_MSK_IAM"
    assert reader["kafka.sasl.client.callback.handler.class"].endswith("IAMClientCallbackHandler")


@pytest.mark.infra
def test_make_package_copies_emrs_jars_checked_and_the_bootstrap_refuses_a_changed_one(tmp_path):
    """``dist/jars/`` from the fetched jar set, verified the way the EMR bootstrap verifies it."""
    from infra.package import BOOTSTRAP, SUMS, JarRefused, copy_jars
    from runner.core import jars

    into = tmp_path / "dist-jars"
    names = {path.name for path in copy_jars(into)}
    assert {"spark-sql-kafka-0-10_2.13-4.0.4.jar", "kafka-clients-3.9.1.jar", "aws-msk-iam-auth-2.3.5.jar"} <= names
    assert "spark-avro_2.13-4.0.2.jar" in names and "sts-2.25.53.jar" in names, "IAM auth needs the SDK's STS"
    assert "hadoop-aws-3.4.1.jar" not in names, "EMR reads s3:// through EMRFS: S3A's jars stay home"
    assert jars.engine_jar().name in names, "the incremental operators of changelog queries run from it"
    check = ["sha256sum", "--check", "--quiet", "--strict", SUMS]
    assert " ".join(check) in BOOTSTRAP.read_text(), "the bootstrap runs this very check"
    assert subprocess.run(check, cwd=into, check=False).returncode == 0
    (into / "kafka-clients-3.9.1.jar").write_bytes(b"changed on the way")
    assert subprocess.run(check, cwd=into, capture_output=True, check=False).returncode != 0

    cache = tmp_path / "cache"
    shutil.copytree(jars.cache_dir(jars.SPARK), cache)
    (cache / "aws-msk-iam-auth-2.3.5.jar").write_bytes(b"not the library")
    with pytest.raises(JarRefused, match="SHA-256"):
        copy_jars(tmp_path / "refused", cache)
    assert not (tmp_path / "refused").exists(), "nothing copied from a cache holding a changed jar"
