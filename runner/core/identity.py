"""How a job is known on every target: team, name and version, exactly (jobs are never found by substring)."""

from __future__ import annotations

import re

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
        """YARN application tags (YARN lowercases tags; names are lowercase already, a run id is read back by
        :func:`run_from_tag`)."""
        return [
            "sql-runner",
            f"sql-runner-team:{self.team}",
            f"sql-runner-name:{self.name}",
            f"sql-runner-version:{self.version}",
            *([f"{RUN_TAG}{self.run_id.lower()}"] if self.run_id else []),
        ]


RUN_TAG = "sql-runner-run:"
_LOWERED_RUN = re.compile(r"^run-(\d{8})t(\d{6})z-([0-9a-f]+)$")


def run_from_tag(tags: set[str]) -> str:
    """The run id an application's tags carry, as it was before YARN lowercased it ("run-20261127T122644Z-ed43cd");
    empty when they carry none."""
    value = next((tag[len(RUN_TAG) :] for tag in tags if tag.startswith(RUN_TAG)), "")
    return _LOWERED_RUN.sub(r"run-\1T\2Z-\3", value)
