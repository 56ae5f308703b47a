"""Lookup tables: reference data a streaming query joins with, refreshed while the query runs.

A ``jdbc`` table a query reads, or a ``filesystem`` table that declares ``'lookup.cache'``, is
not a stream: each micro-batch joins with the table's snapshot, and the snapshot is reloaded
every refresh interval (``jobs/lookup/``). The options keep Flink's names where Flink has them:

- ``lookup.cache``: ``FULL`` (the whole table is loaded and broadcast to the executors) or
  ``PARTIAL`` (``jdbc`` only: keys looked up from the executors through a bounded cache);
- ``lookup.full-cache.periodic-reload.interval``: how often a FULL snapshot is reloaded;
- ``lookup.partial-cache.max-rows``, ``lookup.partial-cache.expire-after-write``,
  ``lookup.partial-cache.cache-missing-key``: a PARTIAL cache's bounds;
- ``lookup.max-retries``: more attempts of one reload or look-up before it counts as failed;
- ``lookup.max-staleness`` (no Flink counterpart, FULL only): how old the snapshot may grow while
  reloads fail before the query fails through its restart strategy; unset, it keeps serving the
  last good snapshot (the query shows ``degraded``).

Pure data, no Spark: the DDL checks and the plan read it as well as the job.
"""

from __future__ import annotations

from dataclasses import dataclass

from runner.core import durations, placeholder_syntax
from runner.core.tables import TableDef

PREFIX = "lookup."
CACHE = "lookup.cache"
RELOAD_INTERVAL = "lookup.full-cache.periodic-reload.interval"
MAX_ROWS = "lookup.partial-cache.max-rows"
EXPIRE = "lookup.partial-cache.expire-after-write"
CACHE_MISSING = "lookup.partial-cache.cache-missing-key"
MAX_RETRIES = "lookup.max-retries"
MAX_STALENESS = "lookup.max-staleness"

# How a change to each option is carried out (as manifest fields declare it, runner/core/manifest.py): a lookup
# table is not state, so a new reload interval, retry count or staleness limit restarts the query with its state.
ON_CHANGE: dict[str, str] = {
    CACHE: "restart",
    RELOAD_INTERVAL: "restart",
    MAX_ROWS: "restart",
    EXPIRE: "restart",
    CACHE_MISSING: "restart",
    MAX_RETRIES: "restart",
    MAX_STALENESS: "restart",
}

CACHES = ("FULL", "PARTIAL")
DURATIONS = (RELOAD_INTERVAL, MAX_STALENESS, EXPIRE)
FULL_ONLY = (RELOAD_INTERVAL, MAX_STALENESS)
PARTIAL_ONLY = (MAX_ROWS, EXPIRE, CACHE_MISSING)
OPTIONS = frozenset(ON_CHANGE)

DEFAULT_RELOAD_SECONDS = 60.0
DEFAULT_MAX_RETRIES = 3
DEFAULT_MAX_ROWS = 10_000
DEFAULT_EXPIRE_SECONDS = 60.0
FILE_FORMATS = ("json", "csv", "parquet")


def lookup_cache(options: dict[str, str]) -> str | None:
    """How a table with these options is read by a query: ``FULL`` for a lookup table, None for a stream."""
    connector = options.get("connector")
    if connector == "jdbc":
        return options.get(CACHE, "FULL")
    if connector == "filesystem" and CACHE in options:
        return options[CACHE]
    return None


def is_lookup(table: TableDef) -> bool:
    return lookup_cache(table.options) is not None


def changed_options(before: TableDef, after: TableDef) -> list[str]:
    """The ``lookup.*`` options whose values differ between two declarations of a lookup table, in name order."""
    keys = {k for k in (*before.options, *after.options) if k.startswith(PREFIX)}
    return sorted(k for k in keys if before.options.get(k) != after.options.get(k))


def data_definition(table: TableDef) -> dict:
    """What a lookup table's rows are, without how often they are reloaded: two tables equal here read the
    same data (a change of the ``lookup.*`` options alone restarts the query, it changes no result)."""
    data = table.definition()
    data["options"] = {k: v for k, v in data["options"].items() if not k.startswith(PREFIX)}
    return data


@dataclass(frozen=True)
class LookupOptions:
    cache: str
    reload_seconds: float
    max_retries: int
    max_staleness_seconds: float | None  # None: serve the last good snapshot for as long as reloads fail
    max_rows: int = DEFAULT_MAX_ROWS  # PARTIAL: rows a cache holds at most
    expire_seconds: float = DEFAULT_EXPIRE_SECONDS  # PARTIAL: how long a cached key's rows are used
    cache_missing: bool = True  # PARTIAL: keep "no such key" too

    @staticmethod
    def of(table: TableDef) -> LookupOptions:
        """The table's lookup options, defaults filled in (the DDL checks have passed)."""
        options = table.options
        staleness = options.get(MAX_STALENESS)
        return LookupOptions(
            cache=lookup_cache(options) or "FULL",
            reload_seconds=durations.seconds(options.get(RELOAD_INTERVAL, "")) or DEFAULT_RELOAD_SECONDS,
            max_retries=int(options.get(MAX_RETRIES, DEFAULT_MAX_RETRIES)),
            max_staleness_seconds=durations.seconds(staleness) if staleness else None,
            max_rows=int(options.get(MAX_ROWS, DEFAULT_MAX_ROWS)),
            expire_seconds=durations.seconds(options.get(EXPIRE, "")) or DEFAULT_EXPIRE_SECONDS,
            cache_missing=options.get(CACHE_MISSING, "true") == "true",
        )


def check(options: dict[str, str]) -> list[tuple[str, str]]:
    """Problems with a table's ``lookup.*`` options, as (reason, hint); empty when they are valid."""
    problems: list[tuple[str, str]] = []
    connector = options.get("connector")
    declared = [k for k in options if k.startswith(PREFIX)]
    if connector == "filesystem" and declared and CACHE not in options:
        problems.append(
            (
                f"option '{declared[0]}' is set but 'lookup.cache' is not",
                "'lookup.cache' = 'FULL' makes the folder a lookup table (reloaded while the query runs)",
            )
        )
    if lookup_cache(options) is None:
        return problems
    for key in declared:
        value = options[key]
        if placeholder_syntax.names_in(value):
            continue
        if key in DURATIONS and not (durations.seconds(value) or 0) > 0:
            problems.append((f"option '{key}' = {value!r} is not a positive duration", "e.g. '30 s', '5 min', '1 h'"))
    cache = lookup_cache(options)
    wrong = PARTIAL_ONLY if cache == "FULL" else FULL_ONLY if cache == "PARTIAL" else ()
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
    if connector == "filesystem" and cache == "PARTIAL":
        problems.append(
            (
                "a folder lookup table is loaded whole: 'lookup.cache' = 'PARTIAL' is for jdbc tables",
                "'lookup.cache' = 'FULL'",
            )
        )
    if connector == "filesystem":
        fmt = options.get("format")
        if fmt is not None and fmt not in FILE_FORMATS:
            problems.append(
                (
                    f"a lookup table's 'format' = {fmt!r} is not a table of rows",
                    f"one of: {', '.join(FILE_FORMATS)} (a lookup table holds rows, not changes)",
                )
            )
        if "changelog-mode" in options:
            problems.append(("a lookup table takes no 'changelog-mode'", "its rows are reloaded whole: drop it"))
    reload = durations.seconds(options.get(RELOAD_INTERVAL, "")) or DEFAULT_RELOAD_SECONDS
    staleness = durations.seconds(options.get(MAX_STALENESS, ""))
    if staleness is not None and staleness < reload:
        problems.append(
            (
                f"'{MAX_STALENESS}' ({options[MAX_STALENESS]}) is shorter than the reload interval",
                f"at least '{RELOAD_INTERVAL}' ({options.get(RELOAD_INTERVAL, '60 s')}): a snapshot is that old "
                "just before each reload",
            )
        )
    return problems
