"""The one restart state machine (``runner/core/restart_machine.py``), transition by transition, on a clock the
test moves: no Spark, no process. Application jobs and session queries are driven by it alike, and what it says
is what their status says (the last test, through ``JobControl``)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from runner.core.protocol.status import JobState, JobStatus
from runner.core.restart_machine import IllegalTransition, RestartMachine, Standing, Transition, Turn
from runner.core.restarts import RestartStrategy

STRATEGY = RestartStrategy(attempts=2, delay="2 seconds", backoff=3, **{"max-delay": "10 seconds"})


class Clock:
    def __init__(self, at: float = 1_000.0):
        self.at = at

    def __call__(self) -> float:
        return self.at


def machine(
    strategy: RestartStrategy = STRATEGY, *, forget_on_recovery: bool = False
) -> tuple[RestartMachine, Clock, list[Transition]]:
    clock, heard = Clock(), []
    restarts = RestartMachine(strategy, clock=clock, forget_on_recovery=forget_on_recovery)
    restarts.listen(heard.append)
    return restarts, clock, heard


def fail_and_restart(restarts: RestartMachine, clock: Clock, error: str = "boom") -> Transition:
    """One failure; once its restart is due, the restart, started again."""
    judged = restarts.failed(error)
    if judged.turn == Turn.FAILING:
        clock.at = judged.standing.retry_at or clock.at
        assert restarts.due()
        restarts.restarting()
        restarts.started()
    return judged


def test_a_run_fails_waits_its_delay_restarts_and_recovers_when_a_micro_batch_completes():
    restarts, clock, heard = machine()
    assert restarts.standing == Standing() and restarts.state is None
    assert restarts.started().standing == Standing(state=JobState.RUNNING)

    failing = restarts.failed("IOException: the sink is gone")
    assert failing.turn == Turn.FAILING and (failing.delay, failing.counted, failing.limit) == (2.0, 1, 2)
    assert failing.standing == Standing(
        state=JobState.FAILING,
        failures=1,
        failure_times=(1000.0,),
        retry_at=1002.0,
        error="IOException: the sink is gone",
    )
    assert not restarts.due(), "the delay has not passed"
    clock.at = 1001.9
    assert not restarts.due()
    clock.at = 1002.0
    assert restarts.due()

    restarting = restarts.restarting()
    assert (restarting.turn, restarting.standing.state) == (Turn.RESTARTING, JobState.FAILING)
    assert (restarting.standing.restarts, restarting.standing.retry_at) == (1, None), "counted; no longer waiting"
    assert not restarts.due()
    running = restarts.started().standing
    assert (running.state, running.error, running.failures, running.restarts) == (JobState.RUNNING, None, 1, 1)

    recovered = restarts.progressed()
    assert recovered is not None and (recovered.turn, recovered.recovered_from) == (Turn.RECOVERED, 1)
    assert (recovered.standing.failures, recovered.standing.restarts) == (0, 1)
    assert recovered.standing.failure_times == (1000.0,), "a manifest's strategy still counts it within its window"
    assert restarts.progressed() is None, "a further micro-batch changes nothing"
    assert [t.turn for t in heard] == ["started", "failing", "restarting", "started", "recovered"]
    assert heard[-1] is recovered, "the listener hears each transition as it is returned"


def test_failures_back_off_and_the_run_gives_up_past_the_attempts_within_the_window():
    restarts, clock, _ = machine()
    restarts.started()
    first, second = fail_and_restart(restarts, clock), fail_and_restart(restarts, clock)
    assert (first.delay, second.delay) == (2.0, 6.0), "backoff 3"
    gave_up = restarts.failed("boom again")
    assert gave_up.turn == Turn.GAVE_UP and (gave_up.counted, gave_up.limit) == (3, 2)
    assert gave_up.standing.state == JobState.FAILED and gave_up.standing.gave_up
    assert (gave_up.standing.failures, gave_up.standing.restarts, gave_up.standing.retry_at) == (3, 2, None)
    assert gave_up.standing.error == "boom again"

    later, clock, _ = machine()
    later.started()
    fail_and_restart(later, clock)
    fail_and_restart(later, clock)
    clock.at += 3600
    judged = later.failed("an hour on")
    assert (judged.turn, judged.counted, judged.delay) == (Turn.FAILING, 1, 2.0), "the first two left the window"
    assert judged.standing.failures == 3, "consecutive: no micro-batch completed between them"

    forever, clock, _ = machine(RestartStrategy(delay="1 second"))
    forever.started()
    delays = [fail_and_restart(forever, clock).delay for _ in range(12)]
    assert delays[:4] == [1.0, 2.0, 4.0, 8.0] and max(delays) == 300.0, "doubling up to the 5 minute default"
    assert forever.state == JobState.RUNNING and forever.standing.restarts == 12, "unlimited never gives up"


def test_under_the_sessions_protection_only_failures_that_follow_each_other_count():
    protection = RestartStrategy(attempts=2, delay="1 second", backoff=2, **{"max-delay": "1 minute"})
    restarts, clock, _ = machine(protection, forget_on_recovery=True)
    restarts.started()
    fail_and_restart(restarts, clock)
    fail_and_restart(restarts, clock)
    recovered = restarts.progressed()
    assert recovered is not None and recovered.standing.failure_times == (), "forgotten once a micro-batch completed"
    assert [fail_and_restart(restarts, clock).turn for _ in range(3)] == ["failing", "failing", "gave-up"]

    own, clock, _ = machine(protection)
    own.started()
    fail_and_restart(own, clock)
    fail_and_restart(own, clock)
    own.progressed()
    assert own.failed("boom").turn == Turn.GAVE_UP, "a manifest's own strategy counts every failure in its window"


def test_ends_are_final_and_a_stop_during_the_wait_stops():
    restarts, clock, heard = machine()
    restarts.started()
    restarts.failed("boom")
    stopped = restarts.stopped("stop requested")
    assert stopped is not None and stopped.standing.state == JobState.STOPPED
    assert (stopped.standing.reason, stopped.standing.retry_at, stopped.standing.error) == (
        "stop requested",
        None,
        None,
    )
    assert not restarts.due(), "no restart after a stop"
    assert restarts.stopped("again") is None and len(heard) == 3, "a second stop changes nothing"
    for move in (restarts.restarting, restarts.started, lambda: restarts.failed("late"), lambda: restarts.fatal("x")):
        with pytest.raises(IllegalTransition):
            move()

    refused, _, _ = machine()
    refused.started()
    said = refused.refused("[STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE] ...").standing
    assert (said.state, said.state_refused, said.error, said.gave_up) == (
        JobState.FAILED,
        "[STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE] ...",
        "[STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE] ...",
        False,
    ), "refused: no retry, and not the strategy's doing"
    assert refused.stopped("stopped by the runner") is None and refused.state == JobState.FAILED

    parked, _, _ = machine()
    at_once = parked.give_up("SESSION_QUERY_BUILD_TIMEOUT: ...")
    assert at_once.turn == Turn.GAVE_UP and at_once.standing.gave_up and at_once.standing.failures == 0

    broken, _, _ = machine()
    assert broken.fatal("MANIFEST_INVALID: ...").standing == Standing(
        state=JobState.FAILED, error="MANIFEST_INVALID: ..."
    )


def test_a_transition_the_state_does_not_allow_is_refused():
    restarts, _, heard = machine()
    with pytest.raises(IllegalTransition):
        restarts.restarting()  # nothing failed
    restarts.started()
    for move in (restarts.started, restarts.restarting):
        with pytest.raises(IllegalTransition):
            move()
    assert restarts.progressed() is None, "no failure to recover from"
    restarts.failed("boom")
    assert restarts.progressed() is None, "a failing run's last micro-batch is no recovery"
    assert [t.turn for t in heard] == ["started", "failing"]


def test_a_new_attempt_of_the_run_counts_on_from_what_the_earlier_one_published():
    def earlier(**fields) -> JobStatus:
        return JobStatus(name="q", version=1, state=JobState.FAILING, started_at="t", updated_at="t", **fields)

    used_up, clock, heard = machine()
    gave_up = used_up.continue_from(earlier(restarts=2, failure_times=[997.0, 998.0, 999.0], error="boom"))
    assert gave_up is not None and gave_up.turn == Turn.GAVE_UP and heard == [gave_up]
    assert (gave_up.standing.state, gave_up.standing.error, gave_up.standing.restarts) == (JobState.FAILED, "boom", 2)

    counting, clock, heard = machine()
    assert counting.continue_from(earlier(restarts=1, failures=1, failure_times=[999.0])) is None and heard == []
    assert counting.wait_before_start() == pytest.approx(1.0), "the rest of the delay after the earlier failure"
    counting.started()
    judged = counting.failed("boom")
    assert (judged.counted, judged.delay, judged.standing.failures, judged.standing.restarts) == (2, 6.0, 2, 1)

    fresh, clock, _ = machine()
    assert fresh.wait_before_start() == 0.0
    fresh.started()
    with pytest.raises(IllegalTransition):
        fresh.continue_from(earlier())


def test_what_the_machine_says_is_what_the_status_says_in_either_mode(tmp_path: Path):
    """``JobControl`` publishes every transition, and only the machine's word on state and restarts; a session
    query's status has the same fields, and its giving up is read as parked."""
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

    def said() -> dict:
        return json.loads((tmp_path / "manifests" / "status" / "q.json").read_text())

    clock = Clock(1_764_100_000.0)
    application = JobControl(spec, RestartMachine(STRATEGY, clock=clock))
    application.publish()
    assert not (tmp_path / "manifests" / "status" / "q.json").exists(), "nothing to say before it starts"
    application.machine.started()
    application.machine.failed("IOException: the sink is gone")
    failing = said()
    assert {k: failing.get(k) for k in ("state", "restarts", "failures", "retry-at", "error", "gave-up")} == {
        "state": "failing",
        "restarts": 0,
        "failures": 1,
        "retry-at": datetime.fromtimestamp(1_764_100_002.0, UTC).isoformat(timespec="milliseconds"),
        "error": "IOException: the sink is gone",
        "gave-up": False,
    }
    assert failing["failure-times"] == [1_764_100_000.0] and "mode" not in failing
    application.machine.stopped("stop requested")
    application.publish()  # a late look at the progress keeps the end
    assert (said()["state"], said()["reason"]) == ("stopped", "stop requested")

    session = JobControl(spec, RestartMachine(STRATEGY, clock=clock), session_run="session-1")
    session.machine.give_up("SESSION_QUERY_BUILD_TIMEOUT: q")
    parked = JobStatus.decode((tmp_path / "manifests" / "status" / "q.json").read_text())
    assert (parked.state, parked.mode, parked.session_run, parked.gave_up) == (
        JobState.FAILED,
        "session",
        "session-1",
        True,
    )
    assert parked.parked, "a session's word for giving up"
