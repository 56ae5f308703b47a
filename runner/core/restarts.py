"""How a failed job comes back: the manifest's ``restart-strategy`` and the pure bookkeeping over it.

A job whose query fails at run time (a sink that cannot write, a broker that went away)
is restarted from its latest checkpoint after ``delay``, each further failure waiting
``backoff`` times longer up to ``max-delay``. At most ``attempts`` failures count within
``failure-window``; one more and the job gives up and is reported as failed. The default
keeps restarting (``attempts: unlimited``). Failures older than the window are forgotten,
so a job that fails now and then is never given up on, while one that fails every time
backs off to ``max-delay``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_core import PydanticCustomError

from runner.core import durations
from runner.core.error_catalogue import CATALOGUE


class RestartStrategy(BaseModel):
    """A job's restart policy (manifest or template ``restart-strategy``)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    attempts: int | Literal["unlimited"] = Field(
        "unlimited", description="Failures allowed within failure-window before the job gives up; or 'unlimited'."
    )
    delay: str = Field("10 seconds", description="Wait before the first restart.")
    backoff: float = Field(2.0, ge=1.0, le=10.0, description="Each further restart waits this many times longer.")
    max_delay: str = Field("5 minutes", alias="max-delay", description="The longest wait between restarts.")
    failure_window: str = Field(
        "1 hour", alias="failure-window", description="Failures older than this no longer count."
    )

    @field_validator("attempts")
    @classmethod
    def _attempts(cls, value: int | str) -> int | str:
        if isinstance(value, int) and value < 0:
            raise PydanticCustomError(
                "MANIFEST_INVALID_RESTART",
                CATALOGUE["MANIFEST_INVALID_RESTART"].message,
                {"key": "attempts", "value": value, "expected": "a whole number >= 0 or 'unlimited'"},
            )
        return value

    @field_validator("delay", "max_delay", "failure_window")
    @classmethod
    def _duration(cls, value: str, info) -> str:  # noqa: ANN001 - pydantic's ValidationInfo
        if durations.seconds(value) is None:
            raise PydanticCustomError(
                "MANIFEST_INVALID_RESTART",
                CATALOGUE["MANIFEST_INVALID_RESTART"].message,
                {"key": info.field_name.replace("_", "-"), "value": value, "expected": "a duration, e.g. '30 seconds'"},
            )
        return value.strip()

    @property
    def limit(self) -> int | None:
        """Failures allowed within the window; None: unlimited."""
        return None if self.attempts == "unlimited" else int(self.attempts)

    def seconds(self, name: Literal["delay", "max_delay", "failure_window"]) -> float:
        value = durations.seconds(getattr(self, name))
        assert value is not None, "validated on load"
        return value

    def delay_after(self, failures: int) -> float:
        """Seconds to wait before restarting after the ``failures``-th failure in the window."""
        first, longest = self.seconds("delay"), self.seconds("max_delay")
        return min(first * self.backoff ** max(failures - 1, 0), max(longest, first))


DEFAULT = RestartStrategy()


@dataclass(frozen=True)
class FailureJudged:
    """What one failure means under the strategy: restart after ``delay``, or give up."""

    give_up: bool
    delay: float  # seconds before the restart (0 when giving up)
    failures: int  # failures within the window, this one included


@dataclass
class Restarts:
    """One run's failures (epoch seconds) and restarts, judged against a strategy; no clock of its own."""

    strategy: RestartStrategy
    failures: list[float] = field(default_factory=list)
    restarts: int = 0

    def failed(self, now: float) -> FailureJudged:
        """Record a failure at ``now``: restart after the verdict's delay, or give up."""
        window = self.strategy.seconds("failure_window")
        self.failures = [t for t in self.failures if now - t < window] + [now]
        count, limit = len(self.failures), self.strategy.limit
        if limit is not None and count > limit:
            return FailureJudged(True, 0.0, count)
        return FailureJudged(False, self.strategy.delay_after(count), count)

    def exhausted(self, now: float) -> bool:
        """Whether the failures recorded so far (a previous attempt's) already used up the strategy."""
        window = self.strategy.seconds("failure_window")
        recent = [t for t in self.failures if now - t < window]
        limit = self.strategy.limit
        return limit is not None and len(recent) > limit

    def wait_before_start(self, now: float) -> float:
        """Seconds a new attempt of the run waits before it starts, after a recent failure of the last one."""
        if not self.failures:
            return 0.0
        window = self.strategy.seconds("failure_window")
        recent = [t for t in self.failures if now - t < window]
        if not recent:
            return 0.0
        return max(0.0, recent[-1] + self.strategy.delay_after(len(recent)) - now)
