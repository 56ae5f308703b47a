"""A query's sources, and where each starts when a new version continues the previous one.

The runner works the starts out from the previous version's state (``runner/state/
continuation.py``); the job applies them (each connector's reader, ``jobs/connectors/``).
Both sides meet here:

- a start is found by the query's *role* (``main``: a job is one query, whose dead
  letters come from the same read of its sources) and the table's name;
- Kafka sources start from the offsets the previous version committed;
- file sources skip the files the previous version read, compared as file URIs in the
  one spelling :func:`normalise_file_path` gives (Spark writes ``file:/x`` and
  ``file:///x`` for the same file; :data:`FILE_URI_PREFIX` is the same rule as a regular
  expression, for Spark to apply to the paths it reads).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, ClassVar

MAIN = "main"
FILE_URI_PREFIX = r"^file:/*"
FILE_URI_SPELLING = "file:/"


@dataclass(frozen=True)
class Source:
    """A table a query reads."""

    table: str  # `demo`.`card-transactions`
    connector: str  # kafka, filesystem, datagen
    changelog: bool = False  # its rows change (runner/core/tables.py: TableDef.changelog)


def kafka_topics(options: dict[str, str]) -> list[str]:
    """The topics a Kafka table's ``topic`` option names (``a;b;c``)."""
    return [t.strip() for t in options.get("topic", "").split(";") if t.strip()]


def normalise_file_path(path: str) -> str:
    """``file:///x``, ``file:/x`` and ``/x`` as one spelling: ``file:/x``."""
    if path.startswith("/"):
        path = "file:" + path
    return re.sub(FILE_URI_PREFIX, FILE_URI_SPELLING, path)


@dataclass(frozen=True)
class KafkaOffsets:
    """Start from these offsets: ``{"topic": {"partition": offset}}``."""

    kind: ClassVar[str] = "kafka-offsets"
    offsets: dict[str, dict[str, int]]

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "offsets": self.offsets}


@dataclass(frozen=True)
class SkipFiles:
    """Read the table's folder but skip the files listed (JSON lines ``{"path": ...}``) at ``uri``."""

    kind: ClassVar[str] = "skip-files"
    uri: str
    count: int

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "uri": self.uri, "count": self.count}


Start = KafkaOffsets | SkipFiles
# role -> table name -> start
Starts = dict[str, dict[str, Start]]


def start_from_dict(data: dict[str, Any]) -> Start:
    if data["kind"] == KafkaOffsets.kind:
        return KafkaOffsets(data["offsets"])
    if data["kind"] == SkipFiles.kind:
        return SkipFiles(data["uri"], int(data["count"]))
    raise ValueError(f"unknown source start kind {data['kind']!r}")


def starts_to_dict(starts: Starts) -> dict[str, dict[str, dict[str, Any]]]:
    return {role: {table: start.to_dict() for table, start in tables.items()} for role, tables in starts.items()}


def starts_from_dict(data: dict[str, dict[str, dict[str, Any]]]) -> Starts:
    return {role: {table: start_from_dict(start) for table, start in tables.items()} for role, tables in data.items()}
