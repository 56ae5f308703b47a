"""How the runner reads what YARN says, and what a driver that lost its JVM sees, without a cluster.

The texts are YARN's own, as the run's ResourceManager (demo/yarn_cluster.py) wrote them for an ApplicationMaster
killed with SIGKILL and for spark-submit's refusals; tests/test_yarn_restarts.py and tests/test_yarn_cluster.py
see them end to end. Bad inputs tried: empty diagnostics, a refusal YARN words in no known way, an error that is
not about the JVM, and one whose cause is."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from py4j.protocol import Py4JNetworkError

from jobs import entry
from jobs.control import JobControl
from jobs.jvm import jvm_gone
from runner.core.bucket import LocalBucket
from runner.core.errors import UserError
from runner.core.identity import JobIdentity, run_from_tag
from runner.core.placeholders import Values
from runner.core.protocol.status import JobState, JobStatus
from runner.deploy.status import gave_up_on
from runner.targets.base import Ended
from runner.targets.yarn import _diagnosis, refusal
from tests.conftest import HIGH_VALUE_MANIFEST, TRANSACTIONS_DDL
from tests.jobhelpers import prepare

KILLED_ATTEMPT = (
    "AM Container for appattempt_1795771085516_0001_000001 exited with  exitCode: 137\n"
    "Failing this attempt.Diagnostics: [2026-11-27 09:18:17.002]Container killed on request. Exit code is 137\n"
    "[2026-11-27 09:18:17.008]Container exited with a non-zero exit code 137. \n"
    "[2026-11-27 09:18:17.009]Killed by external signal\n"
    "For more detailed output, check the application tracking page: http://localhost:46205/cluster/app/"
    "application_1795771085516_0001 Then click on links to logs of each attempt.\n"
)


def test_an_attempts_diagnostics_read_as_one_line_without_timestamps_or_links():
    said = _diagnosis(KILLED_ATTEMPT)
    assert said == (
        "AM Container for appattempt_1795771085516_0001_000001 exited with exitCode: 137; "
        "Container killed on request. Exit code is 137; Container exited with a non-zero exit code 137."
    )
    assert _diagnosis("") == "" and _diagnosis("\n \n") == ""
    assert len(_diagnosis("x" * 1000)) == 400


def test_yarns_refusals_name_the_setting_and_others_quote_spark_submit():
    queue = refusal(
        1,
        "Exception in thread main org.apache.hadoop.yarn.exceptions.YarnException: Failed to submit "
        "application_1_0001 to YARN : Application application_1_0001 submitted by user root to unknown "
        "queue: nightly\n\tat org.apache.hadoop.Client.submit(Client.java:1)",
    )
    assert [p.code for p in queue.problems] == ["YARN_QUEUE_UNKNOWN"]
    assert "YARN has no queue nightly (spark.yarn.queue)" in queue.problems[0].render()

    large = refusal(
        1,
        "Exception in thread main java.lang.IllegalArgumentException: Required AM memory (11264+1126 MB)"
        " is above the max threshold (10240 MB) of this cluster!",
    )
    assert [p.code for p in large.problems] == ["YARN_CONTAINER_TOO_LARGE"]
    text = large.problems[0].render()
    assert "driver container asks for 12390 MB (spark.driver.memory plus its overhead)" in text, text
    assert "than the 10240 MB" in text
    executor = refusal(1, "Required executor memory (20480+2048 MB) is above the max threshold (10240 MB)")
    assert "spark.executor.memory" in executor.problems[0].render()

    other = refusal(3, "Exception in thread main java.io.IOException: disk full\n\tat a.b(C.java:1)\nshutdown hook")
    assert isinstance(other, UserError) and [p.code for p in other.problems] == ["SUBMIT_FAILED"]
    assert "java.io.IOException: disk full" in other.problems[0].render() and "shutdown hook" not in str(other)


def test_a_driver_sees_its_jvm_gone_through_any_cause_and_only_then():
    assert jvm_gone(ConnectionRefusedError(111, "Connection refused"))
    assert jvm_gone(Py4JNetworkError("Answer from Java side is empty"))
    try:
        try:
            raise BrokenPipeError(32, "Broken pipe")
        except BrokenPipeError as lost:
            raise RuntimeError("query failed") from lost
    except RuntimeError as wrapped:
        assert jvm_gone(wrapped)
    assert not jvm_gone(RuntimeError("a sink that cannot write"))
    assert not jvm_gone(ValueError("bad value"))


def status(state: JobState, at: datetime) -> JobStatus:
    stamp = at.isoformat(timespec="milliseconds")
    return JobStatus(name="job", version=1, state=state, started_at=stamp, updated_at=stamp)


def test_an_application_yarn_gave_up_on_outweighs_what_the_job_said_before_it_only():
    end = datetime(2026, 11, 27, 10, 0, tzinfo=UTC)
    failed = Ended("application_1_0002 FAILED (FAILED) after 6 attempts", failed=True, at=end)
    assert gave_up_on(failed, None)
    assert gave_up_on(failed, status(JobState.STOPPED, end - timedelta(minutes=5)))  # an earlier run's stop
    assert not gave_up_on(failed, status(JobState.RUNNING, end + timedelta(seconds=1)))  # a later run spoke
    assert not gave_up_on(failed, status(JobState.FAILED, end - timedelta(minutes=5)))  # its own words win
    assert not gave_up_on(Ended("application_1_0003 KILLED (KILLED) after 1 attempt", failed=False, at=end), None)


class _GoneSpark:
    """A driver's SparkSession whose JVM has ended: every call to it fails as Py4J does then."""

    def stop(self) -> None:
        raise Py4JNetworkError("Error while sending or receiving")


def _driver_whose_jvm_ends(project, tmp_path, monkeypatch, *, signal: str) -> tuple[int, dict]:
    """Run a job's driver (jobs/entry.py) whose queries start and whose JVM then ends under them, a SIGTERM reaching
    this process too while the JVM ran (``signal="with the JVM"``: the local target's stop), after it had ended
    (``"after the JVM"``: a NodeManager cleaning up the container of a killed ApplicationMaster) or never
    (``"none"``): its exit code and the status it published."""
    project.ddl("tables", TRANSACTIONS_DDL)
    project.manifest("high-value", HIGH_VALUE_MANIFEST)
    store = LocalBucket(tmp_path / "state" / "manifests")
    _, spec = prepare(project, "high-value", tmp_path / "state", store={"manifests": store.describe()})
    control = JobControl(spec)
    job: list[entry.Job] = []
    handlers: list = []

    def start(self, first: bool) -> None:
        job.append(self)
        self.machine.started()

    def wait(*_args, **_kwargs) -> None:
        if signal == "after the JVM":
            job[0].parent = -1  # this process was reparented: its JVM had ended
        if signal != "none":
            handlers[0](15, None)  # the driver's own SIGTERM handler
        raise Py4JNetworkError("Answer from Java side is empty")

    monkeypatch.setattr(entry.Job, "start", start)
    monkeypatch.setattr(entry.runtime, "wait", wait)
    monkeypatch.setattr(entry.signal, "signal", lambda _number, handler: handlers.append(handler))
    code = entry.run(_GoneSpark(), spec, Values({}), control)
    return code, json.loads((tmp_path / "state" / "manifests" / "status" / "high-value.json").read_text())


def test_a_driver_told_to_stop_whose_jvm_ends_first_says_it_stopped(project, tmp_path, monkeypatch):
    # a SIGTERM to the job's process group reaches spark-submit's JVM too, which may end before the driver
    # has stopped its queries: the job was stopped as asked, not lost
    code, published = _driver_whose_jvm_ends(project, tmp_path, monkeypatch, signal="with the JVM")
    assert code == 0
    assert published["state"] == "stopped" and published["reason"] == "stop requested", published


def test_a_driver_whose_jvm_ends_unasked_ends_with_it_and_says_nothing_of_a_stop(project, tmp_path, monkeypatch):
    # killed, out of memory or its container lost: not a stop; on YARN the next attempt resumes the checkpoint
    for signal in ("none", "after the JVM"):
        code, published = _driver_whose_jvm_ends(project, tmp_path / signal, monkeypatch, signal=signal)
        assert code == 1, signal
        assert published["state"] == "running", (signal, published)


def test_a_run_id_survives_yarn_lowercasing_its_tag():
    identity = JobIdentity(team="t", name="_session", version=1, run_id="run-20261127T122644Z-ed43cd")
    kept = {tag.lower() for tag in identity.tags}  # as the ResourceManager lists them
    assert "sql-runner-run:run-20261127t122644z-ed43cd" in kept
    assert run_from_tag(kept) == "run-20261127T122644Z-ed43cd"
    assert run_from_tag({"sql-runner", "sql-runner-name:q"}) == ""  # started by a release that tagged no run
    assert "sql-runner-run:" not in ",".join(JobIdentity(team="t", name="q", version=2).tags)
