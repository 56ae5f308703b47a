"""Documents written by the previous release still read.

``tests/documents/schema-0/`` holds files the release before the protocol models wrote (no
``schema`` key): statuses, history entries, the session's health and held queries, a job record
and a lease, copied from the state folders of that release's own test run, plus statuses in the
states that run left no file of (refused, failing, gave up, parked), written by that release's
``JobControl`` (only a session token would have been a secret; none is kept here). Each is read by
today's model and checked field by field, and survives a write and a read by today's code.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from runner.console.overview import watermark_delay
from runner.core.bucket import LocalBucket
from runner.core.protocol.control import SessionStopped
from runner.core.protocol.document import SCHEMA, Document, Unreadable, read
from runner.core.protocol.history import HistoryEntry
from runner.core.protocol.ownership import JobRecord, Lease
from runner.core.protocol.session import HeldQueries, SessionHealth
from runner.core.protocol.status import BatchProgress, JobState, JobStatus, read_status
from runner.deploy.status import ended, next_restart

OLD = Path(__file__).parent / "documents" / "schema-0"
MODELS: dict[str, type[Document]] = {
    "status": JobStatus,
    "history": HistoryEntry,
    "session-health": SessionHealth,
    "session-held": HeldQueries,
    "session-stopped": SessionStopped,
    "job-record": JobRecord,
    "lease": Lease,
}


def old(name: str) -> str:
    return (OLD / f"{name}.json").read_text()


def model_of(path: Path) -> type[Document]:
    return next(model for prefix, model in MODELS.items() if path.stem.startswith(prefix))


@pytest.mark.parametrize("path", sorted(OLD.glob("*.json")), ids=lambda p: p.stem)
def test_every_document_of_the_previous_release_reads_and_survives_a_rewrite(path: Path):
    model = model_of(path)
    document = model.decode(path.read_text())
    assert document.schema_version == 0, "no schema key: the first release's"
    written = json.loads(document.encode())
    assert written["schema"] == SCHEMA
    again = model.decode(document.encode())
    assert again.model_copy(update={"schema_version": 0}) == document


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
