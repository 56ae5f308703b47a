"""The options of a lookup table, and the checks of their values that hold whatever its connector.

A connector whose tables can be lookup tables (``jdbc.py``, ``filesystem.py``) takes these options and
says which caches it serves; ``runner/core/lookup.py`` reads them into a query's settings. The names
are Flink's where Flink has them:

- ``lookup.cache``: ``FULL`` (the whole table is loaded and broadcast to the executors) or
  ``PARTIAL`` (keys looked up from the executors through a bounded cache);
- ``lookup.full-cache.periodic-reload.interval``: how often a FULL snapshot is reloaded;
- ``lookup.partial-cache.max-rows``, ``lookup.partial-cache.expire-after-write``,
  ``lookup.partial-cache.cache-missing-key``: a PARTIAL cache's bounds;
- ``lookup.max-retries``: more attempts of one reload or look-up before it counts as failed;
- ``lookup.max-staleness`` (no Flink counterpart, FULL only): how old the snapshot may grow while
  reloads fail before the query fails through its restart strategy; unset, it keeps serving the
  last good snapshot (the query shows ``degraded``).
"""

from __future__ import annotations

from collections.abc import Mapping

from runner.core import durations, placeholder_syntax

PREFIX = "lookup."
CACHE = "lookup.cache"
RELOAD_INTERVAL = "lookup.full-cache.periodic-reload.interval"
MAX_ROWS = "lookup.partial-cache.max-rows"
EXPIRE = "lookup.partial-cache.expire-after-write"
CACHE_MISSING = "lookup.partial-cache.cache-missing-key"
MAX_RETRIES = "lookup.max-retries"
MAX_STALENESS = "lookup.max-staleness"
OPTIONS = frozenset({CACHE, RELOAD_INTERVAL, MAX_ROWS, EXPIRE, CACHE_MISSING, MAX_RETRIES, MAX_STALENESS})

FULL, PARTIAL = "FULL", "PARTIAL"
CACHES = (FULL, PARTIAL)
DURATIONS = (RELOAD_INTERVAL, MAX_STALENESS, EXPIRE)
FULL_ONLY = (RELOAD_INTERVAL, MAX_STALENESS)
PARTIAL_ONLY = (MAX_ROWS, EXPIRE, CACHE_MISSING)

DEFAULT_RELOAD_SECONDS = 60.0
DEFAULT_MAX_RETRIES = 3
DEFAULT_MAX_ROWS = 10_000
DEFAULT_EXPIRE_SECONDS = 60.0


def value_problems(options: Mapping[str, str], cache: str) -> list[tuple[str, str]]:
    """Problems with the values of a lookup table's ``lookup.*`` options, as (reason, hint): durations,
    options of the other cache, a PARTIAL cache's size."""
    problems: list[tuple[str, str]] = []
    for key in (k for k in options if k.startswith(PREFIX)):
        value = options[key]
        if placeholder_syntax.names_in(value):
            continue
        if key in DURATIONS and not (durations.seconds(value) or 0) > 0:
            problems.append((f"option '{key}' = {value!r} is not a positive duration", "e.g. '30 s', '5 min', '1 h'"))
    wrong = PARTIAL_ONLY if cache == FULL else FULL_ONLY if cache == PARTIAL else ()
    for key in (k for k in wrong if k in options):
        problems.append(
            (
                f"option '{key}' does not apply to 'lookup.cache' = '{cache}'",
                "a FULL table is reloaded whole ('lookup.full-cache.periodic-reload.interval', "
                "'lookup.max-staleness'); a PARTIAL one looks keys up through a cache ('lookup.partial-cache.*')",
            )
        )
    if MAX_ROWS in options and options[MAX_ROWS].isdigit() and int(options[MAX_ROWS]) < 1:
        problems.append((f"option '{MAX_ROWS}' must be at least 1", "e.g. '10000'"))
    return problems


def staleness_problems(options: Mapping[str, str]) -> list[tuple[str, str]]:
    """The staleness limit, if one is declared, is no shorter than the reload interval."""
    reload = durations.seconds(options.get(RELOAD_INTERVAL, "")) or DEFAULT_RELOAD_SECONDS
    staleness = durations.seconds(options.get(MAX_STALENESS, ""))
    if staleness is not None and staleness < reload:
        return [
            (
                f"'{MAX_STALENESS}' ({options[MAX_STALENESS]}) is shorter than the reload interval",
                f"at least '{RELOAD_INTERVAL}' ({options.get(RELOAD_INTERVAL, '60 s')}): a snapshot is that old "
                "just before each reload",
            )
        ]
    return []
