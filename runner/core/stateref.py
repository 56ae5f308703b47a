"""A reference to restorable state: a savepoint or a checkpoint run folder of one version."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from runner.core.part import Part


class StateRef(Part):
    """A restorable state: a savepoint, or a checkpoint run folder, of one version (the deployed record keeps
    the one its version continued from)."""

    kind: Literal["savepoint", "checkpoint", "stop-savepoint"]
    version: int
    key: str = ""  # in the savepoints or checkpoints bucket; empty for the savepoint a stop will take
    created: datetime | None = None

    def describe(self) -> str:
        if self.kind == "stop-savepoint":
            return f"the savepoint taken when v{self.version} stops"
        return f"{self.kind} {self.key.rstrip('/').rsplit('/', 1)[-1]} of v{self.version}"
