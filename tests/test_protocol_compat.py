"""Documents written by the previous releases still read.

``tests/documents/schema-<n>/`` holds files as earlier releases wrote them, by the schema they carry
(none: 0). In ``schema-0``, from the release before the protocol models: statuses, history entries, the
session's health and held queries, a job record and a lease, copied from the state folders of that
release's own test run, plus statuses in the states that run left no file of (refused, failing, gave
up, parked), written by that release's ``JobControl`` (only a session token would have been a secret;
none is kept here). Also in ``schema-0``, from the release before the job spec, the tables, the
deployed record and the session's configuration were documents: the deployed record and the job spec
of a deploy of ``schema-0/enriched-project`` (a new version continuing the first, after a change of its
target) and of its stop, with the record also as the block YAML earlier runners wrote; a judging job's
spec (with Kafka offsets, an S3 store and placeholder sources) and a session's configuration, written by
that release's own classes. In ``schema-1``, from that same deploy: its history entries, its job record,
and a start request for the session holding a job spec. ``printed/`` holds what that release printed:
``plan --json`` for the stopped query. Each is read by today's model and checked field by field, and
survives a write and a read by today's code.
"""

from __future__ import annotations

import json
import shutil
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from runner.authoring.project import load_project
from runner.cli import render
from runner.console.overview import watermark_delay
from runner.core.bucket import LocalBucket, S3Address, bucket_from
from runner.core.protocol.control import SessionStopped, StartRequest
from runner.core.protocol.deployed import DeploymentRecord
from runner.core.protocol.document import SCHEMA, Document, Unreadable, read
from runner.core.protocol.history import HistoryEntry
from runner.core.protocol.jobspec import JobSpec
from runner.core.protocol.ownership import JobRecord, Lease
from runner.core.protocol.session import HeldQueries, SessionHealth
from runner.core.protocol.session_config import SessionConfig
from runner.core.protocol.status import BatchProgress, JobState, JobStatus, read_status
from runner.core.querydiff import same_text
from runner.core.reasons import Reason
from runner.core.starts import KafkaOffsets, SkipFiles, SourceTable
from runner.core.stateref import StateRef
from runner.deploy.inputs import Decision
from runner.deploy.plan import Action, Observed
from runner.deploy.status import ended, next_restart
from runner.state import records

DOCUMENTS = Path(__file__).parent / "documents"
OLD = DOCUMENTS / "schema-0"
LAST = DOCUMENTS / "schema-1"
MODELS: dict[str, type[Document]] = {
    "status": JobStatus,
    "history": HistoryEntry,
    "session-health": SessionHealth,
    "session-held": HeldQueries,
    "session-stopped": SessionStopped,
    "session-config": SessionConfig,
    "job-record": JobRecord,
    "lease": Lease,
    "deployed": DeploymentRecord,
    "jobspec": JobSpec,
    "start-request": StartRequest,
}
WRITTEN = sorted(p for p in DOCUMENTS.glob("schema-*/*") if p.suffix in (".json", ".yaml"))
# where the deploy that wrote the schema-0 record and specs ran: the project folder its paths name
WRITTEN_IN = "/tmp/i53docs/proj"


def old(name: str, suffix: str = ".json") -> str:
    return (OLD / f"{name}{suffix}").read_text()


def last(name: str) -> str:
    return (LAST / f"{name}.json").read_text()


def model_of(path: Path) -> type[Document]:
    return next(model for prefix, model in MODELS.items() if path.stem.startswith(prefix))


@pytest.mark.parametrize("path", WRITTEN, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_document_of_the_previous_releases_reads_and_survives_a_rewrite(path: Path):
    model = model_of(path)
    document = model.decode(path.read_text())
    assert document.schema_version == int(path.parent.name.removeprefix("schema-")), "the schema it was written with"
    written = json.loads(document.encode())
    assert written["schema"] == SCHEMA
    again = model.decode(document.encode())
    assert again.model_copy(update={"schema_version": document.schema_version}) == document


def test_statuses_of_the_previous_release_read_field_by_field():
    running = JobStatus.decode(old("status-running-with-restarts"))
    assert (running.name, running.version, running.state) == ("copier", 1, JobState.RUNNING)
    assert running.launch_id and running.progress is not None and running.progress.batch >= 0
    assert running.recent_progress[-1] == running.progress

    session = JobStatus.decode(old("status-session-query"))
    assert (session.mode, session.state) == ("session", JobState.STOPPED) and session.session_run
    assert session.reason == "stop requested"

    refused = JobStatus.decode(old("status-refused"))
    assert refused.state == JobState.FAILED and refused.state.final
    assert refused.state_refused is not None and refused.state_refused.startswith("[STATE_STORE_KEY_SCHEMA")

    failing = JobStatus.decode(old("status-failing"))
    assert (failing.state, failing.restarts, failing.failures) == (JobState.FAILING, 2, 0)
    assert failing.failure_times == [1764100000.5, 1764100012.25] and not failing.state.final
    # that release said the wait in seconds after the status's updated-at (retry-in: 20.0); today, when
    assert failing.retry_at == "2026-11-25T20:06:35.987+00:00"
    at = datetime.fromisoformat(failing.updated_at) + timedelta(seconds=5)
    assert next_restart(failing, at) == "restart in 15s"

    # an application job gave up and a session parked its query: one field today, each in its mode's words
    gave_up = JobStatus.decode(old("status-gave-up"))
    assert gave_up.gave_up and not gave_up.parked and ended(gave_up) == " (restarts used up)"
    parked = JobStatus.decode(old("status-parked"))
    assert parked.gave_up and parked.parked and ended(parked) == " (parked)"
    assert (parked.failures, parked.restarts, parked.mode) == (5, 4, "session")

    failed = JobStatus.decode(old("status-failed-at-start"))
    assert failed.state == JobState.FAILED and "KAFKA_PROTOCOL_MISMATCH" in (failed.error or "")


def test_a_status_file_of_the_previous_release_is_what_status_reads(tmp_path: Path):
    bucket = LocalBucket(tmp_path)
    bucket.write("status/counts.json", old("status-stopped").encode())
    status = read_status(bucket, "counts")
    assert status is not None and status.of_run(2, "run-20261125T200501Z-6b2560")
    assert status.state == JobState.STOPPED and status.reason == "finished"
    assert status.progress is not None and status.progress.watermark == "2026-01-01T09:13:48.000Z"


def test_a_watermark_of_the_start_of_the_epoch_is_no_watermark_yet():
    """Spark says "no watermark yet" with the start of the epoch, and earlier jobs wrote it into their status
    as it was: read today, it is no watermark, so the status, the console and /metrics show no delay."""
    stopped = JobStatus.decode(old("status-stopped"))
    first, last = stopped.recent_progress
    assert "1970-01-01T00:00:00.000Z" in old("status-stopped"), "the old status holds Spark's epoch watermark"
    assert (first.watermark, last.watermark) == (None, "2026-01-01T09:13:48.000Z")
    assert watermark_delay(first) is None and watermark_delay(last) is not None
    assert "1970" not in stopped.encode().decode()
    assert BatchProgress(batch=0, watermark="1970-01-01T00:00:00.000Z").watermark is None
    assert BatchProgress(batch=0, watermark="1970-01-01T00:00:00.001Z").watermark == "1970-01-01T00:00:00.001Z"
    assert BatchProgress(batch=0).watermark is None


def test_history_of_the_previous_release_keeps_its_words_and_its_outcome():
    change = HistoryEntry.decode(old("history-session-change-with-savepoint"))
    assert (change.decision, change.version, change.target) == ("start", 2, "session")
    assert [r.code for r in change.reasons] == ["RECORDED_TEXT"] * 4
    assert change.reasons[1].render().startswith("deduplication 1 changed: deduplication on id")
    assert change.outcome.savepoint is not None and change.outcome.savepoint.graceful
    assert change.outcome.savepoint.last_committed_batch == 4
    assert change.outcome.continuation == ["`demo`.`events` (main): skips the 6 files read up to batch 4"]
    assert change.sources[0].how == "continue" and change.seconds == 1.655

    refused = HistoryEntry.decode(old("history-refused-by-job"))
    assert refused.decision == "refused" and refused.outcome.failed and refused.team is None


def test_the_sessions_documents_of_the_previous_release_read():
    held = HeldQueries.decode(old("session-held"))
    assert list(held.queries) == ["q-m"] and held.queries["q-m"].tables == ["`demo`.`events`", "`demo`.`out-a`"]
    health = SessionHealth.decode(old("session-health"))
    assert health.state == "stopped" and health.queries.stuck_builds == 0 and "q-x" in health.invalid
    assert SessionStopped.decode(old("session-stopped")).run_id


def test_a_document_that_is_not_one_is_a_clear_error(tmp_path: Path):
    bucket = LocalBucket(tmp_path)
    bucket.write("status/broken.json", b'{"name": "broken", "state": "dancing"}')
    with pytest.raises(Unreadable, match="status/broken.json is not a readable document"):
        read(bucket, "status/broken.json", JobStatus)


@pytest.mark.parametrize(
    "body", ['{"limit": 5}', '{"sql": "SELECT 1", "manifest": {"name": "q"}}', '{"sql": 5}', "not json"]
)
def test_a_preview_request_that_is_not_one_is_refused_with_its_reason(body: str):
    """What the session's endpoint answers 400 to: neither or both of sql and manifest, a wrong type, not JSON."""
    from pydantic import ValidationError

    from runner.core.protocol.preview import PreviewRequest

    with pytest.raises(ValidationError) as refused:
        PreviewRequest.decode(body)
    assert refused.value.errors(), "pydantic names what is wrong"
    assert PreviewRequest.decode('{"sql": "SELECT 1", "limit": 5}').limit == 5


def test_a_deployed_record_of_the_previous_release_reads_field_by_field_in_either_form(tmp_path: Path):
    record = DeploymentRecord.decode(old("deployed-enriched", ".yaml"))
    assert (record.name, record.version, record.target, record.removed) == ("enriched", 2, "local", False)
    assert record.run_id == "run-20261127T014110Z-e49434" and record.deployed_at.tzinfo is not None
    assert record.continued_from is not None and record.continued_from.kind == "savepoint"
    assert record.continued_from.key == "savepoints/enriched/1/savepoint-20261127T014110Z-092069/"
    assert record.sources == (SourceTable(table="`demo`.`events`", connector="filesystem"),)
    events, users, target = record.tables
    assert events.watermark is not None and (events.watermark.column, events.watermark.delay) == ("ts", "5 seconds")
    assert events.column("id").nullable is False and events.column("id").comment == "the event's id"
    assert events.column("amount_eur").computed and events.column("amount_eur").type is None
    assert events.column("tags").type is not None and events.column("tags").type.sql() == "ARRAY<STRING>"
    assert users.primary_key == ("id",) and users.options["lookup.cache"] == "FULL"
    assert target.partitioned_by == ("region",) and target.options["path"] == "${OUT_ROOT}/enriched-by-region"
    assert DeploymentRecord.decode(old("deployed-enriched-block-yaml", ".yaml")) == record

    bucket = LocalBucket(tmp_path / "state")
    bucket.write("deployed/enriched.yaml", old("deployed-enriched", ".yaml").encode())
    read_back, blob = records.read_deployed(bucket, "enriched")
    assert read_back == record and blob is not None
    rewritten = json.loads(record.encode())
    assert rewritten["deployment"]["tables"][1]["primary-key"] == ["id"] and rewritten["name"] == "enriched"


def test_the_previous_releases_record_of_an_unchanged_project_is_the_same_text(tmp_path: Path):
    """After an upgrade, the DDL the previous release deployed from reads as the same definitions, so a
    query nobody changed is seen as unchanged (no analysis, no restart)."""
    shutil.copytree(OLD / "enriched-project", tmp_path / "project")
    project = load_project(tmp_path / "project")
    record = DeploymentRecord.decode(old("deployed-enriched", ".yaml").replace(WRITTEN_IN, str(tmp_path / "project")))
    desired = project.load_manifest(tmp_path / "project" / "manifests" / "enriched.yaml")
    used = [t for t in project.catalog.tables if t.name in {r.name for r in record.tables}]
    assert same_text(record.manifest, record.tables, desired, used)


def test_job_specs_of_the_previous_release_read_field_by_field():
    continuing = JobSpec.decode(old("jobspec-continuing"))
    assert continuing.label == "enriched v2" and continuing.run_id == "run-20261127T014110Z-e49434"
    assert continuing.dead_letter.endswith("/checkpoints/dead-letter/enriched") and not continuing.once
    assert continuing.launch_id == "47636d37401e" and continuing.judging is None
    (start,) = continuing.starts["main"].values()
    assert isinstance(start, SkipFiles) and start.count == 1 and start.uri.endswith("/main-demo-events.json")
    assert [t.primary_key for t in continuing.catalog.tables] == [(), ("id",), ()]
    assert continuing.store is not None and bucket_from(continuing.store["manifests"]).describe().kind == "local"

    judging = JobSpec.decode(old("jobspec-judging"))
    assert judging.judging is not None and judging.judging.file == "manifests/enriched.yaml"
    assert judging.judging.deployed is not None and judging.judging.deployed.version == 2
    assert judging.judging.deployed_tables == continuing.catalog.tables and judging.judging.wait == 600.0
    offsets = judging.starts["main"]["`demo`.`events`"]
    assert isinstance(offsets, KafkaOffsets) and offsets.offsets == {"events": {"0": 42, "1": 17}}
    assert judging.placeholders.parameters_prefix == "/sql-runner-prod-payments/"
    assert judging.placeholders.region == "eu-west-1"
    assert judging.store is not None and judging.store["savepoints"] == S3Address(bucket="team-savepoints")


def test_a_start_request_of_the_previous_release_holds_a_spec_that_reads():
    request = StartRequest.decode(last("start-request"))
    assert request.id == "20261127T014530.123Z-1a2b3c"
    assert JobSpec.decode(request.spec) == JobSpec.decode(old("jobspec-continuing"))


def test_a_session_configuration_of_the_previous_release_reads_field_by_field():
    config = SessionConfig.decode(old("session-config"))
    assert (config.team, config.run_id, config.project) == ("payments", "session-20261127T014500Z-3f9a1c", None)
    assert (config.poll, config.stop_timeout, config.control_address, config.control_port) == (
        1.0,
        120.0,
        "0.0.0.0",
        8097,
    )
    assert config.console_actions and config.protection.max_failures == 4 and config.protection.build_timeout == 30.0
    assert config.application.kind == "yarn" and config.application.master is None
    assert config.application.resource_manager == "http://ip-10-0-0-1.ec2.internal:8088"
    assert config.application.log_dir == "/var/lib/sql-runner/.sql-runner/logs"
    assert config.placeholders.region == "eu-west-1"
    assert bucket_from(config.store["checkpoints"]).uri("x") == "s3://team-checkpoints/x"


def test_the_last_releases_history_and_job_record_read_field_by_field():
    first = HistoryEntry.decode(last("history-start-v1"))
    assert (first.decision, first.version, first.summary) == ("start", 1, "start v1 with clean state")
    assert [r.code for r in first.reasons] == ["NEW_JOB"] and first.sources[0].how == "startup-position"
    second = HistoryEntry.decode(last("history-start-v2-continuing"))
    assert second.sources[0].how == "continue" and second.outcome.savepoint is not None
    assert second.outcome.continuation == ["`demo`.`events` (main): skips the 1 files read up to batch 0"]
    stop = HistoryEntry.decode(last("history-stop"))
    assert stop.decision == "stop" and [r.code for r in stop.reasons] == ["STOP_REQUESTED"]
    job = JobRecord.decode(last("job-record"))
    assert (job.identity.name, job.identity.version, job.identity.launch) == ("enriched", 2, "47636d37401e")
    assert job.identity.run_id == "run-20261127T014110Z-e49434"


def test_plan_json_prints_what_the_previous_release_printed_for_the_same_decision():
    """Byte for byte: tools read these lines, and some match text in them."""
    (line,) = (DOCUMENTS / "printed" / "plan-json.jsonl").read_text().splitlines()
    savepoint = StateRef(kind="savepoint", version=2, key="savepoints/enriched/2/savepoint-20261127T014122Z-9bba0f/")
    action = Action("enriched", "restore", (Reason.of("NOT_RUNNING"),), version=2, restore_from=savepoint)
    decision = Decision("enriched", action, None, None, None, None, Observed())
    assert render.plan_json(decision) == line
