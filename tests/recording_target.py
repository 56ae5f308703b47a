"""RecordingTarget: a test double of a target (local, standalone, yarn) that only records what it is asked.

For tests whose point is what the executor or the session's reconciler asks of a target and writes to the
store, not Spark: it records submits and stops, and reports what was submitted as running."""

from __future__ import annotations

from runner.core.identity import JobIdentity
from runner.targets.base import Launch, RunningJob


class RecordingTarget:
    """Test double of a target: records submits and stops, reports what was submitted as running."""

    kind = "recording"

    def __init__(self, graceful: bool = True):
        self.calls: list[tuple[str, str]] = []
        self.running: dict[str, RunningJob] = {}
        self.launches: list[Launch] = []
        self.graceful = graceful

    def master(self) -> str:
        return "local[1]"

    def submit_options(self, identity: JobIdentity, restart=None) -> list[str]:
        return []

    def submit(self, launch: Launch) -> RunningJob:
        self.calls.append(("submit", launch.identity.name))
        self.launches.append(launch)
        job = RunningJob(launch.identity, self.kind, f"job-{len(self.launches)}")
        self.running[launch.identity.name] = job
        return job

    def find(self, team: str, name: str) -> RunningJob | None:
        return self.running.get(name)

    def stop(self, job: RunningJob, *, force: bool) -> None:
        self.calls.append(("kill" if force else "stop", job.identity.name))
        self.running.pop(job.identity.name, None)

    def stop_gracefully(self, job: RunningJob, timeout: float) -> bool:
        self.calls.append(("stop-gracefully", job.identity.name))
        self.running.pop(job.identity.name, None)
        return self.graceful
