"""What a deploy decided for one manifest, and why: ``plan --json`` prints it, the console shows it as its
verdict on a desired manifest (``/api/query/<name>/verdict``), and the history records it
(``runner/core/protocol/history.py``: an entry is one, with what carrying it out did).

The plan (``runner/deploy/plan.py``) describes each decision once, as a :class:`PlannedAction`; nothing
writes a decision out by hand.
"""

from __future__ import annotations

from runner.core.part import Part
from runner.core.reasons import Reason


class SourceStart(Part):
    """Where one source of the decided version starts, and why."""

    table: str
    how: str = ""  # startup-position, continue, generated
    detail: str = ""


class PlannedAction(Part):
    """One manifest's decision: what (``decision``: nothing, update, start, restore, remove, error; a history
    entry may also be an event such as failing or parked), in words (``summary``), the version that runs,
    the reasons and how each source starts."""

    name: str
    decision: str
    summary: str = ""
    version: int | None = None
    reasons: list[Reason] = []
    sources: list[SourceStart] = []
