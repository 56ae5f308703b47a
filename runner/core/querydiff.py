"""How a desired query differs from the deployed one: the result the plan decides on."""

from __future__ import annotations

import json
from collections.abc import Iterable

from runner.core.manifest import Manifest, chosen_changelog_engine
from runner.core.part import Part
from runner.core.reasons import Reason
from runner.core.tables import TableDef


class QueryDiff(Part):
    """How the desired query differs from the deployed one (decided by Spark); a judged launch's verdict
    carries it to the runner."""

    changed: bool  # meaning, output columns, tables read or target
    state_compatible: bool  # the deployed version's state can carry over
    reasons: tuple[Reason, ...] = ()
    held_state: bool = False  # the deployed query keeps rows in state between batches (windows, joins, dedup)


def same_query(old: Manifest, new: Manifest) -> bool:
    """The two manifests hold the same query text and target table, on the same changelog engine (what a
    changelog query keeps in state depends on it: runner/analysis/query_diff.py)."""

    def query(manifest: Manifest) -> tuple:
        return manifest.sql, manifest.code, manifest.target_table, chosen_changelog_engine(manifest)

    return query(old) == query(new)


def same_text(old: Manifest, old_tables: Iterable[TableDef], new: Manifest, new_tables: Iterable[TableDef]) -> bool:
    """The two queries are the same text over the same table definitions."""
    return same_query(old, new) and _definitions(old_tables) == _definitions(new_tables)


def _definitions(tables: Iterable[TableDef]) -> list[str]:
    return sorted(json.dumps(t.definition(), sort_keys=True) for t in tables)
