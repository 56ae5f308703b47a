"""How the console writes figures for people: durations in units a person reads at a glance (``850 ms``,
``4 min 12 s``, ``329 d``), counts with the right noun (``1 row``, ``2 rows``), rates and sizes rounded,
moments without microseconds. The pages and their JSON take these strings; ``/metrics`` keeps the raw
numbers. A time is shown in the viewer's own time zone by the console's script, from the ``datetime``
of its ``<time>`` element; ``moment`` is what shows before (and without) the script.
"""

from __future__ import annotations

from datetime import UTC, datetime

NONE = "–"  # no figure (not zero)


def duration(seconds: float | None) -> str:
    """``850 ms``, ``4.2 s``, ``42 s``, ``4 min 12 s``, ``3 h 05 min``, ``2 d 4 h``, ``329 d``."""
    if seconds is None:
        return NONE
    seconds = max(0.0, seconds)
    if seconds < 1:
        return f"{round(seconds * 1000)} ms"
    if seconds < 10:
        return f"{seconds:.1f} s".replace(".0 s", " s")
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    if whole < 86400:
        return f"{whole // 3600} h {whole % 3600 // 60:02d} min"
    days = whole // 86400
    if days < 30:
        return f"{days} d {whole % 86400 // 3600} h"
    return f"{days} d"


def milliseconds(value: int | None) -> str:
    """A duration Spark gives in milliseconds."""
    return NONE if value is None else duration(value / 1000)


def count(n: int | None, noun: str, plural: str | None = None) -> str:
    """``1 row``, ``0 rows``, ``12,345 rows``; ``–`` when not known."""
    if n is None:
        return NONE
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


def number(value: float | None, digits: int = 1) -> str:
    """A figure rounded to ``digits`` decimals, without trailing zeros: ``2.8``, ``12``, ``1,204.5``."""
    if value is None:
        return NONE
    rounded = round(value, digits)
    if rounded == int(rounded):
        return f"{int(rounded):,}"
    return f"{rounded:,.{digits}f}".rstrip("0").rstrip(".")


def size(n: int | None) -> str:
    """Bytes as ``512 B``, ``3.4 KiB``, ``12 MiB``."""
    if n is None:
        return NONE
    value, unit = float(n), "B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            break
        value /= 1024
    return f"{n} B" if unit == "B" else f"{number(value)} {unit}"


def _at(value: str | datetime) -> datetime | None:
    if isinstance(value, datetime):
        at = value
    else:
        try:
            at = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def moment(value: str | datetime | None) -> str:
    """``2026-11-26 22:49:42 UTC``: when something happened, to the second (a time it cannot read, as given)."""
    if value is None:
        return NONE
    at = _at(value)
    return str(value) if at is None else at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def iso(value: str | datetime | None) -> str:
    """The ``datetime`` of a ``<time>`` element, which the script shows in the viewer's time zone ("" when the
    time cannot be read: the element keeps what ``moment`` wrote)."""
    at = None if value is None else _at(value)
    return "" if at is None else at.isoformat(timespec="seconds")
