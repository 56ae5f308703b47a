"""The Spark half of a connector: how a job reads and writes its tables.

One subclass of :class:`SparkConnector` per connector, one module each in this package, registered
in ``__init__.py`` under the name its Spark-free half has in ``runner/core/connectors/``. That half
says which roles the connector plays, and the job checks them before it asks for a builder: a
builder of a role the connector does not play is never called.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Protocol

from pyspark.sql import DataFrame, SparkSession

from jobs.changelog.sinks import ChangeSink
from jobs.sinks import OutputSink
from jobs.sources import Source
from runner.core.manifest import Manifest
from runner.core.placeholders import resolved_options
from runner.core.starts import Start
from runner.core.tables import TableDef


class LoadFailed(Exception):
    """A lookup table's snapshot could not be loaded: the reason, in one line without secrets."""


class LookupRows(Protocol):
    """Where a lookup table's rows are read from, for one table (``jobs/lookup/load.py`` loads them)."""

    @property
    def where(self) -> str:
        """Where the rows are, for messages: no credentials."""
        ...

    def rows(self) -> list[Any]:
        """The table's rows now, each a tuple in the declared columns' order; LoadFailed with the reason."""
        ...


class RoleNotDeclared(TypeError):
    """A defect, never a user's error: a role asked of a connector whose Spark-free half does not declare it. The
    checks of the DDL and the query refuse such a table first (CONNECTOR_NOT_A_SOURCE, CONNECTOR_NOT_A_SINK)."""


class SparkConnector:
    """How a job reads and writes one connector's tables. Options given to a builder are resolved
    (:meth:`options`): they hold secrets, so they never go into a message."""

    name: ClassVar[str]

    def options(self, spark: SparkSession, table: TableDef, values: Mapping[str, str]) -> dict[str, str]:
        """The table's options, placeholders resolved from ``values``."""
        return resolved_options(table, values)

    def source(self, spark: SparkSession, table: TableDef, options: dict[str, str], start: Start | None) -> Source:
        """The table read live as a stream; ``start``: where a previous version stopped (ContinueBy)."""
        raise self._not_a("stream source")

    def sink(
        self, frame: DataFrame, target: TableDef, options: dict[str, str], *, checkpoint: str, query: str, mode: str
    ) -> OutputSink:
        """How ``frame``'s micro-batches reach ``target``, in output ``mode``; ``query``: the job's identity
        where a sink fences batches."""
        raise self._not_a("sink")

    def change_sink(
        self, spark: SparkSession, target: TableDef, options: dict[str, str], manifest: Manifest, query: str
    ) -> ChangeSink:
        """How a changelog query's inserts, updates and deletes reach ``target``."""
        raise self._not_a("sink of changes")

    def lookup(self, spark: SparkSession, table: TableDef, values: Mapping[str, str]) -> LookupRows:
        """Where the lookup table's rows are read from; its options' placeholders resolved from ``values``."""
        raise self._not_a("lookup table")

    def check_sink(self, target: TableDef, env: Mapping[str, str]) -> None:
        """What ``validate`` checks of a target outside Spark before a deploy (a database's own table)."""

    def check_lookup(self, table: TableDef, env: Mapping[str, str]) -> None:
        """What ``validate`` checks of a lookup table outside Spark before a deploy."""

    def _not_a(self, role: str) -> RoleNotDeclared:
        return RoleNotDeclared(f"connector {self.name!r} has no {role} (runner/core/connectors/ says which roles)")
