"""The session application's documents: its health, its held queries and its control endpoint.

- ``session/health.json`` (``SessionHealth``): published by the running session, read by ``status``,
  the session target and ``session start`` (which waits for it);
- ``session/held.json`` (``HeldQueries``): queries the session keeps stopped until their manifest changes
  (stopped from outside, or parked), so that a restarted session keeps them stopped too;
- ``session/control.json`` (``SessionControl``): where the control endpoint listens and this run's token.
"""

from __future__ import annotations

import json
from enum import StrEnum

from runner.core import layout
from runner.core.bucket import Bucket
from runner.core.protocol.document import Document, Part, read


class QueryCounts(Part):
    running: int = 0
    failing: int = 0
    parked: int = 0
    stuck_builds: int = 0  # query builds (code snippets) that never returned


class SessionState(StrEnum):
    STARTING = "starting"  # its application runs, its health is not published yet
    RUNNING = "running"
    STOPPING = "stopping"  # stopping its queries with savepoints
    STOPPED = "stopped"


class SessionHealth(Document):
    state: SessionState
    run_id: str
    team: str = ""
    started_at: str | None = None
    updated_at: str | None = None
    uptime_seconds: float = 0.0
    queries: QueryCounts = QueryCounts()
    invalid: dict[str, str] = {}  # manifest (or file) -> why it is not deployed
    control_url: str | None = None  # the control endpoint (its token is in session/control.json only)


class HeldQuery(Part):
    fingerprint: str  # the manifest content it is held at
    tables: list[str] = []  # the tables that fingerprint covers


class HeldQueries(Document):
    queries: dict[str, HeldQuery] = {}

    @classmethod
    def decode(cls, text: str | bytes) -> HeldQueries:
        """Also the first release's file, which was the name -> query map itself with no envelope (and no
        ``schema``: this release always writes one, so a query named ``queries`` is no ambiguity)."""
        data = json.loads(text)
        if isinstance(data, dict) and "schema" not in data:
            data = {"schema": 0, "queries": data}
        return cls.model_validate(data)


class SessionControl(Document):
    run_id: str
    url: str
    token: str


def write_health(bucket: Bucket, health: SessionHealth) -> None:
    bucket.write(layout.SESSION_HEALTH, health.encode())


def read_health(bucket: Bucket) -> SessionHealth | None:
    return read(bucket, layout.SESSION_HEALTH, SessionHealth)


def write_held(bucket: Bucket, held: HeldQueries) -> None:
    bucket.write(layout.SESSION_HELD, held.encode())


def read_held(bucket: Bucket) -> HeldQueries:
    return read(bucket, layout.SESSION_HELD, HeldQueries) or HeldQueries()


def write_control(bucket: Bucket, control: SessionControl) -> None:
    bucket.write(layout.SESSION_CONTROL, control.encode())


def read_control(bucket: Bucket) -> SessionControl | None:
    return read(bucket, layout.SESSION_CONTROL, SessionControl)
