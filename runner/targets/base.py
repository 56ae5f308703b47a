"""What every target offers: start a job, find it by exact identity, stop it at a batch boundary or kill it.

Application targets (local, standalone, yarn) run each job as its own ``spark-submit``
application; the session target runs it as a query inside the team's long-running
session application. The deployer does not know which: it hands every target a
:class:`Launch` (the job spec, and the command line an application would run).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Protocol

from runner.core.identity import JobIdentity
from runner.core.protocol.jobspec import JobSpec
from runner.core.restarts import RestartStrategy


@dataclass(frozen=True)
class RunningJob:
    identity: JobIdentity
    target: str
    job_id: str  # a process id on a host, or a YARN application id
    detail: str = ""
    attempt: Attempt | None = None  # on YARN: which application attempt runs, and how the one before ended


@dataclass(frozen=True)
class Ended:
    """How a job's latest application ended, as its target keeps it (YARN's ResourceManager): ``failed`` when YARN
    gave up on it (every attempt failed), not when it finished or was killed on request."""

    how: str
    failed: bool
    clean: bool = False  # it finished by itself, successfully (a stop at a batch boundary)
    at: datetime | None = None  # when it ended


@dataclass(frozen=True)
class Attempt:
    """A YARN application's running attempt: its number, and why the attempt before it ended (None for the first)."""

    number: int
    previous_end: str | None = None

    def explained(self) -> str | None:
        """What status says of it while the job runs; None for a first attempt."""
        if self.previous_end is None:
            return None
        return f"attempt {self.number}; attempt {self.number - 1} ended: {self.previous_end}"


@dataclass(frozen=True)
class Launch:
    """One application or query to start: its identity, its job spec (None for the session application
    itself), and the ``spark-submit`` command line and environment an application target runs (for a
    query in the session: what its placeholders resolve to)."""

    identity: JobIdentity
    spec: JobSpec | None
    args: list[str] = field(default_factory=list)
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass
class Prelaunched:
    """An application started to judge its manifest: not the job's running application until it is adopted
    (``runner/core/protocol/launch.py``), so no target finds it before."""

    identity: JobIdentity  # version 0: not decided yet
    process: subprocess.Popen
    log: str  # where its output goes ("" when it goes to this terminal)
    start_ticks: int | None = None
    group: bool = False  # it leads a process group of its own (its Python driver is in it)

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        """Kill it (and its process group, if it leads one) and reap it."""
        with contextlib.suppress(ProcessLookupError):
            if self.group:
                os.killpg(self.process.pid, signal.SIGKILL)
            else:
                self.process.kill()
        self.process.wait()

    def wait_group_gone(self, timeout: float) -> None:
        """Once it has exited: wait up to ``timeout`` seconds for the rest of its process group (its Python
        driver, a child of its JVM, can outlive the JVM for a moment), then kill what is left of it."""
        if not self.group:
            return
        deadline = time.monotonic() + timeout
        while group_members(self.process.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if group_members(self.process.pid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            while group_members(self.process.pid) and time.monotonic() < deadline + 5.0:
                time.sleep(0.05)


def group_processes(group: int) -> list[tuple[Path, list[str]]]:
    """The processes of process group ``group`` on this machine: each one's ``/proc`` folder and the fields of its
    ``stat`` after the command name (which may hold spaces): ``[0]`` is its state, ``[2]`` its group, ``[11]`` and
    ``[12]`` its user and system CPU ticks."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # it ended meanwhile
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[2]) == group:
            found.append((entry, fields))
    return found


def group_members(group: int) -> list[int]:
    """The live processes (not zombies) of process group ``group`` on this machine."""
    return [int(entry.name) for entry, fields in group_processes(group) if fields[0] != "Z"]


class Target(Protocol):
    kind: str
    judges: bool  # its jobs' drivers can judge their manifests before they start (prelaunch and adopt)

    def master(self) -> str: ...

    def submit_options(self, identity: JobIdentity, restart: RestartStrategy | None = None) -> list[str]: ...

    def submit(self, launch: Launch) -> RunningJob: ...

    def find(self, team: str, name: str) -> RunningJob | None: ...

    def stop(self, job: RunningJob, *, force: bool) -> None: ...

    def stop_gracefully(self, job: RunningJob, timeout: float) -> bool:
        """Stop the job after its current micro-batch; kill it after ``timeout`` seconds.

        True if it stopped at a batch boundary (its latest checkpoint is a clean savepoint)."""
        ...


class JudgingTarget(Target, Protocol):
    """A target whose jobs judge their own manifests: started before the decision, adopted after it."""

    def prelaunch(self, launch: Launch) -> Prelaunched: ...

    def adopt(self, started: Prelaunched, identity: JobIdentity) -> RunningJob:
        """``started`` is from now on the job ``identity`` names (its version decided): found as such."""
        ...
