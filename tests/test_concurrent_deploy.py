"""Two `sql-runner deploy` processes racing on the same manifest, the manifests bucket on S3 (moto's server).

Whichever interleaving happens, exactly one job runs and the deployed record and history
agree: the loser either stood down on the lease (DEPLOY_IN_PROGRESS, nothing changed)
or came second and found the job already running (no change).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import boto3
import pytest

from runner.core import layout
from runner.core.bucket import S3Bucket
from runner.core.protocol.history import read_history
from runner.state.records import read_deployed
from runner.targets.local import process_start_ticks
from tests.clihelpers import SQL_RUNNER, cli, cli_env, edit, status, wait_for
from tests.conftest import ProjectDir
from tests.motoserver import moto_server

pytestmark = [pytest.mark.spark, pytest.mark.e2e, pytest.mark.s3]

BUCKET = "team-analytics-manifests"


@pytest.fixture
def s3_env(monkeypatch):
    with moto_server() as env:
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        boto3.client("s3").create_bucket(Bucket=BUCKET)
        yield env
        _kill_job_recorded_in_s3()


def _kill_job_recorded_in_s3() -> None:
    record = S3Bucket(BUCKET).read(layout.job_record("high-value"))
    if record is not None:  # the job's record is in S3, out of reach of the project fixture's cleanup
        pid = json.loads(record.text)["pid"]
        if process_start_ticks(pid) is not None:
            os.killpg(pid, signal.SIGKILL)


def race(project: ProjectDir, options: list[str], env: dict, done: str) -> str:
    """Two deploys at once: exactly one does ``done``; the other stood down or found nothing to do."""
    racers = [
        subprocess.Popen(
            [SQL_RUNNER, "deploy", *options],
            cwd=project.root,
            env=cli_env(env),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    results = [(p.wait(timeout=300), *p.communicate()) for p in racers]
    winners = [r for r in results if r[0] == 0 and f"high-value: {done}" in r[1] and " -> ok, job " in r[1]]
    assert len(winners) == 1, results
    [(code, stdout, stderr)] = [r for r in results if r not in winners]
    if code == 2 and "DEPLOY_IN_PROGRESS" in stderr and "nothing changed" in stderr:
        return "stood down"
    assert code == 0 and "high-value: no change" in stdout, (code, stdout, stderr)
    return "came second"


def test_two_deploys_at_once_leave_exactly_one_job(demo_project: ProjectDir, s3_env: dict, tmp_path: Path):
    options = ["--manifests-bucket", BUCKET, "--state", str(tmp_path / "state")]
    bucket = S3Bucket(BUCKET)
    expected = ["start"]
    first = race(demo_project, options, s3_env, "start v1 with clean state")
    expected += [] if first == "stood down" else ["nothing"]
    wait_for(lambda: status(demo_project, "high-value", *options)["state"] == "running", "the one job to run")

    before = json.loads(bucket.read(layout.job_record("high-value")).text)

    # a config change: the winner stops the job at a batch boundary (seconds, under the lease) and restores it
    edit(demo_project.root / "manifests" / "high-value.yaml", "Card transactions above 500", "Above 500 (audited)")
    second = race(demo_project, options, s3_env, "stop with savepoint, then restore v1")
    expected += ["restore"] if second == "stood down" else ["restore", "nothing"]

    record, _ = read_deployed(bucket, "high-value")
    assert record is not None and record.version == 1 and record.manifest.description == "Above 500 (audited)"
    assert [entry.decision for entry in read_history(bucket, "high-value")] == expected, (first, second)
    assert bucket.read(layout.stop_request("high-value")) is None, "no stop request left behind"
    job = json.loads(bucket.read(layout.job_record("high-value")).text)
    assert job["identity"]["run-id"] == record.run_id, "the recorded job is the deployed run"
    assert process_start_ticks(before["pid"]) is None and process_start_ticks(job["pid"]) is not None
    savepoints = list((tmp_path / "state" / "savepoints").glob("savepoints/high-value/1/savepoint-*/_SAVEPOINT.json"))
    assert len(savepoints) == 1, "one stop, one savepoint"
    assert not list((tmp_path / "state").glob("manifests/**/*")), "the manifests bucket is S3, nothing local"
    cli(demo_project, "stop", "high-value", "--no-savepoint", *options)
    assert process_start_ticks(job["pid"]) is None, "stopped"
