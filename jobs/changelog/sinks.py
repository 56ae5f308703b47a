"""Targets that take a changelog query's difference: inserts, updates and deletes.

A target's connector says whether it takes them (``Connector.changes_refused``: a file table, a
``kafka`` table of plain records and a ``jdbc`` table without key only grow, and a changelog query
into one is refused before it runs, as Flink refuses it); its Spark half writes them
(``SparkConnector.change_sink``, ``jobs/connectors/``) as a :class:`ChangeSink`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from pyspark.sql import DataFrame

from jobs.changelog.engine import KIND
from runner.core import connectors
from runner.core.errors import UserError
from runner.core.tables import TableDef


@dataclass(frozen=True)
class Written:
    upserts: int  # rows inserted or updated
    deletes: int  # keys (or rows) deleted


class ChangeSink(Protocol):
    def write(self, difference: DataFrame, batch_id: int, *, replace: bool) -> Written | None:
        """Write a micro-batch's difference (KIND, ``before``, ``after``); None when the sink held it already.
        ``replace``: the first micro-batch of a query without state (the difference is its whole result)."""
        ...


def kinds(difference: DataFrame) -> Written:
    """What a difference does: how many rows it inserts or updates, how many it deletes."""
    counts = {row[0]: row[1] for row in difference.groupBy(KIND).count().collect()}
    deletes = counts.get("delete", 0)
    return Written(sum(counts.values()) - deletes, deletes)


def check_target(target: TableDef, *, file: str | None = None, line: int | None = None) -> None:
    """A changelog query can write ``target``: it takes updates and deletes."""
    refused = connectors.named(target.connector).changes_refused(target.options, bool(target.primary_key))
    if refused is not None:
        reason, hint = refused
        raise UserError.of(
            "CHANGELOG_TARGET_APPEND_ONLY",
            file=file or target.file,
            line=line,
            table=target.name,
            reason=reason,
            hint=hint,
        )
