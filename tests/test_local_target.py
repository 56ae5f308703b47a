"""How the local target finds a job it started (runner/targets/local.py).

A local job is a process group: ``spark-submit``'s JVM leads it and the Python driver is its child. On a
SIGTERM the JVM ends first, while the driver still stops its queries and writes that it stopped; until then
the job is still there, and status must not call it "not running" in between. The processes here are
plain shell processes, no Spark: only the group's shape matters."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from runner.core import layout
from runner.core.identity import JobIdentity
from runner.core.protocol.document import read
from runner.core.protocol.ownership import JobRecord
from runner.state.store import open_store
from runner.targets.base import Launch, group_members
from runner.targets.local import LocalTarget

IDENTITY = JobIdentity(team="team", name="job", version=1, run_id="run-1")


def target(tmp_path: Path) -> LocalTarget:
    return LocalTarget(open_store(tmp_path / "state").manifests, tmp_path / "logs")


def wait_until(check, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_a_job_whose_leader_ended_is_found_while_its_group_lives_and_not_after(tmp_path: Path) -> None:
    local = target(tmp_path)
    # the leader starts a child in its group and ends, as spark-submit's JVM does before the driver on a SIGTERM
    started = local.submit(Launch(IDENTITY, None, ["bash", "-c", "sleep 60 & exit 0"]))
    leader = int(started.job_id.split("@")[0])
    wait_until(lambda: leader not in group_members(leader), "the leader to end")
    assert group_members(leader), "its child lives on in the group"
    found = local.find("team", "job")
    assert found is not None and found.job_id == started.job_id
    assert local.find("other-team", "job") is None

    os.killpg(leader, signal.SIGKILL)
    wait_until(lambda: not group_members(leader), "the group to end")
    assert local.find("team", "job") is None


def test_a_job_whose_recorded_process_is_another_is_not_found(tmp_path: Path) -> None:
    local = target(tmp_path)
    started = local.submit(Launch(IDENTITY, None, ["sleep", "60"]))
    leader = int(started.job_id.split("@")[0])
    try:
        assert local.find("team", "job") is not None
        # the record names the same id but another start time: a process that reused the id is not the job
        bucket = open_store(tmp_path / "state").manifests
        record = read(bucket, layout.job_record("job"), JobRecord)
        assert record is not None and record.start_ticks is not None
        bucket.write(
            layout.job_record("job"), record.model_copy(update={"start_ticks": record.start_ticks + 1}).encode()
        )
        assert local.find("team", "job") is None
    finally:
        os.killpg(leader, signal.SIGKILL)
