"""``sql-runner run``: one job in the foreground (its output on the console), then exit.

Finding jobs goes to the local target, so a foreground run sees a detached job of the
same name and does not start a second one beside it.
"""

from __future__ import annotations

from runner.core import terminal
from runner.core.identity import JobIdentity
from runner.core.restarts import RestartStrategy
from runner.targets.base import Launch, Prelaunched, RunningJob
from runner.targets.local import LocalTarget


class ForegroundTarget:
    kind = "foreground"
    judges = True

    def __init__(self, local: LocalTarget):
        self.local = local
        self.exit_code: int | None = None

    def master(self) -> str:
        return self.local.master()

    def submit_options(self, identity: JobIdentity, restart: RestartStrategy | None = None) -> list[str]:
        return []

    def submit(self, launch: Launch) -> RunningJob:
        """Run the job attached to this terminal until it finishes."""
        return self.adopt(self.prelaunch(launch), launch.identity)

    def prelaunch(self, launch: Launch) -> Prelaunched:
        """Start the job attached to this terminal (its output on the console)."""
        # a Ctrl-C as it starts reached the job too: adopt waits for the job to stop, as for a later one
        process, _ = terminal.start(launch.args, env=launch.env)
        return Prelaunched(launch.identity, process, "")

    def adopt(self, started: Prelaunched, identity: JobIdentity) -> RunningJob:
        """Wait for the job to finish (Ctrl-C reaches it too: it stops its query); its exit code is the run's."""
        self.exit_code, _ = terminal.wait(started.process)
        return RunningJob(identity, self.kind, "foreground", f"exit code {self.exit_code}")

    def find(self, team: str, name: str) -> RunningJob | None:
        return self.local.find(team, name)

    def stop(self, job: RunningJob, *, force: bool) -> None:
        self.local.stop(job, force=force)

    def stop_gracefully(self, job: RunningJob, timeout: float) -> bool:
        return self.local.stop_gracefully(job, timeout)
