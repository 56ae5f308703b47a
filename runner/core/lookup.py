"""Lookup tables: reference data a streaming query joins with, refreshed while the query runs.

A table a query reads whose connector says it is a lookup table (``Connector.lookup_cache``: every
``jdbc`` table, a ``filesystem`` table that declares ``'lookup.cache'``) is not a stream: each
micro-batch joins with the table's snapshot, and the snapshot is reloaded every refresh interval
(``jobs/lookup/``). Its ``lookup.*`` options, their meaning and their checks are in
``runner/core/connectors/lookups.py``; here they are read into a query's settings.

Pure data, no Spark: the DDL checks and the plan read it as well as the job.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from runner.core import connectors, durations
from runner.core.connectors.lookups import (
    CACHE,
    CACHE_MISSING,
    DEFAULT_EXPIRE_SECONDS,
    DEFAULT_MAX_RETRIES,
    DEFAULT_MAX_ROWS,
    DEFAULT_RELOAD_SECONDS,
    EXPIRE,
    FULL,
    MAX_RETRIES,
    MAX_ROWS,
    MAX_STALENESS,
    PREFIX,
    RELOAD_INTERVAL,
)
from runner.core.tables import TableDef

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


def lookup_cache(options: Mapping[str, str]) -> str | None:
    """How a table with these options is read by a query: ``FULL`` or ``PARTIAL`` for a lookup table, None for
    a stream (and for a table whose connector is not known)."""
    connector = connectors.find(options.get("connector"))
    return connector.lookup_cache(options) if connector is not None else None


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
            cache=lookup_cache(options) or FULL,
            reload_seconds=durations.seconds(options.get(RELOAD_INTERVAL, "")) or DEFAULT_RELOAD_SECONDS,
            max_retries=int(options.get(MAX_RETRIES, DEFAULT_MAX_RETRIES)),
            max_staleness_seconds=durations.seconds(staleness) if staleness else None,
            max_rows=int(options.get(MAX_ROWS, DEFAULT_MAX_ROWS)),
            expire_seconds=durations.seconds(options.get(EXPIRE, "")) or DEFAULT_EXPIRE_SECONDS,
            cache_missing=options.get(CACHE_MISSING, "true") == "true",
        )
