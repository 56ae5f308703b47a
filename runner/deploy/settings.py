"""How a deployer carries its decisions out: where state lives, where jobs run, and the job options."""

from __future__ import annotations

from dataclasses import dataclass, field

from runner.core.placeholders import Sources, Values
from runner.state.store import Store
from runner.targets.modes import Targets


@dataclass
class Settings:
    """How steps are carried out: where state lives, where jobs run, and the job options."""

    store: Store
    targets: Targets
    team: str = "local"
    env: dict[str, str] = field(default_factory=dict)
    stop_timeout: float = 90.0  # seconds to wait for a stop at a batch boundary before killing
    spark_submit: str | None = None  # default: the installed pyspark's
    once: bool = False  # jobs process the input available now, then stop (``run --once``)
    placeholders: Sources = field(default_factory=Sources)  # where placeholders are looked up besides env
    _values: Values | None = field(default=None, init=False, repr=False)

    @property
    def values(self) -> Values:
        """What placeholders resolve to here (looked up once per run of the runner)."""
        if self._values is None:
            self._values = Values(self.env, self.placeholders)
        return self._values
