"""``sql-runner run``: one job in the foreground (its output on the console), then exit.

Finding jobs goes to the local target, so a foreground run sees a detached job of the
same name and does not start a second one beside it.
"""

from __future__ import annotations

import subprocess

from runner.core.restarts import RestartStrategy
from runner.targets.base import JobIdentity, Launch, RunningJob
from runner.targets.local import LocalTarget


class ForegroundTarget:
    kind = "foreground"

    def __init__(self, local: LocalTarget):
        self.local = local
        self.exit_code: int | None = None

    def master(self) -> str:
        return self.local.master()

    def submit_options(self, identity: JobIdentity, restart: RestartStrategy | None = None) -> list[str]:
        return []

    def submit(self, launch: Launch) -> RunningJob:
        """Run the job attached to this terminal until it finishes."""
        self.exit_code = subprocess.run(launch.args, env=launch.env, check=False).returncode
        return RunningJob(launch.identity, self.kind, "foreground", f"exit code {self.exit_code}")

    def find(self, team: str, name: str) -> RunningJob | None:
        return self.local.find(team, name)

    def stop(self, job: RunningJob, *, force: bool) -> None:
        self.local.stop(job, force=force)

    def stop_gracefully(self, job: RunningJob, timeout: float) -> bool:
        return self.local.stop_gracefully(job, timeout)
