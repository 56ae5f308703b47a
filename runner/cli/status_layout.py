"""How ``sql-runner status`` lays its jobs out, for a person at a terminal or for a pipe.

At a terminal: a table of the columns that fit its width, kept in the order an on-call engineer needs
them (the name and the state always, whole; then the version and the figures that say whether a job is
well), a line naming the columns left out and how to see them, then why each unwell job is unwell, at the
terminal's full width. ``wide``: every column, the table as wide as it needs to be.

Not at a terminal (piped to ``less``, ``grep``, a log): kubectl's plain layout, whatever ``COLUMNS``
says. A header, then one line per job; every column, ``why`` last; columns aligned and separated by
three spaces; no box drawing, colour or wrapping. A value never holds two spaces in a row (its line breaks
and runs of spaces become one space), so ``awk -F '  +'`` splits the columns; times are as recorded.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rich.cells import cell_len
from rich.console import Console
from rich.measure import Measurement
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from runner.deploy.status import age


@dataclass(frozen=True)
class StatusColumn:
    """One column of the table: a field of a status row (as ``--json`` names it)."""

    key: str
    keep: int  # 1 is the last to go when the terminal is too narrow for every column
    numeric: bool = False  # right-aligned in the table


# In the order they are shown.
COLUMNS = (
    StatusColumn("name", keep=1),
    StatusColumn("version", keep=3, numeric=True),
    StatusColumn("target", keep=9),
    StatusColumn("state", keep=2),
    StatusColumn("restarts", keep=6, numeric=True),
    StatusColumn("last progress", keep=5),
    StatusColumn("input rows/s", keep=4, numeric=True),
    StatusColumn("changes/s", keep=12),
    StatusColumn("keys held", keep=13),
    StatusColumn("batch ms", keep=7, numeric=True),
    StatusColumn("watermark", keep=8),
    StatusColumn("lookups", keep=11),
    StatusColumn("latest savepoint", keep=10),
    StatusColumn("output", keep=14),
)
ALWAYS_SHOWN = 2  # the name and the state (keep 1 and 2)
WHY = "why"  # free text, often long: the last field of a plain line, and under the table at a terminal
SEPARATOR = "   "


def show(console: Console, rows: list[dict[str, Any]], *, wide: bool, at: datetime) -> None:
    """Print the jobs' ``rows`` (``runner.deploy.status.job_status``) the way ``console``'s reader wants
    them; ``wide``: every column however narrow the terminal; ``at``: now, for the age of the last progress."""
    if not console.is_terminal:
        for text in _plain_lines(rows):
            console.out(text, highlight=False)
        return
    cells = [{column.key: _cell(row, column.key, at) for column in COLUMNS} for row in rows]
    # A table's width with no cell wrapped is set by each column's widest cell: measuring one row of
    # those is as exact as measuring every row, and stays quick over hundreds of jobs.
    widest = {column.key: max((row[column.key] for row in cells), key=cell_len, default="") for column in COLUMNS}
    shown = list(COLUMNS) if wide else _fitting(console, widest)
    table = _table(cells, shown)
    # Exactly as wide as its cells on one line: rich would otherwise squeeze the name and the state
    # when even those do not fit; the terminal then wraps the lines, and no value is cut.
    table.width = _natural_width(console, _table([widest], shown))
    console.print(table, crop=False)
    left_out = [column.key for column in COLUMNS if column not in shown]
    if left_out:
        console.print(
            f"left out to fit {console.width} columns: {', '.join(left_out)} (sql-runner status -o wide shows them)",
            style="dim",
            markup=False,
            highlight=False,
        )
    for row in rows:
        if row[WHY]:
            console.print(Text.assemble("why ", row["name"], style="bold"))
            console.print(Padding(Text(str(row[WHY]), overflow="fold"), (0, 0, 0, 2), expand=False))


def _plain_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The header and one line per job: every column and ``why``, aligned, values whole."""
    keys = [column.key for column in COLUMNS] + [WHY]
    lines = [[key.upper() for key in keys]] + [[_flat(row[key]) for key in keys] for row in rows]
    widths = [max(cell_len(line[i]) for line in lines) for i in range(len(keys))]

    def aligned(values: list[str]) -> str:
        padded = (value + " " * (width - cell_len(value)) for value, width in zip(values, widths, strict=True))
        return SEPARATOR.join(padded).rstrip()

    return [aligned(values) for values in lines]


def _fitting(console: Console, widest: dict[str, str]) -> list[StatusColumn]:
    """The most needed columns, in their order, that fit ``console``'s width with no cell wrapped; ``widest``:
    each column's widest cell."""
    by_need = sorted(COLUMNS, key=lambda column: column.keep)
    for count in range(len(COLUMNS), ALWAYS_SHOWN, -1):
        shown = [column for column in COLUMNS if column in by_need[:count]]
        if _natural_width(console, _table([widest], shown)) <= console.width:
            return shown
    return [column for column in COLUMNS if column in by_need[:ALWAYS_SHOWN]]


def _table(cells: list[dict[str, str]], columns: list[StatusColumn]) -> Table:
    table = Table()
    for column in columns:
        table.add_column(column.key, justify="right" if column.numeric else "left", no_wrap=True)
    for row in cells:
        table.add_row(*[row[column.key] for column in columns])
    return table


def _cell(row: dict[str, Any], key: str, at: datetime) -> str:
    # A person at a terminal reads "how long ago" at a glance; a pipe keeps the recorded time.
    if key == "last progress" and row[key] is not None:
        return f"{age(row[key], at)} ago"
    return "-" if row[key] is None else str(row[key])


def _flat(value: Any) -> str:
    text = "" if value is None else " ".join(str(value).split())
    return text or "-"


def _natural_width(console: Console, table: Table) -> int:
    """How wide ``table`` is with every cell on one line: rich's measure of it, given all the room it wants."""
    return Measurement.get(console, console.options.update_width(sys.maxsize), table).maximum
