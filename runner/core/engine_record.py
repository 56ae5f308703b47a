"""The record a changelog query's checkpoint keeps of the engine that made its state, and of how the
incremental engine's operators lay that state out.

The job writes it when a checkpoint starts (``jobs/changelog/incremental.py``) and refuses, before its first
micro-batch, state this release cannot read; the deploy plan reads it from the state a restore would start
from (``runner/deploy/inputs.py``), so it starts a new version at once instead of restoring state the job
would then refuse.
"""

from __future__ import annotations

import re

ENGINE_FILE = "sql-runner-changelog-engine"  # in the checkpoint (and so in its savepoints): the engine that made it
# How this release's incremental operators keep their state, recorded with the engine ("incremental 2"): a change to
# what an operator keeps, or to which operators a plan has, takes the next number, and READS says which earlier
# layouts the release's operators still read. 1: the releases that recorded no number. Their operators kept what
# these keep, but for a SUM or AVG of DOUBLE or FLOAT, which they kept as a double in five slots where these keep the
# exact sum in six: a checkpoint holding those is refused by Spark's state schema check as the query starts.
# 2: a join side kept as a map of its rows to how many times each is there. 3: a join side whose input has at most
# one row per join key (a PRIMARY KEY or GROUP BY keys among them) kept as that one row; the operators run from a
# layout 1 or 2 checkpoint keep every side as a map, as it does (jobs/java/engine/sqlrunner/engine/Planner.java);
# a new checkpoint whose plan keeps no join side as one row records layout 2, whose state it is. 4: a query with at
# most one row per value of its target's key, whose operators hand over a key's old and new rows together, keeps no
# copy of the target's rows (no KeyedDifference); a new checkpoint whose plan needs that copy records layout 3 (or 2).
# 5: a join side that is one source's table seen through filters and renames, joined by exactly its PRIMARY KEY,
# takes the source's changes and keeps the key's row itself, with no UpsertNormaliser (nor its state) for it; every
# plan keeps its copy of the target's rows, as in layout 3. 6: layout 5's joins, and layout 4's plans without the
# copy. A new checkpoint whose plan has no such join side records layout 4 (or 3, or 2).
LAYOUT = 6
READS = (1, 2, 3, 4, 5, 6)
_LAYOUT_NUMBER = re.compile(r"[0-9]{1,6}")


def incremental_layout(recorded: str | None) -> int | None:
    """The layout of the incremental engine's state a checkpoint records: None when it is not the incremental
    engine's, 1 when it says no number, 0 when what it says is no layout (nothing this release can read)."""
    words = (recorded or "").split()
    if not words or words[0] != "incremental":
        return None
    if len(words) == 1:
        return 1
    return int(words[1]) if len(words) == 2 and _LAYOUT_NUMBER.fullmatch(words[1]) else 0


def layout_refusal(recorded: str | None) -> str | None:
    """Why this release does not restore the incremental engine's state ``recorded`` says (None: it does, or the
    state is not the incremental engine's)."""
    layout = incremental_layout(recorded)
    if layout is None or layout in READS:
        return None
    if layout == 0:
        return f"the checkpoint records the incremental engine's state in a layout this release cannot read: {recorded}"
    release = "an earlier" if layout < LAYOUT else "a later"
    return (
        f"the checkpoint holds the incremental engine's state as {release} release keeps it (layout {layout}; this "
        f"release keeps layout {LAYOUT} and reads {', '.join(map(str, READS))})"
    )
