"""How a job is known on every target: team, name and version, exactly (jobs are never found by substring)."""

from __future__ import annotations

from runner.core.part import Part


class JobIdentity(Part):
    """Team, name and version identify a job exactly; part of the record of a job started on this machine
    (``runner/core/protocol/ownership.py``)."""

    team: str
    name: str
    version: int
    run_id: str = ""
    launch: str = ""  # a job that judged its manifest before it started: the launch it was started as

    @property
    def app_name(self) -> str:
        """The application's name; a judged launch was named before its version was decided."""
        if self.launch:
            return f"sql-runner:{self.team}:{self.name}:launch-{self.launch}"
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
