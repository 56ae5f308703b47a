"""Jobs on a Spark standalone cluster (``spark://host:7077``).

Python applications run in client mode on a standalone cluster (Spark does not offer
cluster mode for them), so the driver is a detached local process tracked like a local
job, and the executors run on the cluster's workers. The master's JSON endpoint confirms
the application by its exact name.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

from runner.core.bucket import Bucket
from runner.targets.base import RunningJob
from runner.targets.local import LocalTarget


class StandaloneTarget(LocalTarget):
    kind = "standalone"

    def __init__(self, bucket: Bucket, log_dir: Path, master: str, web_ui: str | None = None):
        super().__init__(bucket, log_dir, master)
        host = master.removeprefix("spark://").split(":", 1)[0]
        self.web_ui = web_ui or f"http://{host}:8080"

    def applications(self) -> list[dict]:
        """Active applications as the master lists them."""
        with urllib.request.urlopen(f"{self.web_ui}/json/", timeout=5) as response:
            return json.load(response).get("activeapps", [])

    def find(self, team: str, name: str) -> RunningJob | None:
        job = super().find(team, name)
        if job is None:
            return None
        try:
            apps = [a for a in self.applications() if a.get("name") == job.identity.app_name]
        except OSError as error:
            return RunningJob(job.identity, self.kind, job.job_id, f"{job.detail}; master unreachable: {error}")
        detail = f"app {apps[0]['id']}" if apps else "driver running, not registered with the master"
        return RunningJob(job.identity, self.kind, job.job_id, f"{detail}; {job.detail}")
