"""What every target offers: start a job, find it by exact identity, stop it at a batch boundary or kill it.

Application targets (local, standalone, yarn) run each job as its own ``spark-submit``
application; the session target runs it as a query inside the team's long-running
session application. The deployer does not know which: it hands every target a
:class:`Launch` (the job spec, and the command line an application would run).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from runner.core.protocol.jobspec import JobSpec
from runner.core.restarts import RestartStrategy


@dataclass(frozen=True)
class JobIdentity:
    """Team, name and version identify a job exactly; jobs are never found by substring."""

    team: str
    name: str
    version: int
    run_id: str = ""

    @property
    def app_name(self) -> str:
        return f"sql-runner:{self.team}:{self.name}:v{self.version}"

    @property
    def tags(self) -> list[str]:
        """YARN application tags (YARN lowercases tags; names are lowercase already)."""
        return [
            "sql-runner",
            f"sql-runner-team:{self.team}",
            f"sql-runner-name:{self.name}",
            f"sql-runner-version:{self.version}",
        ]

    def to_dict(self) -> dict:
        return {"team": self.team, "name": self.name, "version": self.version, "run-id": self.run_id}

    @staticmethod
    def from_dict(data: dict) -> JobIdentity:
        return JobIdentity(data["team"], data["name"], int(data["version"]), data.get("run-id", ""))


@dataclass(frozen=True)
class RunningJob:
    identity: JobIdentity
    target: str
    job_id: str  # a process id on a host, or a YARN application id
    detail: str = ""


@dataclass(frozen=True)
class Launch:
    """One application or query to start: its identity, its job spec (None for the session application
    itself), and the ``spark-submit`` command line and environment an application target runs (for a
    query in the session: what its placeholders resolve to)."""

    identity: JobIdentity
    spec: JobSpec | None
    args: list[str] = field(default_factory=list)
    env: Mapping[str, str] = field(default_factory=dict)


class Target(Protocol):
    kind: str

    def master(self) -> str: ...

    def submit_options(self, identity: JobIdentity, restart: RestartStrategy | None = None) -> list[str]: ...

    def submit(self, launch: Launch) -> RunningJob: ...

    def find(self, team: str, name: str) -> RunningJob | None: ...

    def stop(self, job: RunningJob, *, force: bool) -> None: ...

    def stop_gracefully(self, job: RunningJob, timeout: float) -> bool:
        """Stop the job after its current micro-batch; kill it after ``timeout`` seconds.

        True if it stopped at a batch boundary (its latest checkpoint is a clean savepoint)."""
        ...
