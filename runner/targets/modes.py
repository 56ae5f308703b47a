"""Where each job runs, by its manifest's ``mode``: its own application, or a query in the team's session.

A job moves between the two modes by a stop with a savepoint on the target it runs on
and a restore on the other, so finding a job looks at both, and stopping one goes to the
target it was found on.
"""

from __future__ import annotations

from runner.core.errors import UserError
from runner.core.manifest import Manifest
from runner.targets.base import Ended, RunningJob, Target


class Targets:
    """The application target (local, standalone or yarn) and, where there is one, the session."""

    def __init__(self, application: Target, session: Target | None = None):
        self.application = application
        self.session = session

    def pick(self, manifest: Manifest) -> Target:
        """The target a job of ``manifest`` starts on."""
        if manifest.mode == "session":
            if self.session is None:
                raise UserError.of("SESSION_TARGET_UNAVAILABLE", name=manifest.name, target=self.application.kind)
            return self.session
        return self.application

    def of(self, job: RunningJob) -> Target:
        """The target ``job`` was found on."""
        if self.session is not None and job.target == self.session.kind:
            return self.session
        return self.application

    def find(self, team: str, name: str) -> RunningJob | None:
        """The running job named ``name``, in the session or as an application."""
        if self.session is not None:
            job = self.session.find(team, name)
            if job is not None:
                return job
        return self.application.find(team, name)

    def ended(self, team: str, name: str) -> Ended | None:
        """How the job's last application ended, when its target can say (YARN's ResourceManager keeps finished
        applications with their final state and diagnostics); None elsewhere."""
        explain = getattr(self.application, "ended", None)
        return explain(team, name) if explain is not None else None
