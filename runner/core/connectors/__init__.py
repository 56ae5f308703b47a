"""The connectors, by name: each one module in this package, its Spark-free half.

What a connector declares and the runner decides by is here (``base.py`` says what each declaration
means); how a job reads and writes its tables is in ``jobs/connectors/``, registered under the same
name. A new connector is a module here, a module there, and a line in each registry
(docs/contributing.md, "Adding a connector").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from runner.core.connectors.base import Connector, ContinueBy, OptionSpec
from runner.core.connectors.blackhole import Blackhole
from runner.core.connectors.datagen import Datagen
from runner.core.connectors.filesystem import Filesystem
from runner.core.connectors.jdbc import Jdbc
from runner.core.connectors.kafka import Kafka
from runner.core.connectors.print import Print
from runner.core.connectors.upsert_kafka import UpsertKafka
from runner.core.errors import Problem

__all__ = ["CONNECTORS", "Connector", "ContinueBy", "OptionSpec", "find", "named", "problems"]

# In the order a hint lists them.
CONNECTORS: dict[str, Connector] = {
    each.name: each for each in (Filesystem(), Datagen(), Blackhole(), Print(), Kafka(), UpsertKafka(), Jdbc())
}


def named(name: str) -> Connector:
    """The connector ``name`` (a table's ``'connector'``, checked when its DDL was read)."""
    connector = CONNECTORS.get(name)
    if connector is None:
        raise KeyError(f"no connector {name!r}; registered: {', '.join(CONNECTORS)}")
    return connector


def find(name: str | None) -> Connector | None:
    """The connector ``name``, or None when there is no such connector (a table not yet checked)."""
    return CONNECTORS.get(name) if name is not None else None


def problems(
    options: Mapping[str, str],
    columns: Sequence[str],
    primary_key: Sequence[str],
    *,
    file: str | None,
    line: int | None,
    table: str,
) -> list[Problem]:
    """Problems with a table's connector and its ``WITH`` options; empty when they are valid."""
    found: list[Problem] = []

    def report(code: str, **params: str) -> None:
        found.append(Problem.of(code, file=file, line=line, table=table, **params))

    name = options.get("connector")
    connector = find(name)
    if connector is not None:
        connector.problems(options, columns, primary_key, report)
        return found
    if name is None:
        report("DDL_MISSING_CONNECTOR", connectors=", ".join(CONNECTORS))
    else:
        report("DDL_UNKNOWN_CONNECTOR", connector=name, connectors=", ".join(CONNECTORS))
    # Whatever the connector, 'changelog-mode' and a debezium-json format say the rows change.
    Connector().changelog_problems(options, primary_key, report)
    return found
