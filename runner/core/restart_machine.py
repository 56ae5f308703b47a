"""The one restart state machine: how a run of a job stands between its starts, failures, restarts and end.

Application-mode jobs (``jobs/entry.py``) and the session's queries (``runner/session/host.py``) are
driven by it alike, and it is the only writer of what their status says about restarts
(``JobControl`` publishes its ``Standing`` as ``status/<name>.json``)::

    (not started) --started--> RUNNING --failed--> FAILING --restarting--> FAILING --started--> RUNNING
                                  |                   |   (restart due after the strategy's delay)
                                  |                   +--failed, attempts used up--> FAILED, gave up
                                  +--progressed (a micro-batch after failures): recovered, still RUNNING
    any state but an end --refused / give_up / fatal--> FAILED;  --stopped--> STOPPED

- A failure is judged by the run's ``RestartStrategy`` (``runner/core/restarts.py``): restart from the
  latest checkpoint after the strategy's delay (backing off), or give up once its attempts within the
  failure window are used up.
- Gave up means no restart comes: an application job's until the next deploy, a session query's (the
  session's word: parked) until its manifest changes. A session also gives up at once on a query it
  cannot build, since building it again fails the same way.
- Spark refusing the restored state ends the run at once (restoring the same state would fail the
  same way), and so does a problem no restart can mend (``fatal``).
- ``failures`` counts consecutive failures: a micro-batch that completes resets it (recovered). Under
  the session's protection (``forget_on_recovery``) the strategy forgets them too, so only failures that
  follow each other count; a manifest's own strategy counts every failure within its window.
- An end (stopped, failed) is final: ``stopped`` after it changes nothing, any other transition is
  refused (``IllegalTransition``).
- A new application attempt of the same run (YARN re-runs a driver that died) continues the earlier
  attempt's restarts and failures from its status (``continue_from``).

Pure but for a lock: the clock is injected, every transition returns a typed ``Transition`` (its
``Turn`` says what happened) and hands it to the listener (the job's control, which publishes it).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import StrEnum

from runner.core.protocol.status import JobState, JobStatus
from runner.core.restarts import Restarts, RestartStrategy


class Turn(StrEnum):
    """What a transition did."""

    STARTED = "started"  # its queries run (the first start, or a restart)
    RESTARTING = "restarting"  # a restart is being built
    FAILING = "failing"  # failed at run time: restarts after the strategy's delay
    GAVE_UP = "gave-up"  # failed, and no restart comes (application: gave up; session: parked)
    REFUSED = "refused"  # Spark refused the restored state
    RECOVERED = "recovered"  # a micro-batch completed after failures
    STOPPED = "stopped"
    FAILED = "failed"  # a failure no restart can mend (a problem in the manifest, an error the driver cannot judge)


class IllegalTransition(RuntimeError):
    """A transition the run's state does not allow (a restart of a running run, anything after its end)."""


@dataclass(frozen=True)
class Standing:
    """Where a run stands: what every status it publishes says of its state and restarts."""

    state: JobState | None = None  # None until it first starts
    restarts: int = 0  # restarts of this run after failures
    failures: int = 0  # consecutive failures: since a micro-batch last completed
    failure_times: tuple[float, ...] = ()  # epoch seconds of the failures the strategy counts (its window)
    retry_at: float | None = None  # failing: epoch seconds when the restart is due (None: being restarted)
    gave_up: bool = False  # failed, and no restart comes
    error: str | None = None  # failing or failed: why
    state_refused: str | None = None  # failed: Spark's reason for refusing the restored state
    reason: str | None = None  # stopped: why

    @property
    def ended(self) -> bool:
        return self.state is not None and self.state.final


@dataclass(frozen=True)
class Transition:
    """One step of the machine: what happened, where the run stands after it, and what the strategy judged."""

    turn: Turn
    standing: Standing
    delay: float | None = None  # FAILING: seconds until the restart is due
    counted: int = 0  # FAILING, GAVE_UP: failures within the strategy's window, this one included
    limit: int | None = None  # FAILING, GAVE_UP: failures the strategy allows within its window (None: unlimited)
    recovered_from: int = 0  # RECOVERED: the consecutive failures before the micro-batch that completed


_NOT_ENDED = frozenset({None, JobState.RUNNING, JobState.FAILING})


class RestartMachine:
    """The states and transitions of one run, judged by ``strategy`` on ``clock`` (epoch seconds)."""

    def __init__(
        self,
        strategy: RestartStrategy,
        *,
        clock: Callable[[], float] = time.time,
        forget_on_recovery: bool = False,
    ):
        self._book = Restarts(strategy)
        self._clock = clock
        self._forget_on_recovery = forget_on_recovery
        self._listeners: list[Callable[[Transition], None]] = []
        # A driver's main thread and its control's watcher (application jobs) both move it.
        self._lock = threading.RLock()
        self._standing = Standing()

    @property
    def strategy(self) -> RestartStrategy:
        return self._book.strategy

    @property
    def standing(self) -> Standing:
        return self._standing

    @property
    def state(self) -> JobState | None:
        return self._standing.state

    def listen(self, listener: Callable[[Transition], None]) -> None:
        """Hand every transition to ``listener``, in order, before it is returned."""
        self._listeners.append(listener)

    # ---- a new attempt of a run (YARN) -----------------------------------------------------

    def continue_from(self, earlier: JobStatus) -> Transition | None:
        """Before the first start: count on from what an earlier attempt of this run published. GAVE_UP
        (with the earlier attempt's error) if its failures already used up the strategy, else None."""
        with self._lock:
            self._expect(Turn.STARTED, {None})
            self._book.failures = list(earlier.failure_times)
            self._book.restarts = earlier.restarts
            self._standing = replace(
                self._standing,
                restarts=earlier.restarts,
                failures=earlier.failures,
                failure_times=self._failure_times(),
            )
            if not self._book.exhausted(self._clock()):
                return None
            return self._move(
                Transition(
                    Turn.GAVE_UP, replace(self._standing, state=JobState.FAILED, gave_up=True, error=earlier.error)
                )
            )

    def wait_before_start(self) -> float:
        """Seconds the first start waits: the rest of the delay after an earlier attempt's recent failure."""
        return self._book.wait_before_start(self._clock())

    # ---- transitions ------------------------------------------------------------------------

    def started(self) -> Transition:
        """Its queries run: the first start, a restart, or an earlier attempt's run started again."""
        with self._lock:
            self._expect(Turn.STARTED, {None, JobState.FAILING})
            return self._move(
                Transition(Turn.STARTED, replace(self._standing, state=JobState.RUNNING, retry_at=None, error=None))
            )

    def failed(self, error: str) -> Transition:
        """A failure at run time (or of a start): FAILING until the restart is due, or GAVE_UP."""
        with self._lock:
            self._expect(Turn.FAILING, _NOT_ENDED)
            now = self._clock()
            verdict = self._book.failed(now)
            judged = replace(
                self._standing, failures=self._standing.failures + 1, failure_times=self._failure_times(), error=error
            )
            limit = self.strategy.limit
            if verdict.give_up:
                standing = replace(judged, state=JobState.FAILED, retry_at=None, gave_up=True)
                return self._move(Transition(Turn.GAVE_UP, standing, counted=verdict.failures, limit=limit))
            standing = replace(judged, state=JobState.FAILING, retry_at=now + verdict.delay)
            return self._move(
                Transition(Turn.FAILING, standing, delay=verdict.delay, counted=verdict.failures, limit=limit)
            )

    def due(self) -> bool:
        """Whether a failing run's restart is due now."""
        standing = self._standing
        return (
            standing.state == JobState.FAILING and standing.retry_at is not None and self._clock() >= standing.retry_at
        )

    def restarting(self) -> Transition:
        """A failing run's restart begins (counted as a restart whether or not it starts)."""
        with self._lock:
            self._expect(Turn.RESTARTING, {JobState.FAILING})
            self._book.restarts += 1
            standing = replace(self._standing, restarts=self._book.restarts, retry_at=None)
            return self._move(Transition(Turn.RESTARTING, standing))

    def progressed(self) -> Transition | None:
        """A micro-batch completed: RECOVERED if the run had failed since the last one, else nothing changes."""
        with self._lock:
            standing = self._standing
            if standing.state != JobState.RUNNING or not standing.failures:
                return None
            if self._forget_on_recovery:
                self._book.failures.clear()
            recovered = replace(standing, failures=0, failure_times=self._failure_times(), error=None)
            return self._move(Transition(Turn.RECOVERED, recovered, recovered_from=standing.failures))

    def refused(self, reason: str) -> Transition:
        """Spark refused the restored state: FAILED, no restart (it would be refused again)."""
        with self._lock:
            self._expect(Turn.REFUSED, _NOT_ENDED)
            standing = replace(self._standing, state=JobState.FAILED, retry_at=None, error=reason, state_refused=reason)
            return self._move(Transition(Turn.REFUSED, standing))

    def give_up(self, error: str) -> Transition:
        """Give up at once, whatever the strategy says: a start that would fail the same way again."""
        with self._lock:
            self._expect(Turn.GAVE_UP, _NOT_ENDED)
            standing = replace(self._standing, state=JobState.FAILED, retry_at=None, gave_up=True, error=error)
            return self._move(Transition(Turn.GAVE_UP, standing))

    def fatal(self, error: str) -> Transition:
        """A failure no restart can mend and the strategy does not judge: FAILED."""
        with self._lock:
            self._expect(Turn.FAILED, _NOT_ENDED)
            return self._move(
                Transition(Turn.FAILED, replace(self._standing, state=JobState.FAILED, retry_at=None, error=error))
            )

    def stopped(self, reason: str) -> Transition | None:
        """Stopped (asked to, or done): STOPPED; None if the run had already ended, which then stands."""
        with self._lock:
            if self._standing.ended:
                return None
            standing = replace(self._standing, state=JobState.STOPPED, retry_at=None, error=None, reason=reason)
            return self._move(Transition(Turn.STOPPED, standing))

    # ---- inside ------------------------------------------------------------------------------

    def _expect(self, turn: Turn, states: set[JobState | None] | frozenset[JobState | None]) -> None:
        if self._standing.state not in states:
            raise IllegalTransition(f"{turn} is not a transition from {self._standing.state or 'not started'}")

    def _failure_times(self) -> tuple[float, ...]:
        return tuple(round(t, 3) for t in self._book.failures)

    def _move(self, transition: Transition) -> Transition:
        self._standing = transition.standing
        for listener in self._listeners:
            listener(transition)
        return transition
