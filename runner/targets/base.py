"""What every target offers: submit a job, find it by exact identity, stop or kill it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


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


class Target(Protocol):
    kind: str

    def master(self) -> str: ...

    def submit_options(self, identity: JobIdentity) -> list[str]: ...

    def submit(self, identity: JobIdentity, args: list[str], env: dict[str, str]) -> RunningJob: ...

    def find(self, team: str, name: str) -> RunningJob | None: ...

    def stop(self, job: RunningJob, *, force: bool) -> None: ...
