"""Jobs as detached ``spark-submit`` processes on this machine.

A started job is recorded in the state store (``jobs/<name>.json``: host, process id and
the process's start time from ``/proc``). A runner started later finds its jobs there; a
process counts as running only if that very process (same id *and* start time, so a
reused id is not mistaken for it) is alive on this host and not a zombie.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
from pathlib import Path

from runner.core import layout
from runner.core.bucket import Bucket
from runner.core.identity import JobIdentity
from runner.core.protocol.document import read
from runner.core.protocol.ownership import JobRecord
from runner.core.restarts import RestartStrategy
from runner.targets.base import Launch, Prelaunched, RunningJob, group_members
from runner.targets.stop_request import request_stop


def process_start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot, or None if it is gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


class LocalTarget:
    kind = "local"
    judges = True

    def __init__(self, bucket: Bucket, log_dir: Path, master: str = "local[*]"):
        self.bucket = bucket  # the manifests bucket, where job records live
        self.log_dir = log_dir
        self._master = master

    def master(self) -> str:
        return self._master

    def submit_options(self, identity: JobIdentity, restart: RestartStrategy | None = None) -> list[str]:
        return []

    def log_path(self, identity: JobIdentity) -> Path:
        if identity.launch:
            return self.log_dir / f"{identity.name}-launch-{identity.launch}.log"
        return self.log_dir / f"{identity.name}-v{identity.version}-{identity.run_id}.log"

    def submit(self, launch: Launch) -> RunningJob:
        """Start the launch's ``spark-submit`` detached (its own session, output to a log file) and record it."""
        return self.adopt(self.prelaunch(launch), launch.identity)

    def prelaunch(self, launch: Launch) -> Prelaunched:
        """Start the launch's ``spark-submit`` detached (its own session, output to a log file), unrecorded."""
        log = self.log_path(launch.identity)
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as handle:
            process = subprocess.Popen(
                launch.args,
                env=launch.env,
                stdout=handle,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        return Prelaunched(launch.identity, process, str(log), process_start_ticks(process.pid), group=True)

    def adopt(self, started: Prelaunched, identity: JobIdentity) -> RunningJob:
        """Record ``started`` as the job ``identity`` names: from now on it is found, stopped and killed as it."""
        record = JobRecord(
            target=self.kind,
            identity=identity,
            host=socket.gethostname(),
            pid=started.process.pid,
            start_ticks=started.start_ticks,
            log=started.log,
            master=self._master,
        )
        self.bucket.write(layout.job_record(identity.name), record.encode())
        return RunningJob(identity, self.kind, f"{started.process.pid}@{record.host}", f"log {started.log}")

    def _record(self, name: str) -> JobRecord | None:
        return read(self.bucket, layout.job_record(name), JobRecord)

    def find(self, team: str, name: str) -> RunningJob | None:
        record = self._record(name)
        if record is None or record.target != self.kind:
            return None
        identity = record.identity
        if identity.team != team or record.host != socket.gethostname():
            return None
        ticks = process_start_ticks(record.pid)
        if ticks is None:
            # spark-submit's JVM, the group's leader, ends first on a SIGTERM; the job lasts until its Python
            # driver has stopped its queries and said so. Linux gives no new process the id of a group that
            # still has members, so a live group under the recorded id is this job's.
            if not group_members(record.pid):
                return None
        elif ticks != record.start_ticks:
            return None
        return RunningJob(identity, self.kind, f"{record.pid}@{record.host}", f"log {record.log}")

    def stop_gracefully(self, job: RunningJob, timeout: float) -> bool:
        return request_stop(self.bucket, self, job, timeout)

    def stop(self, job: RunningJob, *, force: bool) -> None:
        """SIGTERM (the job stops its queries) or SIGKILL, to the job's whole process group."""
        pid = int(job.job_id.split("@", 1)[0])
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL if force else signal.SIGTERM)
