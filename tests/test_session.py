"""Session mode on real local Spark: one application hosts every query and applies manifest edits itself.

- Lifecycle: five queries in one session while events keep arriving; a query is added,
  one is changed compatibly (restored from its savepoint), one incompatibly (other
  deduplication keys: v2 continues after the files v1 read), one is removed. The
  untouched queries keep advancing through every change (their batch ids grow), and
  every file sink holds each expected row exactly once. A failing query (a code snippet
  that throws) is restarted with backoff, parked after --max-failures, never disturbs the
  others, and runs again once its manifest is fixed. An invalid manifest (no query) is
  reported and changes nothing.
- Durability: the session killed with SIGKILL while events arrive and started
  again resumes every query from its latest state; a savepoint taken from outside the
  session (``sql-runner savepoint``: a stop request, then the job spec handed to the
  session) restores the query there; outputs exact.
- Moving a query between modes: stop with a savepoint in one, restore in the other.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import time
import urllib.error
import urllib.request
from datetime import datetime
from pathlib import Path

import pytest

from jobs.control import RECENT_BATCHES
from runner.core.reasons import Reason
from tests.clihelpers import batch, cli, history, invoke, status_file, statuses, wait_for
from tests.conftest import ProjectDir
from tests.sessionhelpers import DDL, TEMPLATE, Feeder, dedup, query, record_status, rows

BAD_CODE = """
name: q-bad
target-table: "`demo`.`out-bad`"
code: |
  def boom(value):
      raise ValueError("the snippet throws on every row")
  failing = F.udf(boom, "double")
  execution_output = table("`demo`.`events`").select("id", failing("amount").alias("amount"))
"""
FIXED_CODE = """
name: q-bad
target-table: "`demo`.`out-bad`"
code: |
  execution_output = table("`demo`.`events`").select("id", "amount")
"""


def in_this_session(project: ProjectDir, name: str) -> bool:
    """The query completed a micro-batch in the session that runs now."""
    health = json.loads((project.root / ".sql-runner" / "manifests" / "session" / "health.json").read_text())
    status = status_file(project, name)
    return status.get("session-run") == health["run-id"] and status.get("progress") is not None


def session_pid(project: ProjectDir) -> int:
    return json.loads((project.root / ".sql-runner" / "manifests" / "jobs" / "_session.json").read_text())["pid"]


def advancing(project: ProjectDir, names: list[str], since: dict[str, int]) -> bool:
    return all(batch(project, name) > since[name] for name in names)


@pytest.fixture
def session_project(project: ProjectDir) -> ProjectDir:
    project.ddl("tables", DDL)
    project.template(TEMPLATE)
    return project


@pytest.mark.spark
@pytest.mark.e2e
def test_a_session_applies_adds_changes_and_removals_while_the_other_queries_keep_running(
    session_project: ProjectDir,
):
    project = session_project
    feeder = Feeder(project.root / "data" / "events")
    feeder.write()
    project.manifest("q-a", query("q-a", "out-a", "SELECT id, amount FROM `demo`.`events` WHERE amount > 10"))
    project.manifest("q-b", query("q-b", "out-b", "SELECT id, amount FROM `demo`.`events`"))
    project.manifest("q-c", dedup("q-c", "out-c", '"id"'))
    project.manifest("q-d", query("q-d", "out-d", "SELECT id, amount FROM `demo`.`events` WHERE amount > 20"))
    project.manifest("q-e", query("q-e", "out-e", "SELECT id, amount FROM `demo`.`events`"))
    project.manifest("q-bad", BAD_CODE)
    started = cli(project, "session", "start", "--max-failures", "2")
    assert "up in" in started.stdout
    assert "already running" in cli(project, "session", "start").stdout  # one session per team

    steady = ["q-a", "q-d"]
    wait_for(lambda: all(batch(project, n) >= 0 for n in ["q-a", "q-b", "q-c", "q-d", "q-e"]), "five queries running")
    # The throwing snippet: restarted with backoff, then parked; the others are not disturbed.
    wait_for(lambda: status_file(project, "q-bad").get("gave-up"), "q-bad parked", 120)
    bad = statuses(project)["q-bad"]
    assert bad["state"] == "failed (parked)"
    assert "the snippet throws on every row" in bad["why"] and bad["restarts"] == 1
    kinds = [entry.decision for entry in history(project, "q-bad")]
    assert kinds == ["start", "failing", "parked"], kinds
    health = json.loads(cli(project, "session", "status", "--json").stdout)
    assert health["queries"]["parked"] == 1 and health["queries"]["running"] == 5

    previews_answered_by_the_session_write_nothing(project)

    feeder.start()
    try:
        mark = {n: batch(project, n) for n in steady}
        # add
        project.manifest("q-f", query("q-f", "out-f", "SELECT id, amount FROM `demo`.`events`"))
        wait_for(lambda: batch(project, "q-f") >= 0, "the added query's first batch", 120)
        wait_for(lambda: advancing(project, steady, mark), "steady queries advancing across the add", 60)
        recent = [r["batch"] for r in status_file(project, "q-f")["recent-progress"]]
        assert recent == list(range(recent[0], recent[-1] + 1)), f"every batch of the run, in order: {recent}"
        assert recent[0] == 0 or len(recent) == RECENT_BATCHES, "the run's first batch, unless 20 came after it"

        # compatible change: restored from the savepoint the stop took, same version
        mark = {n: batch(project, n) for n in steady}
        run_before = status_file(project, "q-b")["run-id"]
        project.manifest("q-b", query("q-b", "out-b", "SELECT id, amount FROM `demo`.`events` WHERE amount >= 0"))
        wait_for(
            lambda: status_file(project, "q-b").get("run-id") not in (None, run_before) and batch(project, "q-b") >= 0,
            "q-b restored",
            120,
        )
        assert status_file(project, "q-b")["version"] == 1
        assert history(project, "q-b")[-1].summary.startswith("stop with savepoint, then restore v1 from")
        wait_for(lambda: advancing(project, steady, mark), "steady queries advancing across the change", 60)

        # incompatible change (other deduplication keys): v2, continuing after the files v1 read
        mark = {n: batch(project, n) for n in steady}
        project.manifest("q-c", dedup("q-c", "out-c", '"id", "account"'))
        wait_for(lambda: status_file(project, "q-c").get("version") == 2 and batch(project, "q-c") >= 0, "q-c v2", 120)
        assert "start v2 with clean state" in history(project, "q-c")[-1].summary
        wait_for(lambda: advancing(project, steady, mark), "steady queries advancing across the new version", 60)

        # an invalid manifest is reported and changes nothing
        (project.root / "manifests" / "q-x.yaml").write_text("name: q-x\ntarget-table: nowhere\n")
        health = project.root / ".sql-runner" / "manifests" / "session" / "health.json"
        wait_for(lambda: "q-x" in json.loads(health.read_text())["invalid"], "q-x reported", 60)
        assert "q-x" not in statuses(project)

        # removal
        mark = {n: batch(project, n) for n in steady}
        (project.root / "manifests" / "q-e.yaml").unlink()
        wait_for(lambda: record_status(project, "q-e") == "removed", "q-e removed", 120)
        removed_at = rows(project, "out-e")
        wait_for(lambda: advancing(project, steady, mark), "steady queries advancing across the removal", 60)

        # the parked query comes back when its manifest is fixed
        project.manifest("q-bad", FIXED_CODE)
        wait_for(lambda: status_file(project, "q-bad").get("state") == "running", "q-bad running again", 120)
    finally:
        feeder.stop()

    everything = set(feeder.amounts)
    tables = ["out-a", "out-b", "out-c", "out-d", "out-f", "out-bad"]
    wanted = {
        "out-a": {k for k, v in feeder.amounts.items() if v > 10},
        "out-d": {k for k, v in feeder.amounts.items() if v > 20},
    }
    wait_for(lambda: all(set(rows(project, t)) == wanted.get(t, everything) for t in tables), "every event written", 90)
    stopped = cli(project, "session", "stop")
    assert "session stopped" in stopped.stdout
    for table in tables:
        counted = rows(project, table)
        assert set(counted) == wanted.get(table, everything), table
        assert max(counted.values()) == 1, f"{table} has duplicates"
    assert rows(project, "out-e") == removed_at  # nothing written after the removal
    for name in ["q-a", "q-b", "q-c", "q-d", "q-f", "q-bad"]:
        assert statuses(project)[name]["state"] == "stopped"
        assert history(project, name)[-1].summary == "session stopped: stop with savepoint"


def previews_answered_by_the_session_write_nothing(project: ProjectDir) -> None:
    """Live previews from the running session (no new JVM); the control endpoint refuses requests
    without the session's token. Bad inputs tried: a query naming a missing column, no token, a wrong
    token, a wrong scheme, an unknown path."""
    state = project.root / ".sql-runner"
    busy = ("status", "session", "logs", "locks")

    def files() -> set[str]:
        """Every file of the state store and the tables, but those the running session keeps rewriting."""
        stored = {p for p in state.rglob("*") if p.is_file() and not set(p.relative_to(state).parts[:2]) & set(busy)}
        return {p.relative_to(project.root).as_posix() for p in [*stored, *(project.root / "data").rglob("*")]}

    before = files()
    sql = cli(project, "preview", "--sql", "SELECT id, amount FROM `demo`.`events` WHERE amount >= 2")
    assert "answered by session" in sql.stderr and "starting local Spark" not in sql.stderr
    assert "2 row(s)" in sql.stdout and "e00002" in sql.stdout and "e00003" in sql.stdout
    manifest = cli(project, "preview", "manifests/q-d.yaml", "-n", "1")
    assert "answered by session" in manifest.stderr and "0 row(s)" in manifest.stdout  # nothing above 20 yet
    wrong = cli(project, "preview", "--sql", "SELECT nope FROM `demo`.`events`", check=False)
    assert wrong.returncode == 2 and "SESSION_PREVIEW_FAILED" in wrong.stderr and "nope" in wrong.stderr
    assert files() == before, "a preview wrote nothing"

    control = json.loads((state / "manifests" / "session" / "control.json").read_text())
    assert control["url"].startswith("http://127.0.0.1:")
    body = json.dumps({"sql": "SELECT id FROM `demo`.`events`"}).encode()
    for headers, path, code in (
        ({}, "/preview", 401),
        ({"Authorization": "Bearer not-the-token"}, "/preview", 401),
        ({"Authorization": f"Basic {control['token']}"}, "/preview", 401),
        ({"Authorization": f"Bearer {control['token']}"}, "/other", 404),
    ):
        request = urllib.request.Request(control["url"] + path, data=body, headers=headers, method="POST")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=30)
        assert refused.value.code == code, (headers, path)
    # a judge request that is not one: refused, naming what is missing
    bearer = {"Authorization": f"Bearer {control['token']}", "Content-Type": "application/json"}
    request = urllib.request.Request(control["url"] + "/judge", data=b"{}", headers=bearer, method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=30)
    assert (
        refused.value.code == 400 and "not a judge request: manifest: Field required" in refused.value.read().decode()
    )
    published = [state / "manifests" / "session" / "health.json", *(state / "logs").glob("*")]
    assert not any(control["token"] in p.read_text(errors="replace") for p in published if p.is_file())
    assert control["token"] not in cli(project, "session", "status").stdout


@pytest.mark.spark
@pytest.mark.e2e
def test_a_killed_session_resumes_every_query_from_its_latest_state(session_project: ProjectDir):
    project = session_project
    feeder = Feeder(project.root / "data" / "events")
    feeder.write()
    project.manifest("q-a", query("q-a", "out-a", "SELECT id, amount FROM `demo`.`events` WHERE amount > 10"))
    project.manifest("q-b", dedup("q-b", "out-b", '"id"'))
    cli(project, "session", "start")
    feeder.start()
    try:
        wait_for(lambda: all(in_this_session(project, n) for n in ("q-a", "q-b")), "batches before the kill", 90)
        time.sleep(3.0)  # bench/session.py's soak kills it many more times, at random moments
        os.killpg(session_pid(project), signal.SIGKILL)
        wait_for(lambda: "not running" in invoke(project, "session", "status").stdout, "the session gone", 30)
        cli(project, "session", "start")
        wait_for(lambda: in_this_session(project, "q-b"), "q-b resumed", 90)
        # From outside the session: stop q-b between batches, snapshot it, and hand the session the restore.
        run_before = status_file(project, "q-b")["run-id"]
        assert "savepoints/q-b/1/savepoint-" in cli(project, "savepoint", "q-b").stdout
        wait_for(
            lambda: status_file(project, "q-b")["run-id"] != run_before and in_this_session(project, "q-b"),
            "q-b running again from its savepoint",
            60,
        )
    finally:
        feeder.stop()
    wanted = {"out-a": {k for k, v in feeder.amounts.items() if v > 10}, "out-b": set(feeder.amounts)}
    wait_for(lambda: all(set(rows(project, t)) == ids for t, ids in wanted.items()), "every event written", 90)
    cli(project, "session", "stop")
    for table, ids in wanted.items():
        counted = rows(project, table)
        assert set(counted) == ids and max(counted.values()) == 1, table
    resumed, from_savepoint = [e for e in history(project, "q-b") if e.decision == "restore"]
    assert resumed.outcome.resumed_checkpoint  # after the kill: the checkpoint the dead session used
    assert from_savepoint.outcome.restored_from and from_savepoint.target == "session"


@pytest.mark.spark
@pytest.mark.e2e
def test_a_query_moves_between_application_and_session_mode_with_its_state(session_project: ProjectDir):
    project = session_project
    project.template("trigger-interval: 2 seconds\nsparkProperties: {spark.sql.shuffle.partitions: '2'}\n")
    feeder = Feeder(project.root / "data" / "events")
    feeder.write()
    path = project.manifest("q-m", dedup("q-m", "out-a", '"id"'))
    cli(project, "deploy")
    wait_for(lambda: batch(project, "q-m") >= 0, "the application job's first batch")
    cli(project, "session", "start")
    feeder.start()
    try:
        # application -> session: the session stops the application job with a savepoint and restores it
        path.write_text(path.read_text() + "mode: session\n")
        wait_for(lambda: status_file(project, "q-m").get("mode") == "session" and batch(project, "q-m") >= 0, "moved")
        moved = history(project, "q-m")[-1]
        assert moved.summary.startswith("stop with savepoint, then restore v1 from") and moved.target == "session"
        assert Reason.of("CONFIG_CHANGED", fields=["mode"]) in moved.reasons
        assert moved.outcome.savepoint and moved.outcome.savepoint.graceful
        assert statuses(project)["q-m"]["target"] == "session"
        # session -> application: deploy stops the session query with a savepoint and restores it as an application
        path.write_text(path.read_text().replace("mode: session\n", "mode: application\n"))
        cli(project, "deploy")
        back = history(project, "q-m")[-1]
        assert back.target == "local" and back.outcome.savepoint and back.outcome.savepoint.graceful, back
        wait_for(lambda: statuses(project)["q-m"]["state"] == "running" and batch(project, "q-m") >= 0, "back")
        assert statuses(project)["q-m"]["target"] == "local"
    finally:
        feeder.stop()
    wait_for(lambda: set(rows(project, "out-a")) == set(feeder.amounts), "every event written", 90)
    counted = rows(project, "out-a")
    assert max(counted.values()) == 1  # the checkpoint travelled with the query: no file read twice
    cli(project, "stop", "q-m")
    cli(project, "session", "stop")
    # both modes write local files through Hadoop's raw local file system (jobs/localfs.py): no checksum
    # file beside any checkpoint, savepoint, state or output file
    assert list((project.root / ".sql-runner").rglob("state/**/*.delta")), "the dedup query kept state"
    assert not [p.relative_to(project.root) for p in project.root.rglob("*.crc")]


PACED_DDL = """
CREATE TABLE `demo`.`paced-events` (id STRING, account STRING, amount DOUBLE, ts TIMESTAMP(3))
WITH ('connector' = 'filesystem', 'path' = 'data/events', 'format' = 'json', 'source.max-files-per-trigger' = '4');
"""
SLOW_CODE = """
name: q-slow
target-table: "`demo`.`out-c`"
code: |
  import time
  def slowly(value):
      time.sleep(0.4)
      return value
  slow = F.udf(slowly, "double")
  # four files (16 rows) per micro-batch, one row per task: 16 tasks of 0.4 s keep both cores busy over 3 s
  execution_output = table("`demo`.`paced-events`").repartition(16).select("id", slow("amount").alias("amount"))
"""
HANGING_BUILD = """
name: q-hang-build
target-table: "`demo`.`out-d`"
code: |
  import time
  time.sleep(3600)  # never returns while the query is built
  execution_output = table("`demo`.`events`").select("id", "amount")
"""
HANGING_BATCH = """
name: q-hang-batch
target-table: "`demo`.`out-e`"
code: |
  import time
  def forever(value):
      time.sleep(3600)
      return value
  hang = F.udf(forever, "double")
  execution_output = table("`demo`.`events`").select("id", hang("amount").alias("amount"))
"""


@pytest.mark.spark
@pytest.mark.e2e
@pytest.mark.alone
def test_one_slow_query_does_not_hold_up_the_others_and_code_that_blocks_is_cut_off(session_project: ProjectDir):
    """FAIR pools: a query whose micro-batches keep both cores busy for over 3 s (sixteen 0.4 s tasks) beside
    two light ones; the light ones keep their 2-second trigger within 2x. Code that blocks: a snippet
    that never returns while the query is built, and a UDF that never returns inside a micro-batch,
    are cut off by the build and batch timeouts and parked; the session and the others carry on.
    The batch timeout (30 s) leaves the slow query room: on a busy 2-core host its batches took up to
    12 s of running tasks (25 s for the first), and a cut-off would park it."""
    project = session_project
    project.ddl("paced", PACED_DDL)
    feeder = Feeder(project.root / "data" / "events", every=0.5)
    feeder.write()
    light = ["q-a", "q-b"]
    project.manifest("q-a", query("q-a", "out-a", "SELECT id, amount FROM `demo`.`events`"))
    project.manifest("q-b", query("q-b", "out-b", "SELECT id, amount FROM `demo`.`events`"))
    project.manifest("q-slow", SLOW_CODE)
    project.manifest("q-hang-build", HANGING_BUILD)
    project.manifest("q-hang-batch", HANGING_BATCH)
    cli(project, "session", "start", "--build-timeout", "4", "--batch-timeout", "30", "--max-failures", "1")
    feeder.start()
    try:
        health_file = project.root / ".sql-runner" / "manifests" / "session" / "health.json"
        wait_for(lambda: "q-hang-build" in json.loads(health_file.read_text())["invalid"], "the hanging build cut off")
        wait_for(lambda: status_file(project, "q-hang-batch").get("gave-up"), "the hanging batch parked", 120)
        wait_for(
            lambda: all(batch(project, n) >= 0 for n in [*light, "q-slow"]),
            "the others running",
            120,
            explain=lambda: (health_file.read_text(), cli(project, "status").stdout),
        )
        health = json.loads(cli(project, "session", "status", "--json").stdout)
        assert health["queries"] == {"running": 3, "failing": 0, "parked": 1, "stuck-builds": 1}, health
        assert "SESSION_QUERY_BUILD_TIMEOUT" in health["invalid"]["q-hang-build"]
        now = statuses(project)
        assert "q-hang-build" not in now  # never deployed: reported, nothing changed
        assert "batch timeout" in now["q-hang-batch"]["why"]
        assert all(now[n]["state"] == "running" and now[n]["restarts"] == 0 for n in [*light, "q-slow"]), now

        starts: dict[str, dict[int, str]] = {name: {} for name in [*light, "q-slow"]}
        slow_batches: dict[int, int] = {}
        deadline = time.monotonic() + 16
        while time.monotonic() < deadline:
            for name in starts:
                progress = status_file(project, name).get("progress") or {}
                if progress.get("batch") is not None:
                    starts[name][progress["batch"]] = progress["timestamp"]
                    if name == "q-slow":
                        slow_batches[progress["batch"]] = progress["batch-duration-ms"]
            time.sleep(0.1)
    finally:
        feeder.stop()
    cli(project, "session", "stop")
    assert len(slow_batches) >= 2 and statistics.median(slow_batches.values()) >= 2500, slow_batches
    for name in light:
        moments = [datetime.fromisoformat(starts[name][b].replace("Z", "+00:00")) for b in sorted(starts[name])]
        gaps = [(later - earlier).total_seconds() for earlier, later in zip(moments, moments[1:], strict=False)]
        assert len(gaps) >= 5 and statistics.median(gaps) <= 4.0, (name, gaps)


class FakeQuery:
    """A stand-in for a StreamingQuery whose batches complete between the supervisor's looks.

    A real query only does that when its batches are faster than the poll, which no test can
    arrange reliably; here the query's progress is set by hand. Progress entries carry the
    fields the status takes from Spark's StreamingQueryProgress, and an idle query's progress
    is Spark's (tests/test_job.py checks it on a real query): no rows, no batch run, the id of
    the batch to come."""

    def __init__(self):
        self.recentProgress: list = []

    def _add(self, n: int, rows: int, durations: dict) -> None:
        fields = {
            "batchId": n,
            "timestamp": f"2026-01-01T00:00:{len(self.recentProgress):02d}.000Z",
            "numInputRows": rows,
            "inputRowsPerSecond": float(rows),
            "processedRowsPerSecond": 10.0 * rows,
            "durationMs": durations,
            "eventTime": {},
            "sources": [],
            "stateOperators": [],
            "sink": None,
        }
        self.recentProgress.append(type("Progress", (), fields)())

    def complete(self, *batches: int) -> None:
        for n in batches:
            self._add(n, 5, {"addBatch": 80, "latestOffset": 5, "triggerExecution": 100})

    def idle(self) -> None:
        done = [p.batchId for p in self.recentProgress if "addBatch" in p.durationMs]
        self._add(done[-1] + 1 if done else 0, 0, {"latestOffset": 5, "triggerExecution": 6})

    @property
    def lastProgress(self):
        return self.recentProgress[-1] if self.recentProgress else None


def test_a_query_publishes_every_batch_even_several_between_two_looks(tmp_path: Path):
    """The status's recent-progress holds every batch of the run in order: the run's first ones, the
    batch after an idle spell (whose idle progress already bore its id), and batches that completed
    between two looks; idle progress is not a batch. Session queries and application jobs publish
    through the same ``JobControl.publish_progress``."""
    from jobs.control import JobControl
    from runner.core.bucket import LocalBucket
    from runner.core.catalog import Catalog
    from runner.core.manifest import Manifest
    from runner.core.protocol.jobspec import JobSpec

    store = LocalBucket(tmp_path / "manifests")
    manifest = Manifest.model_validate({"name": "q", "target-table": "t", "sql": "SELECT 1"})
    spec = JobSpec(
        manifest=manifest,
        catalog=Catalog(),
        checkpoint="/c",
        dead_letter="/d",
        store={"manifests": store.describe()},
        run_id="run-1",
    )
    control = JobControl(spec)
    control.machine.started()  # its queries run
    query = FakeQuery()
    queries = [query]

    def publish() -> bool:
        return control.publish_progress(queries)  # type: ignore[arg-type] - a stand-in for a StreamingQuery

    def published() -> list[int]:
        status = json.loads((tmp_path / "manifests" / "status" / "q.json").read_text())
        assert status["progress"] == status["recent-progress"][-1]
        return [r["batch"] for r in status["recent-progress"]]

    assert not publish()  # no batch yet: nothing to publish
    query.idle()
    assert not publish()  # idle before its first batch: still nothing
    query.complete(0)
    query.idle()
    query.complete(1)  # the first look comes after two batches, an idle spell between them
    assert publish() and published() == [0, 1]
    assert not publish()  # nothing new since
    query.idle()  # idle: its progress names batch 2, which has not run
    assert not publish() and published() == [0, 1]
    query.complete(2)
    assert publish() and published() == [0, 1, 2]
    query.complete(3, 4, 5)  # three between two looks
    assert publish() and published() == [0, 1, 2, 3, 4, 5]
    query.complete(*range(6, 30))
    assert publish() and published() == list(range(30 - RECENT_BATCHES, 30))
