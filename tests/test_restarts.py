"""A job comes back by itself after a run-time failure, by its restart strategy, and says so.

The sink's folder is swapped for a plain file while the job runs (a real I/O failure:
``Not a directory``, which even root cannot write through), then put back.

Bad inputs tried: a restart strategy with a negative attempt count, a duration that is not
one, an unknown key, a backoff below 1.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from runner.core.restarts import Restarts, RestartStrategy
from runner.deploy import submit
from tests.clihelpers import cli, cli_env, history, status, wait_for
from tests.conftest import METADATA_DDL, ProjectDir


def test_failures_back_off_and_give_up_only_past_the_attempts_within_the_window():
    strategy = RestartStrategy(attempts=2, delay="2 seconds", backoff=3, **{"max-delay": "10 seconds"})
    runs = Restarts(strategy)
    assert [runs.failed(t).delay for t in (0, 1)] == [2.0, 6.0]
    assert runs.failed(2).give_up, "a third failure within the hour"
    later = Restarts(strategy, [0.0, 1.0])
    verdict = later.failed(3601.5)  # the first two are outside the window now
    assert not verdict.give_up and verdict.failures == 1 and verdict.delay == 2.0
    unlimited = Restarts(RestartStrategy(delay="1 second"))
    delays = [unlimited.failed(t).delay for t in range(12)]
    assert delays[:4] == [1.0, 2.0, 4.0, 8.0] and max(delays) == 300.0, "doubling up to the 5 minute default"
    assert not any(unlimited.failed(20 + t).give_up for t in range(100)), "unlimited never gives up"
    # a new attempt of the run (YARN) counts on from the failures the last one published
    assert Restarts(strategy, [10.0, 11.0, 12.0]).exhausted(13.0)
    assert Restarts(strategy, [10.0]).wait_before_start(11.0) == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("strategy", "code"),
    [
        ("{attempts: -1}", "MANIFEST_INVALID_RESTART"),
        ("{delay: soon}", "MANIFEST_INVALID_RESTART"),
        ("{failure-window: 1 fortnight}", "MANIFEST_INVALID_RESTART"),
        ("{retries: 3}", "MANIFEST_UNKNOWN_FIELD"),
        ("{backoff: 0.5}", "MANIFEST_INVALID_FIELD_TYPE"),
    ],
)
def test_a_bad_restart_strategy_is_refused_with_its_field(strategy, code):
    from runner.authoring.manifest_file import parse_manifest
    from runner.core.errors import UserError

    text = f"name: q\ntarget-table: t\nsql: SELECT 1\nrestart-strategy: {strategy}\n"
    with pytest.raises(UserError) as caught:
        parse_manifest(text, file="q.yaml")
    assert caught.value.codes == [code]
    assert "restart-strategy" in caught.value.problems[0].render()


DDL = (
    """
CREATE TABLE `demo`.`events` (id STRING, amount DOUBLE)
WITH ('connector' = 'filesystem', 'path' = 'data/in', 'format' = 'json');

CREATE TABLE `demo`.`copy` (id STRING, amount DOUBLE"""
    + METADATA_DDL
    + """
) WITH ('connector' = 'filesystem', 'path' = 'data/out', 'format' = 'json');
"""
)
MANIFEST = """
name: copier
target-table: "`demo`.`copy`"
trigger-interval: 500 milliseconds
restart-strategy: {attempts: 3, delay: 1 second, backoff: 2, max-delay: 2 seconds, failure-window: 1 hour}
sql: SELECT id, amount FROM `demo`.`events`
"""


def feed(project: ProjectDir, part: int, ids: range) -> None:
    folder = project.root / "data" / "in"
    folder.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps({"id": f"e{i}", "amount": i}) + "\n" for i in ids)
    (folder / f"part-{part}.json").write_text(text)


def break_sink(out: Path) -> Path:
    """Swap the sink's folder for a file: every write into it fails until it is put back."""
    aside = out.with_name("out-aside")
    out.rename(aside)
    out.write_text("not a folder")
    return aside


def mend_sink(out: Path, aside: Path) -> None:
    out.unlink()
    aside.rename(out)


def committed_ids(spark, out: Path) -> list[str]:
    """The ids in the table as Spark's file sink committed them (its _spark_metadata log)."""
    return sorted(row.id for row in spark.read.schema("id STRING").json(str(out)).collect())


@pytest.mark.spark
@pytest.mark.e2e
def test_a_job_whose_sink_fails_for_a_while_comes_back_by_itself_and_one_that_keeps_failing_is_reported(
    project: ProjectDir, spark
):
    project.ddl("tables", DDL)
    project.manifest("copier", MANIFEST)
    feed(project, 0, range(0, 5))
    cli(project, "deploy")
    out = project.root / "data" / "out"
    wait_for(lambda: (out / "_spark_metadata").is_dir() and len(committed_ids(spark, out)) == 5, "first rows", 180)
    status_file = project.root / ".sql-runner" / "manifests" / "status" / "copier.json"

    # a transient failure: the sink is unwritable for a moment
    aside = break_sink(out)
    feed(project, 1, range(5, 10))
    wait_for(lambda: json.loads(status_file.read_text()).get("state") == "failing", "the job failing", 60)
    # while the sink stays broken the job alternates between waiting (failing) and trying again (running)
    failing = wait_for(lambda: (row := status(project, "copier"))["state"] == "failing" and row, "status: failing", 60)
    assert failing["why"] and "data/out" in failing["why"], failing  # the broken sink, named
    mend_sink(out, aside)
    wait_for(
        lambda: status(project, "copier")["state"] == "running" and status(project, "copier")["restarts"] >= 1,
        "restarted by itself",
        60,
    )
    wait_for(lambda: len(committed_ids(spark, out)) == 10, "the rows written during the outage", 60)
    assert committed_ids(spark, out) == sorted(f"e{i}" for i in range(10)), "exact: nothing lost or doubled"
    assert [entry.decision for entry in history(project, "copier")] == ["start"], "no deploy brought it back"

    # a lasting failure: after the strategy's attempts the job gives up and says so
    aside = break_sink(out)
    feed(project, 2, range(10, 15))
    wait_for(lambda: status(project, "copier")["state"].startswith("failed"), "the job giving up", 120)
    given_up = status(project, "copier")
    assert given_up["state"] == "failed (restarts used up)" and given_up["job"] is None, given_up
    assert given_up["why"] and "data/out" in given_up["why"], given_up

    # a new application attempt of the same launch (as YARN makes when a driver dies) counts on from them
    spec_uri = str(next((project.root / ".sql-runner" / "manifests" / "specs" / "copier").glob("*.json")))
    attempt = subprocess.run(
        [
            str(submit.spark_submit_path()),
            "--master",
            "local[1]",
            str(submit.entry_point()),
            "--spec-uri",
            str(spec_uri),
        ],
        env=cli_env(submit.environment()),
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert attempt.returncode == 1 and "used up its restarts; not starting again" in attempt.stdout, attempt.stdout
    assert status(project, "copier")["state"] == "failed (restarts used up)"

    # the next deploy is a new launch: it restores the job, which counts afresh and carries on exactly
    mend_sink(out, aside)
    result = cli(project, "deploy")
    assert "restore v1" in result.stdout, result.stdout
    wait_for(lambda: len(committed_ids(spark, out)) == 15, "the rows of the lasting outage", 120)
    assert committed_ids(spark, out) == sorted(f"e{i}" for i in range(15))
    assert status(project, "copier")["restarts"] == 0


def test_a_session_query_follows_its_own_restart_strategy_and_others_the_sessions_protection():
    """The session host's restart state machine, without Spark: a manifest's restart-strategy parks a query past
    its attempts within the window; without one the session's protection counts consecutive failures."""
    from runner.core.catalog import Catalog
    from runner.core.manifest import Manifest
    from runner.core.protocol.jobspec import JobSpec
    from runner.core.protocol.session_config import Protection
    from runner.core.restart_machine import RestartMachine, Turn
    from runner.session.host import QueryHost

    host = QueryHost(None, "run-0", Protection(max_failures=3))  # type: ignore[arg-type]

    def machine(strategy: dict | None) -> RestartMachine:
        fields = {"name": "q", "target-table": "t", "sql": "SELECT 1"}
        manifest = Manifest.model_validate({**fields, **({"restart-strategy": strategy} if strategy else {})})
        spec = JobSpec(manifest=manifest, catalog=Catalog(), checkpoint="/c", dead_letter="/d", run_id="run-1")
        restarts = host.restart_machine(spec)
        restarts.started()
        return restarts

    def judge(restarts: RestartMachine) -> tuple[bool, float | None, int | None]:
        """One failure, and its restart started (as the host does once it is due): (parked, delay, limit)."""
        judged = restarts.failed("boom")
        if judged.turn == Turn.FAILING:
            restarts.restarting()
            restarts.started()
        return judged.turn == Turn.GAVE_UP, judged.delay, judged.limit

    own = machine({"attempts": 1, "delay": "3 seconds", "backoff": 1})
    assert judge(own) == (False, 3.0, 1)
    assert judge(own)[0], "a second failure within the hour is past its one attempt"
    session = machine(None)
    assert [judge(session) for _ in range(2)] == [(False, 1.0, 2), (False, 2.0, 2)]
    assert session.progressed() is not None  # a micro-batch completed: the failures no longer follow each other
    assert [judge(session) for _ in range(3)] == [(False, 1.0, 2), (False, 2.0, 2), (True, None, 2)]
    own = machine({"attempts": 1, "delay": "3 seconds", "backoff": 1})
    judge(own)
    assert own.progressed() is not None
    assert judge(own)[0], "a manifest's own strategy counts every failure within its window, recovered or not"


def test_stopping_the_queries_never_raises_when_the_jvm_is_gone(caplog):
    """A SIGTERM to a job's process group reaches its JVM too: every call into it then fails, even asking a
    query its name. Stopping the queries must still return, so the job says it stopped rather than failed."""
    import logging

    from jobs import runtime

    class Gone:
        def __getattr__(self, name: str):
            raise ConnectionRefusedError(111, "Connection refused")

    class Stopping:
        isActive = True

        def stop(self) -> None:
            raise RuntimeError("Cannot call methods on a stopped SparkContext.")

    with caplog.at_level(logging.WARNING, logger="jobs.runtime"):
        runtime.stop_all([Gone(), Stopping()])  # type: ignore[list-item]
    said = [record.getMessage() for record in caplog.records]
    assert said == [
        "stopping query 1 failed: [Errno 111] Connection refused",
        "query 2: Spark is shutting down, the query stops with it",
    ]
