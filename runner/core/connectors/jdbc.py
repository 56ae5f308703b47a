"""``jdbc``: a PostgreSQL table. Written from the driver, one transaction per micro-batch fenced by
its batch id (exactly once); with a PRIMARY KEY, upserted and deleted by it. A query reads it as a
lookup table (its rows now, reloaded while the query runs, or keys looked up through a cache)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from runner.core import placeholder_syntax
from runner.core.connectors import lookups
from runner.core.connectors.base import Connector, OptionSpec, Report


class Jdbc(Connector):
    name = "jdbc"
    option_spec = OptionSpec(
        required=("url", "table-name"),
        allowed=frozenset({"username", "password"}) | lookups.OPTIONS,
        choices={lookups.CACHE: lookups.CACHES, lookups.CACHE_MISSING: ("true", "false")},
        integers=(lookups.MAX_RETRIES, lookups.MAX_ROWS),
    )
    sink = True
    lookup_caches = lookups.CACHES

    def check(self, options: Mapping[str, str], columns: Sequence[str], report: Report) -> None:
        """A PostgreSQL URL, and no literal password: it would be kept in the deployed state."""
        url = options.get("url", "")
        if url and not placeholder_syntax.names_in(url) and not url.startswith("jdbc:postgresql://"):
            report(
                "DDL_INVALID_CONNECTOR_OPTION",
                reason=f"option 'url' = {url!r} is not a PostgreSQL JDBC URL",
                hint="'jdbc:postgresql://<host>:<port>/<database>' (PostgreSQL is the database the jdbc sink writes)",
            )
        password = options.get("password")
        if (password and not placeholder_syntax.names_in(password)) or "password=" in url.lower():
            report(
                "DDL_INVALID_CONNECTOR_OPTION",
                reason="a literal password is declared (it would be kept in the deployed state)",
                hint="'password' = '${DB_PASSWORD}' (a placeholder, resolved only where the job runs), "
                "not in the 'url'",
            )

    def changes_refused(self, options: Mapping[str, str], keyed: bool) -> tuple[str, str] | None:
        if keyed:
            return None
        return (
            "a jdbc table without PRIMARY KEY is appended to",
            "declare the PRIMARY KEY of the database table on the target: rows are upserted and deleted by it",
        )

    def delivery(self, keyed: bool) -> str:
        return "exactly-once"  # each micro-batch commits in one transaction with its batch id

    def lookup_cache(self, options: Mapping[str, str]) -> str | None:
        return options.get(lookups.CACHE, lookups.FULL)  # every jdbc table a query reads is a lookup table
