"""What a decision takes, and carrying it out, without Spark.

``steps(action)`` is pure: each kind of action maps to its steps in a safe order (stop and
savepoint before the record changes; the record before the job starts). The executor
carries steps out against a store (a local folder) and a target; here the target is
RecordingTarget, a test double that only records what it was asked to do, because the
point is what the executor asks of a target and writes to the store, not Spark.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from runner.core import layout
from runner.core.errors import UserError
from runner.core.identity import JobIdentity
from runner.core.manifest import Manifest, Meta
from runner.core.protocol.deployed import DeploymentRecord
from runner.core.protocol.document import SCHEMA
from runner.core.protocol.history import Outcome
from runner.core.reasons import Reason
from runner.core.starts import SourceTable
from runner.core.stateref import StateRef
from runner.deploy.executor import Executor
from runner.deploy.inputs import Decision, Prepared
from runner.deploy.plan import Action, Observed
from runner.deploy.settings import Settings
from runner.deploy.steps import (
    ApplyRetention,
    FreshCheckpoint,
    MarkRemoved,
    RecordUpdate,
    Refuse,
    RestoreSavepoint,
    ResumeCheckpoint,
    StartJob,
    StopWithSavepoint,
    WriteRecord,
    steps,
)
from runner.state import records
from runner.state.store import open_store
from runner.targets.base import RunningJob
from runner.targets.modes import Targets
from tests.recording_target import RecordingTarget

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
IN = SourceTable(table="`demo`.`in`", connector="filesystem")
STOP_SAVEPOINT = StateRef(kind="stop-savepoint", version=1)


def test_each_action_kind_has_its_steps_in_a_safe_order():
    restore = Action("j", "restore", (), version=1, stop=True, restore_from=STOP_SAVEPOINT)
    assert steps(restore) == (
        StopWithSavepoint(),
        RestoreSavepoint(STOP_SAVEPOINT),
        WriteRecord(),
        StartJob(),
        ApplyRetention(),
    )
    checkpoint = StateRef(kind="checkpoint", version=1, key="checkpoints/j/1/run-x/")
    resume = Action("j", "restore", (), version=1, restore_from=checkpoint)
    assert steps(resume) == (ResumeCheckpoint(checkpoint), WriteRecord(), StartJob(), ApplyRetention())
    new_version = Action("j", "start", (), version=2, stop=True, continue_from=STOP_SAVEPOINT)
    assert steps(new_version)[:2] == (StopWithSavepoint(), FreshCheckpoint(STOP_SAVEPOINT))
    assert steps(Action("j", "start", (), version=1)) == (
        FreshCheckpoint(None),
        WriteRecord(),
        StartJob(),
        ApplyRetention(),
    )
    assert steps(Action("j", "remove", (), version=1, stop=True)) == (StopWithSavepoint(), MarkRemoved())
    assert steps(Action("j", "remove", (), version=1)) == (MarkRemoved(),)
    assert steps(Action("j", "update", (), version=1)) == (RecordUpdate(), ApplyRetention())
    assert steps(Action("j", "nothing", ())) == ()
    none_found = (Reason.of("NO_STATE_FOUND", version=1),)
    assert steps(Action("j", "error", none_found, version=1)) == (Refuse(none_found),)


def manifest(sql: str = "SELECT id FROM `demo`.`in`", version: int | None = None) -> Manifest:
    meta = Meta(query_id="q-1", query_version=version, query_create_timestamp=NOW) if version else None
    return Manifest(name="job", target_table="`demo`.`out`", sql=sql, meta=meta)


@pytest.fixture
def world(tmp_path: Path):
    store = open_store(tmp_path)
    target = RecordingTarget()
    clock = iter(NOW + timedelta(seconds=i) for i in range(1000))
    executor = Executor(Settings(store, Targets(target), "team", {}), lambda: next(clock))
    return store, target, executor


def deployed_running(store, target) -> tuple[DeploymentRecord, RunningJob, str]:
    """v1 deployed and running, with a checkpoint that committed batches 0 and 1."""
    record = DeploymentRecord(
        manifest=manifest(version=1), sources=(IN,), run_id="run-a", target="recording", deployed_at=NOW
    )
    blob_etag = store.manifests.write(layout.deployed("job"), record.encode())
    checkpoint = layout.checkpoint("job", 1, "run-a")
    for batch in (0, 1):
        store.checkpoints.write(f"{checkpoint}commits/{batch}", b"v1\n{}")
        store.checkpoints.write(f"{checkpoint}offsets/{batch}", b"v1\n{}")
    job = RunningJob(JobIdentity(team="team", name="job", version=1, run_id="run-a"), "recording", "job-0")
    target.running["job"] = job
    return record, job, blob_etag


def test_a_state_compatible_change_stops_snapshots_restores_and_starts_in_that_order(world):
    store, target, executor = world
    record, job, etag = deployed_running(store, target)
    action = Action(
        "job", "restore", (Reason.of("QUERY_MEANING_CHANGED"),), version=1, stop=True, restore_from=STOP_SAVEPOINT
    )
    prepared = Prepared(
        manifest("SELECT id FROM `demo`.`in` WHERE id > 1"), "manifests/job.yaml", (), record.sources, None
    )
    outcome = Outcome()
    executor.carry_out(
        Decision("job", action, prepared, record, etag, job, Observed(running=True)), steps(action), outcome
    )

    assert target.calls == [("stop-gracefully", "job"), ("submit", "job")]
    savepoint = outcome.savepoint
    assert savepoint is not None and savepoint.graceful and savepoint.last_committed_batch == 1
    assert store.savepoints.read(f"{savepoint.key}commits/1") is not None
    restored, run_id = outcome.checkpoint, outcome.run_id
    assert restored is not None and run_id is not None
    assert restored == layout.checkpoint("job", 1, run_id) and run_id != "run-a"
    assert store.checkpoints.read(f"{restored}commits/1") is not None  # the new run folder holds the savepoint
    now_deployed, _ = records.read_deployed(store.manifests, "job")
    assert now_deployed is not None and now_deployed.run_id == run_id and now_deployed.version == 1
    assert now_deployed.manifest.sql.endswith("WHERE id > 1")
    spec = target.launches[0].spec
    assert spec is not None and spec.checkpoint == store.checkpoints.uri(restored)
    assert spec.manifest.meta == record.manifest.meta  # the same version keeps its meta


def test_a_record_changed_since_the_decision_stops_the_carry_out_before_anything_starts(world):
    store, target, executor = world
    record, job, etag = deployed_running(store, target)
    store.manifests.write(layout.deployed("job"), record.encode() + b"# another runner\n")
    action = Action(
        "job", "start", (Reason.of("QUERY_MEANING_CHANGED"),), version=2, stop=True, continue_from=STOP_SAVEPOINT
    )
    prepared = Prepared(manifest(), "manifests/job.yaml", (), record.sources, None)
    with pytest.raises(UserError) as raised:
        executor.carry_out(
            Decision("job", action, prepared, record, etag, job, Observed(running=True)), steps(action), Outcome()
        )
    assert raised.value.problems[0].code == "DEPLOYED_STATE_CHANGED"
    assert ("submit", "job") not in target.calls


def test_refuse_touches_nothing(world):
    store, target, executor = world
    action = Action("job", "error", (Reason.of("NO_STATE_FOUND", version=1),), version=1)
    with pytest.raises(UserError) as raised:
        executor.carry_out(Decision("job", action, None, None, None, None, Observed()), steps(action), Outcome())
    assert raised.value.problems[0].code == "NO_STATE_TO_RESTORE"
    assert target.calls == [] and store.manifests.keys("") == []


def test_deploying_one_mode_leaves_the_other_modes_jobs_alone(world):
    """``deploy --all --mode application`` (EMR's first step): the session's jobs, and a job whose
    manifest moved to the session, are neither deployed nor removed by it."""
    from runner.deploy.deployer import Deployer

    store, target, executor = world
    for name, on in (
        ("app", "recording"),
        ("hosted", "session"),
        ("moved", "recording"),
        ("gone-app", "recording"),
        ("gone-hosted", "session"),
    ):
        kept = manifest(version=1).model_copy(update={"name": name})
        record = DeploymentRecord(manifest=kept, sources=(IN,), run_id="run-a", target=on, deployed_at=NOW)
        store.manifests.write(layout.deployed(name), record.encode())
    deployer = Deployer(None, executor.settings)
    app = Prepared(manifest().model_copy(update={"name": "app"}), "manifests/app.yaml", (), (), None)
    decided = deployer.decide_all({"app": app}, whole_project=True, mode="application", other_mode={"moved", "hosted"})
    kinds = {d.name: d.action.kind for d in decided}
    assert set(kinds) == {"app", "gone-app"} and kinds["gone-app"] == "remove"
    everything = deployer.decide_all({"app": app}, whole_project=True)
    assert {d.name for d in everything} == {"app", "hosted", "moved", "gone-app", "gone-hosted"}


def test_a_deployed_record_reads_back_the_same_whether_written_now_or_as_block_yaml_by_an_earlier_runner():
    record = DeploymentRecord(
        manifest=manifest(version=2),
        sources=(IN,),
        run_id="run-b",
        target="local",
        deployed_at=NOW,
        continued_from=StateRef(kind="savepoint", version=1, key="savepoints/job/1/savepoint-x/", created=NOW),
    )
    written = record.encode().decode()
    assert yaml.safe_load(written) == json.loads(written)  # any YAML reader reads what is written
    assert json.loads(written)["deployment"]["run-id"] == "run-b" and json.loads(written)["name"] == "job"

    def read(text: str) -> DeploymentRecord:
        found = DeploymentRecord.decode(text)
        assert found.schema_version == SCHEMA
        return found.model_copy(update={"schema_version": 0})

    assert read(written) == record
    block = yaml.safe_dump(json.loads(written), sort_keys=False)  # the form records had before
    assert not block.lstrip().startswith("{")
    assert read(block) == record
    assert read(block + "# edited by hand\n") == record


def test_a_deploy_reads_the_layout_recorded_by_the_state_a_restore_would_start_from(world):
    """What the plan is told about a changelog query's state comes from the store: the running run's checkpoint
    while the job runs (a restart would restore its stop savepoint), else the newest savepoint or checkpoint."""
    from runner.core.engine_record import ENGINE_FILE
    from runner.deploy.inputs import observe

    store, target, _ = world
    targets = Targets(target)
    deployed_running(store, target)
    running = layout.checkpoint("job", 1, "run-a")
    store.checkpoints.write(f"{running}{ENGINE_FILE}", b"incremental 7\n")
    said = observe(store, targets, "team", "job").observed
    assert said.running and "as a later release keeps it (layout 7;" in (said.unreadable or ""), said
    store.checkpoints.write(f"{running}{ENGINE_FILE}", b"incremental 3\n")
    assert observe(store, targets, "team", "job").observed.unreadable is None

    # stopped: an older run folder in a layout this release reads, a newer savepoint in one it does not
    del target.running["job"]
    older = layout.checkpoint("job", 1, "run-20260301T110000Z-aaaaaa")
    store.checkpoints.write(f"{older}metadata", b"{}")
    store.checkpoints.write(f"{older}{ENGINE_FILE}", b"incremental\n")
    newer = layout.savepoint("job", 1, "savepoint-20260301T113000Z-bbbbbb")
    store.savepoints.write(f"{newer}{ENGINE_FILE}", b"incremental x\n")
    store.savepoints.write(f"{newer}_SAVEPOINT.json", b"{}")
    said = observe(store, targets, "team", "job").observed
    assert not said.running and said.savepoints[-1].key == newer, said
    assert said.unreadable == (
        "the checkpoint records the incremental engine's state in a layout this release cannot read: incremental x"
    )
    store.savepoints.delete_prefix(newer)  # the older run folder is what a restore takes now: layout 1 is read
    said = observe(store, targets, "team", "job").observed
    assert not said.savepoints and said.checkpoints[-1].key == older and said.unreadable is None, said
    store.checkpoints.delete(f"{older}{ENGINE_FILE}")  # no record: not the incremental engine's
    assert observe(store, targets, "team", "job").observed.unreadable is None


def test_a_savepoint_of_a_job_whose_state_this_release_would_not_restore_is_refused_before_anything_stops(world):
    """``sql-runner savepoint`` stops the job and restarts it from the savepoint: for state this release does not
    read, the restart would refuse it and leave the job failed, so the command is refused and the job runs on."""
    from runner.core.engine_record import ENGINE_FILE
    from runner.deploy.deployer import Deployer

    store, target, _ = world
    deployed_running(store, target)
    store.checkpoints.write(f"{layout.checkpoint('job', 1, 'run-a')}{ENGINE_FILE}", b"incremental 7\n")
    deployer = Deployer(None, Settings(store, Targets(target), "team", {}), lambda: NOW)
    with pytest.raises(UserError) as refused:
        deployer.savepoint("job")
    said = refused.value.problems[0]
    assert said.code == "SAVEPOINT_STATE_UNREADABLE", said
    assert "this release cannot restore the state of v1 (the checkpoint holds" in said.render(), said.render()
    assert "sql-runner stop job keeps a savepoint without a restart" in said.render(), said.render()
    assert target.calls == [] and "job" in target.running, "nothing was stopped"
