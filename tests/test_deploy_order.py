"""Pushes of one manifest whose EMR steps run out of order or at once: the newest version is what is deployed.

S3 and EMR are moto's server on loopback; the steps the deploy Lambda adds are run as the
EMR master would run them (the real CLI, its arguments as added), against the FAKE YARN
ResourceManager and spark-submit.

Bad inputs tried: the steps of two pushes run newest first; a step that starts while
another deploy holds the manifest's lease and whose version is overtaken while it waits.
"""

from __future__ import annotations

import json
import subprocess
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import boto3
import pytest
import yaml

from runner.aws import deploy_lambda
from tests.clihelpers import SQL_RUNNER, cli_env, wait_for
from tests.conftest import HIGH_VALUE_MANIFEST, TRANSACTIONS_DDL
from tests.fake_yarn import FakeResourceManager, fake_spark_submit
from tests.motoserver import moto_server
from tests.s3events import s3_event

pytestmark = [pytest.mark.spark, pytest.mark.e2e, pytest.mark.s3]

TEAM = "payments"
BUCKETS = {role: f"{TEAM}-{role}" for role in ("manifests", "checkpoints", "savepoints")}
KEY = "manifests/high-value.yaml"


@pytest.fixture
def cluster(monkeypatch, tmp_path):
    with moto_server() as env:
        yield from _cluster(monkeypatch, tmp_path, env)


def _cluster(monkeypatch, tmp_path, env):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    s3 = boto3.client("s3")
    for bucket in BUCKETS.values():
        s3.create_bucket(Bucket=bucket)
    s3.put_bucket_versioning(Bucket=BUCKETS["manifests"], VersioningConfiguration={"Status": "Enabled"})
    s3.put_object(Bucket=BUCKETS["manifests"], Key="manifests/tables/tables.sql", Body=TRANSACTIONS_DDL.encode())
    emr = boto3.client("emr")
    cluster_id = emr.run_job_flow(
        Name=f"sql-runner-prod-{TEAM}",
        ReleaseLabel="emr-spark-8.0.0",
        Instances={"MasterInstanceType": "m6g.xlarge", "InstanceCount": 1, "KeepJobFlowAliveWhenNoSteps": True},
        JobFlowRole="EMR_EC2_DefaultRole",
        ServiceRole="EMR_DefaultRole",
    )["JobFlowId"]
    for key, value in {
        "CLUSTER_ID": cluster_id,
        "TEAM": TEAM,
        "MANIFESTS_BUCKET": BUCKETS["manifests"],
        "CHECKPOINTS_BUCKET": BUCKETS["checkpoints"],
        "SAVEPOINTS_BUCKET": BUCKETS["savepoints"],
    }.items():
        monkeypatch.setenv(key, value)
    with FakeResourceManager() as rm:
        yield s3, emr, cluster_id, rm, env, fake_spark_submit(tmp_path / "spark-submit", rm.url), tmp_path


def push(s3, threshold: int) -> str:
    body = HIGH_VALUE_MANIFEST.replace("amount > 500", f"amount > {threshold}")
    version = s3.put_object(Bucket=BUCKETS["manifests"], Key=KEY, Body=body.encode())["VersionId"]
    assert deploy_lambda.handler(s3_event(KEY, version, bucket=BUCKETS["manifests"]), None)["results"][0]["result"] == (
        "step"
    )
    return version


def step_command(emr, cluster_id: str, version: str, rm_url: str, spark_submit: Path) -> list[str]:
    """The step the Lambda added for ``version``, as the EMR master runs it (here: this machine's paths)."""
    [step] = [s for s in emr.list_steps(ClusterId=cluster_id)["Steps"] if f"({version})" in s["Name"]]
    args = list(step["Config"]["Args"])
    args[0] = SQL_RUNNER
    args[args.index("--resource-manager") + 1] = rm_url
    args[args.index("--spark-submit") + 1] = str(spark_submit)
    assert args[args.index("--lease-wait") + 1] == "900", "steps wait for the lease"
    return [*args, "--stop-timeout", "1"]  # the fake application never acknowledges a stop


def run(args: list[str], cwd: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, env=cli_env(env), capture_output=True, text=True, timeout=300, check=False)


def deployed_threshold(s3) -> int:
    record = yaml.safe_load(s3.get_object(Bucket=BUCKETS["manifests"], Key="deployed/high-value.yaml")["Body"].read())
    return int(record["sql"].split("amount > ")[1].split()[0])


def history(s3) -> list[dict]:
    listed = s3.list_objects_v2(Bucket=BUCKETS["manifests"], Prefix="history/high-value/").get("Contents", [])
    return [json.loads(s3.get_object(Bucket=BUCKETS["manifests"], Key=o["Key"])["Body"].read()) for o in listed]


def test_an_older_push_never_replaces_a_newer_one_whatever_order_their_steps_run_in(cluster):
    s3, emr, cluster_id, rm, env, spark_submit, tmp_path = cluster

    # 1. A step that waits for the lease, and whose version is overtaken meanwhile, stands down.
    v1 = push(s3, 600)
    lock = {
        "owner": "another-runner",
        "purpose": "deploy",
        "acquired-at": datetime.now(UTC).isoformat(),
        "expires-at": (datetime.now(UTC) + timedelta(minutes=15)).isoformat(),
    }
    s3.put_object(Bucket=BUCKETS["manifests"], Key="locks/high-value.json", Body=json.dumps(lock).encode())
    said = tmp_path / "waiting.err"
    with open(said, "w") as stderr:
        waiting = subprocess.Popen(
            step_command(emr, cluster_id, v1, rm.url, spark_submit),
            cwd=tmp_path,
            env=cli_env(env),
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    printed: list[str] = []

    def read() -> None:
        for line in waiting.stdout:
            printed.append(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    # it analyses the query and prints its plan, then goes for the lease at once, finds it held and waits
    wait_for(
        lambda: any(line.strip() == "plan" for line in printed) or waiting.poll() is not None,
        "the step's plan",
        explain=lambda: said.read_text(),
    )
    assert waiting.poll() is None, "".join(printed) + said.read_text()
    v2 = push(s3, 700)
    threading.Timer(1.0, lambda: s3.delete_object(Bucket=BUCKETS["manifests"], Key="locks/high-value.json")).start()
    waiting.wait(timeout=120)
    reader.join(timeout=30)
    out, err = "".join(printed), said.read_text()
    assert waiting.returncode == 0, out + err
    assert "standing down" in out + err and f"version {v1} of {KEY} is no longer the newest" in out + err
    assert rm.submissions == [], "nothing deployed for the overtaken version"
    assert [entry["decision"] for entry in history(s3)] == ["superseded"]

    # 2. The newer push's step deploys it.
    done = run(step_command(emr, cluster_id, v2, rm.url, spark_submit), tmp_path, env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert deployed_threshold(s3) == 700 and len(rm.submissions) == 1

    # 3. Two more pushes whose steps run newest first: the older one finds it is not the newest.
    v3 = push(s3, 800)
    v4 = push(s3, 900)
    newest = run(step_command(emr, cluster_id, v4, rm.url, spark_submit), tmp_path, env)
    assert newest.returncode == 0, newest.stdout + newest.stderr
    older = run(step_command(emr, cluster_id, v3, rm.url, spark_submit), tmp_path, env)
    assert older.returncode == 0 and f"version {v3} of {KEY} is no longer the newest ({v4} is)" in older.stdout
    assert deployed_threshold(s3) == 900
    assert len(rm.submissions) == 2, "v4 restored once; v3 started nothing"
