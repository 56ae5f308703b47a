"""What a session application is started with (no secrets: placeholders resolve in the session).

``sql-runner session start`` writes it onto the session's command line (``--config-json``); the session
application reads it (``SessionConfig.to_json`` / ``from_json``, its one writer and reader).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from runner.core.restarts import RestartStrategy


@dataclass(frozen=True)
class Protection:
    """How the session protects itself and the other queries from one query."""

    max_failures: int = 5  # consecutive run-time failures before a query is parked
    batch_timeout: float = 300.0  # seconds one micro-batch may take before it is cancelled
    build_timeout: float = 60.0  # seconds building a query (its code snippet) may take

    @property
    def restart_strategy(self) -> RestartStrategy:
        """How a session query whose manifest sets no ``restart-strategy`` comes back: after 1 s, doubling up
        to a minute, and parked at its ``max_failures``-th failure. The session forgets a query's failures
        once it completes a micro-batch again, so they count only while they follow each other."""
        return RestartStrategy(
            attempts=self.max_failures - 1, delay="1 second", backoff=2.0, max_delay="1 minute", failure_window="1 hour"
        )


@dataclass(frozen=True)
class SessionConfig:
    team: str
    run_id: str
    store: dict[str, dict[str, str]]  # Store.describe()
    application: dict[str, Any]  # where application-mode jobs run: kind, master, log-dir, ...
    project: str | None = None  # the project folder watched; None: the manifests bucket's manifests/
    poll: float = 0.5  # seconds between looks at the desired manifests and requests
    stop_timeout: float = 90.0
    protection: Protection = field(default_factory=Protection)
    control_address: str = "127.0.0.1"  # where the control endpoint (live previews) listens
    control_port: int = 0  # 0: any free port (published in session/control.json)
    console_actions: bool = False  # the console it serves on the control endpoint may stop, savepoint and deploy
    placeholders: dict[str, str | None] = field(default_factory=dict)  # placeholders.Sources.to_dict()

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @staticmethod
    def from_json(text: str) -> SessionConfig:
        data = json.loads(text)
        data["protection"] = Protection(**data.get("protection", {}))
        return SessionConfig(**data)
