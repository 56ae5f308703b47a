"""The session's health publisher: ``session/health.json`` when something changed, else every few seconds."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from runner.core.bucket import Bucket
from runner.core.protocol.document import now
from runner.core.protocol.session import SessionHealth, SessionState, write_health
from runner.session.host import QueryHost
from runner.session.reconciler import Reconciler

HEARTBEAT_SECONDS = 5.0


class HealthPublisher:
    def __init__(self, bucket: Bucket, host: QueryHost, reconciler: Reconciler, *, team: str, run_id: str):
        self.bucket = bucket
        self.host = host
        self.reconciler = reconciler
        self.team = team
        self.run_id = run_id
        self.started = time.monotonic()
        self.started_at = datetime.now(UTC).isoformat(timespec="seconds")
        self.control_url: str | None = None  # the control endpoint's address (its token is not published here)
        self._last: tuple[float, tuple] | None = None

    def publish(self, state: SessionState, *, force: bool = False) -> None:
        """Publish the session's state and its queries' counts; unless ``force``d, only on a change or a
        heartbeat. Called from the supervisor thread and, at start and stop, from the loop thread."""
        counts = self.host.counts()
        invalid = self.reconciler.invalid_now()
        summary = (state, counts, tuple(invalid))
        moment = time.monotonic()
        last = self._last
        if not force and last and last[1] == summary and moment - last[0] < HEARTBEAT_SECONDS:
            return
        health = SessionHealth(
            state=state,
            team=self.team,
            run_id=self.run_id,
            started_at=self.started_at,
            updated_at=now(),
            uptime_seconds=round(moment - self.started, 1),
            queries=counts,
            invalid=invalid,
            control_url=self.control_url,
        )
        write_health(self.bucket, health)
        self._last = (moment, summary)
