"""Placeholders resolved inside the driver, from the environment, SSM Parameter Store and Secrets Manager.

SSM and Secrets Manager are moto (in process, or its server on loopback for the jobs'
own processes). A running local job's command lines, its log and every file of the state
store are searched for the secret values; a job submitted to the FAKE YARN target carries
neither the values nor its spec on the command line, and its driver, started with none of
the runner's environment, resolves them itself.

Bad inputs tried: malformed placeholders (``${}``, ``${ssm:}``, ``${secret:a b}``) in a
manifest and in a DDL option, a placeholder in a property Spark reads at launch, a
parameter and a secret that do not exist, a secret field of a secret that is not JSON, no
AWS credentials at all.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import boto3
import pytest
from moto import mock_aws

from runner.core.errors import UserError
from runner.core.placeholders import Sources, Values, resolve
from runner.targets.base import group_members
from tests.clihelpers import cli, invoke, wait_for
from tests.conftest import METADATA_DDL, ProjectDir
from tests.fake_yarn import FakeResourceManager, fake_spark_submit
from tests.motoserver import moto_server

pytestmark = pytest.mark.s3  # moto, in-process or as its server

PREFIX = "/sql-runner/test/payments/"
TOKEN = "tok-7f3a9c2e51d84b06"  # the secret's field the job uses
USER = "svc-reader-19ab"  # an SSM SecureString a ${NAME} placeholder falls back to
REGION = "eu-west-1"


def seed(ssm, secrets, events: Path, out: Path) -> None:
    ssm.put_parameter(Name=f"{PREFIX}DB_USER", Value=USER, Type="SecureString")
    ssm.put_parameter(Name=f"{PREFIX}OUT_PATH", Value=str(out), Type="String")
    ssm.put_parameter(Name=f"{PREFIX}events-path", Value=str(events), Type="String")
    secrets.create_secret(Name="sql-runner/test/payments/api", SecretString=json.dumps({"token": TOKEN, "n": 1}))
    secrets.create_secret(Name="sql-runner/test/payments/plain", SecretString="not json")


# ---- resolution, in process ----------------------------------------------------------------------


@pytest.fixture
def aws(monkeypatch, tmp_path):
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        seed(boto3.client("ssm"), boto3.client("secretsmanager"), tmp_path / "events", tmp_path / "out")
        yield


def test_each_kind_of_placeholder_resolves_from_its_source(aws):
    values = Values({"HOME_DIR": "/home/x"}, Sources(parameters_prefix=PREFIX, region=REGION))
    text = (
        "${HOME_DIR}|${DB_USER}|${ssm:/sql-runner/test/payments/DB_USER}|${secret:sql-runner/test/payments/api#token}"
    )
    assert resolve(text, values) == f"/home/x|{USER}|{USER}|{TOKEN}"
    assert resolve("${secret:sql-runner/test/payments/plain}", values) == "not json"
    assert resolve("$${DB_USER} stays", values) == "${DB_USER} stays"
    # without a parameters prefix, a ${NAME} is the environment's only
    with pytest.raises(UserError) as caught:
        resolve("${DB_USER}", Values({}, Sources(region=REGION)))
    assert caught.value.codes == ["UNRESOLVED_PLACEHOLDER"]


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("${ssm:/sql-runner/test/payments/missing}", "UNRESOLVED_PLACEHOLDER"),
        ("${secret:sql-runner/test/payments/missing}", "UNRESOLVED_PLACEHOLDER"),
        ("${secret:sql-runner/test/payments/api#missing}", "UNRESOLVED_PLACEHOLDER"),
        ("${secret:sql-runner/test/payments/plain#token}", "PLACEHOLDER_LOOKUP_FAILED"),
    ],
)
def test_what_cannot_be_resolved_is_named_and_its_value_never_shown(aws, text, code):
    with pytest.raises(UserError) as caught:
        resolve(text, Values({}, Sources(parameters_prefix=PREFIX, region=REGION)), field="sparkProperties.x")
    assert caught.value.codes == [code]
    message = caught.value.problems[0].render()
    assert text[2:-1] in message and "not json" not in message and TOKEN not in message


def test_without_credentials_the_lookup_fails_with_its_reason(monkeypatch, tmp_path):
    for key in list(os.environ):
        if key.startswith("AWS_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(UserError) as caught:
        resolve("${ssm:/sql-runner/x}", Values({}, Sources(region=REGION)))
    assert caught.value.codes == ["PLACEHOLDER_LOOKUP_FAILED"] and "NoCredentialsError" in str(caught.value)


# ---- jobs: the values exist only inside their drivers ------------------------------------------

DDL = (
    """
CREATE TABLE `demo`.`events` (id STRING, amount DOUBLE)
WITH ('connector' = 'filesystem', 'path' = '${ssm:/sql-runner/test/payments/events-path}', 'format' = 'json');

CREATE TABLE `demo`.`out` (id STRING, user_hash STRING, token_hash STRING"""
    + METADATA_DDL
    + """
) WITH ('connector' = 'filesystem', 'path' = '${OUT_PATH}', 'format' = 'json');
"""
)
MANIFEST = """
name: uses-secrets
target-table: "`demo`.`out`"
trigger-interval: 1 second
sparkProperties:
  spark.sqlrunner.test.token: ${secret:sql-runner/test/payments/api#token}
  spark.sqlrunner.test.user: ${DB_USER}
code: |
  import hashlib
  def digest(name):
      return hashlib.sha256(spark.conf.get(name, "").encode()).hexdigest()
  execution_output = table("`demo`.`events`").select(
      "id", F.lit(digest("spark.sqlrunner.test.user")).alias("user_hash"),
      F.lit(digest("spark.sqlrunner.test.token")).alias("token_hash"))
"""


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.fixture
def secret_store(tmp_path):
    """moto's server on loopback, seeded; the environment that reaches it (no placeholder values in it)."""
    with moto_server(REGION) as env:
        yield _seeded(env, tmp_path)


def _seeded(env: dict[str, str], tmp_path: Path) -> tuple[dict[str, str], Path]:
    clients = {
        name: boto3.client(
            name,
            region_name=REGION,
            endpoint_url=env["AWS_ENDPOINT_URL"],
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        for name in ("ssm", "secretsmanager")
    }
    events, out = tmp_path / "events", tmp_path / "out"
    events.mkdir()
    (events / "part-0.json").write_text("".join(json.dumps({"id": f"e{i}", "amount": i}) + "\n" for i in range(5)))
    seed(clients["ssm"], clients["secretsmanager"], events, out)
    return env, out


def project_with_secrets(project: ProjectDir) -> ProjectDir:
    project.ddl("tables", DDL)
    project.manifest("uses-secrets", MANIFEST)
    return project


def rows(out: Path) -> list[dict]:
    return [json.loads(line) for f in sorted(out.glob("*.json")) for line in f.read_text().splitlines() if line]


def holds_secret(data: bytes) -> list[str]:
    return [value for value in (TOKEN, USER) if value.encode() in data]


@pytest.mark.spark
@pytest.mark.e2e
def test_a_running_local_jobs_command_lines_log_and_state_hold_no_secret(project: ProjectDir, secret_store):
    env, out = secret_store
    project_with_secrets(project)
    options = ["--parameters-prefix", PREFIX, "--aws-region", REGION]
    cli(project, "deploy", *options, env=env)
    wait_for(lambda: len(rows(out)) == 5, "the job's rows", 180)
    assert {r["id"] for r in rows(out)} == {f"e{i}" for i in range(5)}
    assert {(r["user_hash"], r["token_hash"]) for r in rows(out)} == {(sha(USER), sha(TOKEN))}, "resolved in the driver"

    state = project.root / ".sql-runner"
    record = json.loads((state / "manifests" / "jobs" / "uses-secrets.json").read_text())
    cmdlines = {}
    for pid in group_members(record["pid"]):
        try:
            cmdlines[pid] = Path(f"/proc/{pid}/cmdline").read_bytes()
        except FileNotFoundError:
            continue  # a short-lived child (a Python worker, a shell) ended between the listing and the read
    programs = [Path(c.split(b"\0")[0].decode()).name for c in cmdlines.values()]
    assert "java" in programs and any(p.startswith("python") for p in programs), ("the JVM and the driver", programs)
    for pid, cmdline in cmdlines.items():
        assert not holds_secret(cmdline), (pid, cmdline)
        assert b"uses-secrets" not in cmdline or b'"manifest"' not in cmdline, "the spec is not on the command line"
    assert not holds_secret(Path(record["log"]).read_bytes())
    for path in state.rglob("*"):
        if path.is_file():
            assert not holds_secret(path.read_bytes()), path
    spec = json.loads(next((state / "manifests" / "specs" / "uses-secrets").glob("*.json")).read_text())
    assert spec["manifest"]["sparkProperties"]["spark.sqlrunner.test.user"] == "${DB_USER}"
    assert spec["placeholders"] == {"parameters-prefix": PREFIX, "region": REGION}
    cli(project, "stop", "uses-secrets", "--no-savepoint", env=env)


@pytest.mark.spark
def test_bad_placeholders_are_refused_before_anything_is_deployed(project: ProjectDir):
    project_with_secrets(project)
    bad_property = MANIFEST.replace("${DB_USER}", "${ssm:}")
    project.manifest("uses-secrets", bad_property)
    result = invoke(project, "validate", check=False)
    assert result.returncode == 2 and "MANIFEST_INVALID_PLACEHOLDER" in result.stderr, result.stderr
    at_launch = MANIFEST.replace("spark.sqlrunner.test.user", "spark.driver.extraJavaOptions")
    project.manifest("uses-secrets", at_launch)
    result = invoke(project, "validate", check=False)
    assert "MANIFEST_PLACEHOLDER_AT_LAUNCH" in result.stderr and "spark.driver.extraJavaOptions" in result.stderr
    project.manifest("uses-secrets", MANIFEST)
    project.ddl("tables", DDL.replace("${OUT_PATH}", "${secret:a b}"))
    result = invoke(project, "deploy", check=False)
    assert result.returncode == 2 and "DDL_INVALID_PLACEHOLDER" in result.stderr, result.stderr
    assert not (project.root / ".sql-runner" / "manifests" / "deployed").exists(), "nothing deployed"


@pytest.mark.spark
@pytest.mark.e2e
def test_a_yarn_submission_carries_no_secret_and_its_driver_resolves_them_without_the_runners_env(
    project: ProjectDir, secret_store, tmp_path
):
    env, out = secret_store
    project_with_secrets(project)
    with FakeResourceManager() as rm:
        submit = fake_spark_submit(tmp_path / "spark-submit", rm.url)
        options = ["--target", "yarn", "--resource-manager", rm.url, "--team", "payments"]
        cli(project, "deploy", *options, "--spark-submit", str(submit), "--parameters-prefix", PREFIX, env=env)
        [args] = rm.submissions
    flat = "\0".join(args).encode()
    assert not holds_secret(flat) and b"sparkProperties" not in flat, args
    assert "spark.yarn.maxAppAttempts=10" in args, "the default restart strategy: YARN's attempts too"
    spec_uri = args[args.index("--spec-uri") + 1]

    # On a core node the driver has none of the runner's environment: only the instance role's AWS access.
    import pyspark

    node_env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
        **{k: v for k, v in os.environ.items() if k.startswith("JAVA")},
        **env,
    }
    driver = subprocess.Popen(
        [
            str(Path(pyspark.__file__).parent / "bin" / "spark-submit"),
            "--master",
            "local[1]",
            "--conf",
            f"spark.pyspark.python={sys.executable}",
            args[args.index("--spec-uri") - 1],  # the entry point, as submitted
            "--spec-uri",
            spec_uri,
        ],
        env=node_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_for(lambda: len(rows(out)) == 5 or driver.poll() is not None, "the driver's rows", 180)
        assert driver.poll() is None, driver.stdout.read().decode() if driver.stdout else ""
        assert {(r["user_hash"], r["token_hash"]) for r in rows(out)} == {(sha(USER), sha(TOKEN))}
        stop = project.root / ".sql-runner" / "manifests" / "control" / "uses-secrets" / "stop.json"
        stop.parent.mkdir(parents=True, exist_ok=True)
        stop.write_text(json.dumps({"id": "test", "version": 1}))
        assert driver.wait(120) == 0
        assert driver.stdout is not None and not holds_secret(driver.stdout.read())
    finally:
        if driver.poll() is None:
            driver.kill()
