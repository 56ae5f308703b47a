"""A new or changed query is judged by its own job's driver, not by a Spark the runner starts beside it.

Real ``sql-runner deploy`` processes and detached spark-submit jobs on local Spark. What a user sees:
the deploy prints the same plan and records the same decisions, with the judgement's source in the
history; no local Spark is started by the command; a refused change leaves the running job, its record
and its history as they were, and the job launched to judge it is gone with nothing left behind.

Bad inputs tried: a change naming a column the table does not have (refused while v1 runs), and a
whitespace-only edit (judged, decided "no change", its job sent away).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from demo.committed_rows import committed_json_rows
from demo.transactions import transactions, write_batch
from runner.core import classdata
from runner.core.catalog import Catalog
from runner.core.errors import Problem
from runner.core.manifest import Manifest
from runner.core.protocol.jobspec import JobSpec, Judging
from runner.core.protocol.launch import Verdict
from runner.core.querydiff import QueryDiff
from runner.core.reasons import Reason, codes
from runner.deploy import submit
from tests.clihelpers import START, cli, edit, history, status, wait_for
from tests.conftest import ProjectDir

LOCAL_SPARK = "starting local Spark to analyse the queries"


def launch_processes(launch: str, *, but: str | None = None) -> list[int]:
    """Processes of this machine whose command line names the launch (its driver and its JVM), ``but`` those
    that also name another (read once per process: a child the running job's driver forks a moment ago has its
    command line until it runs another program, and must not pass for a launch that was sent away)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                command = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if launch.encode() in command and (but is None or but.encode() not in command):
                found.append(int(entry.name))
    return found


def maps(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return ""


def launch_files(project: ProjectDir) -> list[Path]:
    return [p for p in (project.root / ".sql-runner" / "manifests" / "launches").rglob("*") if p.is_file()]


def judged_launch(project: ProjectDir, name: str) -> str:
    """The launch id the last history entry says judged the manifest."""
    judged = history(project, name)[-1].inputs["judged-by"]
    assert judged.startswith("the job's own driver (launch "), judged
    return judged.removeprefix("the job's own driver (launch ").split(",")[0]


@pytest.mark.spark
@pytest.mark.e2e
def test_deploys_are_judged_by_their_jobs_and_a_refused_change_changes_nothing(demo_project: ProjectDir):
    project = demo_project
    manifest = project.root / "manifests" / "high-value.yaml"
    manifest.write_text(manifest.read_text() + "trigger-interval: 1 second\n")
    rows = transactions(20, start=START, seed=5)
    write_batch(project.root / "data" / "in", "b1", rows)

    # new: judged by its job, which then runs as v1
    result = cli(project, "deploy")
    assert "start v1 with clean state" in result.stdout
    assert "judged by its job's driver" in result.stderr and LOCAL_SPARK not in result.stderr
    launch = judged_launch(project, "high-value")
    expected = sorted(r.transaction_id for r in rows if r.amount > 500)
    out = project.root / "data" / "out"
    wait_for(lambda: sorted(r["transaction_id"] for r in committed_json_rows(out)) == expected, "v1's rows")
    job = wait_for(lambda: status(project, "high-value")["job"], "v1 running")
    record = project.root / ".sql-runner" / "manifests" / "jobs" / "high-value.json"
    assert f'"launch": "{launch}"' in record.read_text()  # the launched job is the job found, stopped, killed
    # its JVM maps Spark's classes from the drivers' class-data archive instead of loading them
    archive = str(classdata.archive())
    assert any(archive in maps(pid) for pid in launch_processes(launch)), archive
    wait_for(lambda: not launch_files(project), "the released job to clear what it was told")

    # a change naming a column the table does not have: refused; v1 runs on untouched
    deployed = project.root / ".sql-runner" / "manifests" / "deployed" / "high-value.yaml"
    before, entries = deployed.read_bytes(), len(history(project, "high-value"))
    edit(manifest, "WHERE amount > 500", "WHERE amount > 500 AND no_such_column = 1")
    refused = cli(project, "deploy", check=False)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "UNKNOWN_COLUMN" in refused.stderr and "no_such_column" in refused.stderr
    assert LOCAL_SPARK not in refused.stderr
    assert deployed.read_bytes() == before and len(history(project, "high-value")) == entries
    assert status(project, "high-value")["job"] == job and status(project, "high-value")["state"] == "running"
    assert launch_files(project) == []
    # the job judging the refused change was told so and goes: its JVM's exit takes a moment on a loaded machine
    wait_for(lambda: launch_processes("launches/high-value/", but=launch) == [], "the refused change's job to exit", 60)

    # whitespace only: judged, no change; the job launched to judge it is sent away, v1 keeps running
    edit(manifest, "WHERE amount > 500 AND no_such_column = 1", "where   amount>500  -- big ones")
    planned = cli(project, "plan", "--json").stdout
    assert '"summary": "no change"' in planned
    result = cli(project, "deploy")
    entry = history(project, "high-value")[-1]
    assert entry.decision == "nothing" and "LAYOUT_ONLY" in codes(entry.reasons)
    sent_away = judged_launch(project, "high-value")
    assert sent_away != launch and launch_files(project) == []
    wait_for(lambda: launch_processes(sent_away) == [], "the job sent away to exit", 60)
    assert status(project, "high-value")["job"] == job

    # a compatible change: `plan` says beforehand what the deploy then does, and the job judging it is released
    edit(manifest, "amount>500", "amount>500 AND amount < 1000000")
    planned = cli(project, "plan", "--json").stdout
    assert "restore v1 from the savepoint taken when v1 stops" in planned
    result = cli(project, "deploy")
    entry = history(project, "high-value")[-1]
    assert entry.decision == "restore" and "STATE_CARRIES_OVER" in codes(entry.reasons)
    assert entry.summary in planned
    restored = judged_launch(project, "high-value")
    assert restored not in (launch, sent_away)
    assert wait_for(lambda: status(project, "high-value")["job"], "the restored job") != job
    more = transactions(10, start=START, seed=6, first_id=len(rows))
    write_batch(project.root / "data" / "in", "b2", more)
    expected = sorted(r.transaction_id for r in [*rows, *more] if r.amount > 500)
    wait_for(lambda: sorted(r["transaction_id"] for r in committed_json_rows(out)) == expected, "the restored rows")


@pytest.mark.spark  # the drivers' class-data archive, which a JVM builds (make jars)
def test_only_drivers_on_this_machine_are_given_the_class_data_archive():
    assert classdata.archive().is_file(), "make jars builds it"
    here = submit.application_command(Path("entry.py"), [], master="local[2]", env={}, app_name="a", properties={})
    there = submit.application_command(
        Path("entry.py"), [], master="yarn", env={}, app_name="a", properties={}, this_machine=False
    )
    shared = f"-XX:SharedArchiveFile={classdata.archive()}"
    assert shared in here[here.index("--driver-java-options") + 1]
    assert "SharedArchiveFile" not in there[there.index("--driver-java-options") + 1]


def test_the_launch_documents_round_trip():
    verdict = Verdict(
        launch_id="abc",
        at="2026-11-26T00:00:00.000+00:00",
        seconds=1.5,
        problems=[Problem.of("SQL_ANALYSIS_ERROR", file="m.yaml", field="sql", reason="no x")],
        diff=QueryDiff(
            changed=True, state_compatible=False, reasons=(Reason.of("QUERY_MEANING_CHANGED"),), held_state=True
        ),
    )
    read = Verdict.decode(verdict.encode())
    assert not read.ok and read.problems == verdict.problems and read.problems[0].render().startswith("m.yaml: ")
    assert read.diff == verdict.diff
    assert Verdict(launch_id="x", at="t", seconds=0, failure="boom").ok is False
    manifest = Manifest.model_validate({"name": "q", "target-table": "`a`.`b`", "sql": "SELECT 1"})
    spec = JobSpec(
        manifest=manifest,
        catalog=Catalog(()),
        checkpoint="/c",
        dead_letter="/d",
        launch_id="abc",
        judging=Judging(file="m.yaml", deployed=manifest, wait=30),
    )
    again = JobSpec.decode(spec.encode(line=True))
    assert again.judging == spec.judging and again.label == "q"
