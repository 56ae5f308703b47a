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
from typing import Annotated, Literal

from pydantic import Field

from runner.core.part import Part

MAIN = "main"
FILE_URI_PREFIX = r"^file:/*"
FILE_URI_SPELLING = "file:/"


class SourceTable(Part):
    """A table a query reads (the deployed record and a judged launch's verdict list them)."""

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


class KafkaOffsets(Part):
    """Start from these offsets: ``{"topic": {"partition": offset}}``."""

    kind: Literal["kafka-offsets"] = "kafka-offsets"
    offsets: dict[str, dict[str, int]]


class SkipFiles(Part):
    """Read the table's folder but skip the files listed (JSON lines ``{"path": ...}``) at ``uri``."""

    kind: Literal["skip-files"] = "skip-files"
    uri: str
    count: int


# how one source starts, as the job spec carries it: told apart by its ``kind``
Start = Annotated[KafkaOffsets | SkipFiles, Field(discriminator="kind")]
# role -> table name -> start
Starts = dict[str, dict[str, Start]]
