"""Durations as manifests write them: a whole number and a unit (``10 seconds``, ``500 ms``, ``1 hour``)."""

from __future__ import annotations

import re

INTERVAL = re.compile(r"^\s*(\d+)\s*(milliseconds?|ms|seconds?|s|minutes?|min|hours?|h)\s*$", re.IGNORECASE)


def seconds(text: str) -> float | None:
    """``text`` in seconds; None if it is not a duration."""
    match = INTERVAL.match(text)
    if match is None:
        return None
    amount, unit = int(match.group(1)), match.group(2).lower()
    if unit.startswith("ms") or unit.startswith("milli"):
        return amount / 1000
    if unit.startswith("min"):
        return amount * 60.0
    if unit.startswith("h"):
        return amount * 3600.0
    return float(amount)
