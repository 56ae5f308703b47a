"""What a session application is started with (no secrets: placeholders resolve in the session).

``sql-runner session start`` writes it in the state store (``session/runs/<run-id>.json``) and names
it on the session's command line (``--config-uri``); the session application reads it
(``SessionConfig.encode`` / ``decode``, its one writer and reader). YARN starts a failed session again with
the same command line, on whatever runner its node has by then: a configuration
of the release before it was a document (no ``schema``; keys spelt as fields, ``run_id``,
``stop_timeout``, ...) still reads.
"""

from __future__ import annotations

from pydantic import Field

from runner.core.bucket import BucketAddress
from runner.core.part import Part
from runner.core.placeholders import Sources
from runner.core.protocol.document import Document
from runner.core.restarts import RestartStrategy


class Protection(Part):
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


class Application(Part):
    """Where application-mode jobs run (the target the session starts them on), as the command's options
    said."""

    kind: str  # local, standalone, yarn
    log_dir: str
    master: str | None = None
    master_web_ui: str | None = None
    resource_manager: str | None = None


class SessionConfig(Document):
    team: str
    run_id: str
    store: dict[str, BucketAddress]  # Store.describe()
    application: Application
    project: str | None = None  # the project folder watched; None: the manifests bucket's manifests/
    poll: float = 0.5  # seconds between looks at the desired manifests and requests
    stop_timeout: float = 90.0
    protection: Protection = Field(default_factory=Protection)
    control_address: str = "127.0.0.1"  # where the control endpoint (live previews) listens
    control_port: int = 0  # 0: any free port (published in session/control.json)
    console_actions: bool = False  # the console it serves on the control endpoint may stop, savepoint and deploy
    placeholders: Sources = Field(default_factory=Sources)
