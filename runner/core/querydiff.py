"""How a desired query differs from the deployed one: the result the plan decides on."""

from __future__ import annotations

from dataclasses import dataclass

from runner.core.reasons import Reason


@dataclass(frozen=True)
class QueryDiff:
    """How the desired query differs from the deployed one (decided by Spark)."""

    changed: bool  # meaning, output columns, tables read or target
    state_compatible: bool  # the deployed version's state can carry over
    reasons: tuple[Reason, ...] = ()
    held_state: bool = False  # the deployed query keeps rows in state between batches (windows, joins, dedup)
