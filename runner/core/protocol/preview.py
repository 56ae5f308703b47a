"""A live preview asked of the team's session over its control endpoint (``POST /preview``).

``sql-runner preview`` (``runner/targets/session.py``) sends a ``PreviewRequest`` and reads a
``PreviewAnswer``, or a ``PreviewRefusal`` with an error status (the console asks for a stream of
``PreviewChunk`` lines instead, to show rows as they arrive); the session's endpoint
(``runner/session/endpoint.py``) reads the request and writes the answer or the refusal.
"""

from __future__ import annotations

from typing import Any

from pydantic import model_validator

from runner.core.manifest import Manifest
from runner.core.protocol.document import Document
from runner.core.tables import TableDef


class PreviewRequest(Document):
    sql: str | None = None
    manifest: Manifest | None = None  # the merged manifest, placeholders unresolved
    file: str | None = None  # the manifest's file, for the problems' locations
    tables: tuple[TableDef, ...] = ()  # the project's tables
    limit: int = 20
    timeout: float = 30.0
    stream: bool = False  # answer with PreviewChunks, one JSON line each, as rows arrive

    @model_validator(mode="after")
    def _one_query(self) -> PreviewRequest:
        if (self.sql is None) == (self.manifest is None):
            raise ValueError("give exactly one of sql and manifest")
        return self


class PreviewAnswer(Document):
    session_run: str
    columns: list[str]
    rows: list[list[Any]]
    timed_out: bool
    limit: int
    timeout: float
    seconds: float = 0.0  # how long the session took to answer


class PreviewChunk(Document):
    """One line of a streamed answer: the columns first, then rows as each micro-batch brings them, then the
    end (``done``), or a refusal (``error``) at any point."""

    columns: list[str] | None = None
    rows: list[list[Any]] = []
    done: bool = False
    timed_out: bool = False
    session_run: str | None = None
    error: str | None = None
    problems: list[str] = []


class PreviewRefusal(Document):
    error: str
    problems: list[str] = []  # the query's problems, one line each, when it is not valid
