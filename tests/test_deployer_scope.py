"""What deciding starts ends with the deployer's ``with`` block (runner/deploy/deployer.py).

Deciding may launch a job to judge each manifest (runner/deploy/launches.py). Those jobs are launched only inside
``with deployer:``, and the block's end tells every one a decision did not start to exit (killed if it does not),
so no command can leave one waiting. The job here is a stand-in ``spark-submit`` (no Spark is needed to see the
launch and its end): it waits for what the runner tells it, as a judging driver does, keeps a copy and exits;
told nothing, it would wait until killed."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from runner.core.catalog import Catalog
from runner.core.manifest import Manifest
from runner.deploy import launches
from runner.deploy.deployer import Deployer
from runner.deploy.settings import Settings
from runner.state.store import open_store
from runner.targets.base import group_members
from runner.targets.local import LocalTarget
from runner.targets.modes import Targets

STAND_IN = """\
import pathlib, shutil, sys, time
spec = pathlib.Path(sys.argv[sys.argv.index("--spec-uri") + 1].removeprefix("file://"))
release = spec.parent / "release.json"
while not release.exists():
    time.sleep(0.05)
shutil.copy(release, {told!r})
"""


def deployer(tmp_path: Path) -> Deployer:
    submit = tmp_path / "spark-submit"
    submit.write_text(f"#!{sys.executable}\n" + STAND_IN.format(told=str(tmp_path / "told.json")))
    submit.chmod(submit.stat().st_mode | stat.S_IXUSR)
    store = open_store(tmp_path / "state")
    target = LocalTarget(store.manifests, tmp_path / "logs")
    settings = Settings(store, Targets(target), "team", dict(os.environ), spark_submit=str(submit))
    return Deployer(None, settings, judge_in_jobs=True)


MANIFEST = Manifest(name="job", target_table="`demo`.`out`", sql="SELECT 1")


def launch_specs(tmp_path: Path) -> list[Path]:
    return [p for p in (tmp_path / "state" / "manifests" / "launches").rglob("*") if p.is_file()]


def test_a_judging_job_is_launched_only_inside_the_deployers_block(tmp_path: Path):
    outside = deployer(tmp_path)
    assert outside.launcher is not None
    with pytest.raises(RuntimeError, match="only inside `with deployer:`"):
        outside.launcher.launch(MANIFEST, "manifests/job.yaml", Catalog(), None)
    assert outside.launcher.launched == {} and launch_specs(tmp_path) == []  # nothing started, nothing written
    with outside:
        pass
    with pytest.raises(RuntimeError):  # and not after it
        outside.launcher.launch(MANIFEST, "manifests/job.yaml", Catalog(), None)


def test_the_blocks_end_sends_away_every_job_no_decision_started(tmp_path: Path):
    with pytest.raises(KeyError), deployer(tmp_path) as deploying:
        assert deploying.launcher is not None
        launched = deploying.launcher.launch(MANIFEST, "manifests/job.yaml", Catalog(), None)
        process = launched.started.process
        assert process.poll() is None  # it runs, waiting
        raise KeyError("the command fails before any decision is carried out")
    assert process.poll() == 0, "the job outlived the block, or was killed instead of told"
    told = json.loads((tmp_path / "told.json").read_text())
    assert told["launch-id"] == launched.launch_id and told["start"] is False
    assert told["reason"] == "the deploy ended before its decision started it"
    assert launch_specs(tmp_path) == []  # seen off: what the runner and the job said to each other is gone


def test_a_job_told_to_go_that_does_not_is_killed(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(launches, "EXIT_WAIT", 0.5)
    with deployer(tmp_path) as deploying:
        assert deploying.launcher is not None
        (tmp_path / "spark-submit").write_text("#!/bin/sh\nexec sleep 300\n")  # deaf to what it is told
        launched = deploying.launcher.launch(MANIFEST, "manifests/job.yaml", Catalog(), None)
    assert launched.started.process.poll() is not None, "the job outlived the block"


def test_nothing_of_a_job_sent_away_outlives_it(tmp_path: Path, monkeypatch):
    """A driver that exits when told to can leave a process behind in its group (its Python driver, a child of
    its JVM, exits a moment later): seeing it off waits for the group, and kills what stays too long."""
    monkeypatch.setattr(launches, "GROUP_EXIT_WAIT", 0.5)
    with deployer(tmp_path) as deploying:
        assert deploying.launcher is not None
        submit = tmp_path / "spark-submit"
        # told to go, it leaves a child behind that would run for minutes, and exits itself
        leaving = "import subprocess\nsubprocess.Popen(['sleep', '300'])\n"
        submit.write_text(submit.read_text() + leaving)
        launched = deploying.launcher.launch(MANIFEST, "manifests/job.yaml", Catalog(), None)
        group = launched.started.process.pid
    assert launched.started.process.poll() == 0  # it went when told
    assert group_members(group) == [], "a process of the job sent away is still running"
