"""Long-running streaming jobs fed the same input in tranches: throughput side by side, in steady state.

A streaming job runs for days; what its micro-batches cost once its JVM is warm is what a
throughput target is about, and starting a process per measurement mostly measures the
start (seconds of JVM start-up, class loading and compiling per run, and more noise than
the difference being looked for). Each side here is one process started once, with its
input folders empty but for a small warm-up tranche; every round then hard-links the next
tranche of files into each side's folders in turn (the side that goes first alternates)
and waits until that side's query has committed a micro-batch holding the tranche's last
file and has been idle for a few triggers since (so the batch a watermark brings on, with
no new data, falls in the same round). The round's time is the sum of the
``batch-duration-ms`` of the micro-batches that began after the files arrived.

Which files a micro-batch read and whether it committed come from the query's checkpoint
(``sources/<n>/<batch>`` lists each batch's files; ``commits/<batch>`` marks it done), the
same way for both sides; a side reports its micro-batches through ``progress()``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from runner.targets.base import group_processes

# No micro-batch in flight for this long: the round is over. The sides trigger every second, so a batch
# a watermark brings on (no new data) has written its offsets within a second of the last commit, and
# the quiet spell is only counted from the poll after the commit was seen.
IDLE_SECONDS = 1.2
POLL_SECONDS = 0.2
PRINTED = "PROGRESS "  # a hand-written job's line for one completed micro-batch


def printed_progress(side: Side) -> list[dict]:
    """A hand-written job's micro-batches: the ``PROGRESS`` lines it printed."""
    return list(side.printed)


class BenchError(SystemExit):
    pass


@dataclass
class Side:
    """One long-running process: a runner job or a hand-written one."""

    name: str
    args: list[str]
    cwd: Path
    inputs: dict[str, Path]  # table folder name (e.g. "tx") -> the folder this side reads
    checkpoint: Callable[[], Path | None]  # its query's checkpoint folder, once it exists
    progress: Callable[[Side], list[dict]]  # its completed micro-batches so far, oldest first
    env: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen | None = None
    output: list[str] = field(default_factory=list)  # its stdout and stderr lines (the last few hundred)
    printed: list[dict] = field(default_factory=list)  # what it printed as ``PROGRESS <json>`` lines
    batches: list[int] = field(default_factory=list)  # the input rows of each micro-batch of its last round
    cpu: float = 0.0  # CPU seconds its processes used over its last round (group_cpu)
    started: float = 0.0

    def start(self) -> None:
        self.started = time.monotonic()
        self.process = subprocess.Popen(
            self.args,
            cwd=self.cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", **self.env},
            start_new_session=True,  # its JVM and Python workers: one process group to stop
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith(PRINTED):
                self.printed.append(json.loads(line[len(PRINTED) :]))
            self.output.append(line.rstrip("\n"))
            del self.output[:-400]

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def fail(self, why: str) -> BenchError:
        tail = "\n".join(self.output[-40:])
        return BenchError(f"{self.name}: {why}\n{tail}")

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        for sig, grace in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
            try:
                os.killpg(self.process.pid, sig)
            except ProcessLookupError:
                return
            try:
                self.process.wait(timeout=grace)
                return
            except subprocess.TimeoutExpired:
                continue


def stop_all(sides: list[Side]) -> None:
    """Stop every side at once: each takes seconds to stop (its query, then its JVM), and one after
    another added up to a minute or more of a bench run."""
    stopping = [threading.Thread(target=side.stop) for side in sides]
    for thread in stopping:
        thread.start()
    for thread in stopping:
        thread.join()


def runner_job(
    name: str, project: Path, manifest: str, inputs: dict[str, Path], env: dict[str, str] | None = None
) -> Side:
    """``sql-runner run`` of ``project``'s ``manifests/<manifest>.yaml``, running until stopped; its
    checkpoint is found in the project's local state and its micro-batches are its status's progress."""
    state = project / ".sql-runner"

    def checkpoint() -> Path | None:
        try:
            found = [commits.parent for commits in (state / "checkpoints").glob("**/commits")]
        except FileNotFoundError:  # a folder went while it was listed (a changelog query's state): next poll
            return None
        return found[0] if len(found) == 1 else None

    def progress(_side: Side) -> list[dict]:
        try:
            status = json.loads((state / "manifests" / "status" / f"{manifest}.json").read_text())
        except (OSError, json.JSONDecodeError):  # not yet written, or being replaced
            return []
        return list(status.get("recent-progress") or [])

    command = [str(Path(sys.executable).parent / "sql-runner"), "run", f"manifests/{manifest}.yaml"]
    return Side(name, command, project, inputs, checkpoint, progress, env=dict(env or {}))


def batch_files(checkpoint: Path) -> dict[int, set[str]]:
    """The files each micro-batch of the checkpoint's file sources read: batch -> file names."""
    found: dict[int, set[str]] = {}
    for log in checkpoint.glob("sources/*/*"):
        if log.name.startswith(".") or log.name.endswith(".tmp"):
            continue
        try:
            lines = log.read_text().splitlines()[1:]  # after the version line
        except OSError:  # being compacted or written
            continue
        for line in lines:
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:  # a file being written: read again on the next look
                continue
            found.setdefault(int(entry["batchId"]), set()).add(Path(entry["path"]).name)
    return found


def latest(folder: Path) -> int:
    """The highest batch id with a file in a checkpoint's ``offsets`` or ``commits`` folder (-1: none)."""
    ids = [int(f.name) for f in folder.glob("*") if f.name.isdigit()] if folder.is_dir() else []
    return max(ids, default=-1)


def link(files: dict[Path, list[Path]]) -> list[str]:
    """Hard-link each folder's ``files`` into it (folder -> files, every table of a tranche) so that all
    appear together; their names. Each is read in full first, so the side reads it from the page cache:
    this host pages out a file left untouched for about a minute, and the side that read a tranche first
    would pay the disk reads for every side. Each is then linked under a hidden name (a leading dot:
    Spark's file listing skips it) and only once all are there renamed to its own, one ``rename(2)``
    after another: reading and linking a tranche one file at a time spans a trigger now and then, and a
    query's listing then split the tranche over two micro-batches (seen as 750,000 and 250,000 events;
    and, with each table's files renamed on their own, a join's refunds a batch ahead of its
    transactions), a round costing a batch's fixed overhead more than others."""
    pairs = [(source, into) for into, sources in files.items() for source in sources]
    for source, _ in pairs:
        with source.open("rb") as stream:
            while stream.read(1 << 20):
                pass
    for source, into in pairs:
        os.link(source, into / f".{source.name}")
    for source, into in pairs:
        os.rename(into / f".{source.name}", into / source.name)
    return [source.name for source, _ in pairs]


def wait_for(side: Side, names: set[str], since: int | None, timeout: float) -> tuple[list[dict], float]:
    """Wait until ``side`` has committed a micro-batch holding each of ``names``, then until no batch
    has been in flight for ``IDLE_SECONDS`` (a batch's offsets are written when it starts and its
    commit when it ends, so a long batch a watermark brings on is waited for too); its micro-batches
    after batch ``since`` (None: all), and when it was first seen to have committed ``names``."""
    deadline = time.monotonic() + timeout
    first_done: float | None = None
    quiet_since: float | None = None
    last_state: tuple[int, int] | None = None
    while True:
        if not side.alive():
            raise side.fail(f"exited ({side.process.returncode if side.process else '?'}) during a round")
        if time.monotonic() > deadline:
            raise side.fail(f"did not process its input within {timeout:.0f}s")
        checkpoint = side.checkpoint()
        if checkpoint is not None:
            state = (latest(checkpoint / "offsets"), latest(checkpoint / "commits"))
            if first_done is None:
                read = batch_files(checkpoint)
                holding = [batch for batch, files in read.items() if files & names]
                covered = set().union(*(read[b] for b in holding)) if holding else set()
                if names <= covered and state[1] >= max(holding):
                    first_done = time.monotonic()
            if first_done is not None:
                if state != last_state or state[0] > state[1]:  # a batch began or is running
                    quiet_since, last_state = None, state
                elif quiet_since is None:
                    quiet_since = time.monotonic()
                progress = [p for p in side.progress(side) if since is None or p["batch"] > since]
                if progress and since is not None and progress[0]["batch"] > since + 1:
                    raise side.fail(f"its progress no longer holds batch {since + 1} (too many batches in a round)")
                published = progress[-1]["batch"] if progress else -1
                quiet = quiet_since is not None and time.monotonic() - quiet_since >= IDLE_SECONDS
                if quiet and published == state[1]:  # and its progress shows every committed batch
                    return progress, first_done
        time.sleep(POLL_SECONDS)


def last_batch(side: Side) -> int | None:
    progress = side.progress(side)
    return progress[-1]["batch"] if progress else None


def batch_seconds(progress: list[dict]) -> float:
    return sum(p.get("batch-duration-ms") or 0 for p in progress) / 1000


@dataclass
class Tranche:
    """Files to hand to every side at once, per table folder name, and the rows each table's files hold."""

    files: dict[str, list[Path]]
    rows: dict[str, int]


def group_cpu(leader: int) -> float:
    """CPU seconds (user and system) used so far by the processes of ``leader``'s process group: a side's
    JVM, its Python driver and, for a runner job, the ``sql-runner`` process that started them."""
    ticks = sum(int(fields[11]) + int(fields[12]) for _, fields in group_processes(leader))
    return ticks / os.sysconf("SC_CLK_TCK")


def feed(side: Side, tranche: Tranche, timeout: float) -> float:
    """Hand ``tranche`` to ``side``; the seconds its micro-batches took to process it. The CPU its
    processes used meanwhile (until the round is over, so with a second or two of idle triggers) is
    left in ``side.cpu``."""
    assert side.process is not None
    since = last_batch(side)
    before = group_cpu(side.process.pid)
    names = set(link({side.inputs[table]: files for table, files in tranche.files.items()}))
    progress, _ = wait_for(side, names, since, timeout)
    side.batches = [p.get("input-rows") or 0 for p in progress]
    side.cpu = group_cpu(side.process.pid) - before
    return batch_seconds(progress)


def launch(sides: list[Side], warm_up: Tranche, timeout: float, *, timed: bool = True) -> dict[str, float]:
    """Start each side on the warm-up tranche: one after another, and the seconds from launch to that
    tranche processed, per side; or, not ``timed``, all at once (sooner; their start-up times would
    measure each other)."""
    took: dict[str, float] = {}
    waiting: list[tuple[Side, set[str]]] = []
    for side in sides:
        for table in warm_up.files:
            side.inputs[table].mkdir(parents=True, exist_ok=True)
        names = set(link({side.inputs[table]: files for table, files in warm_up.files.items()}))
        side.start()
        waiting.append((side, names))
        if timed:
            _, done = wait_for(side, names, None, timeout)
            took[side.name] = done - side.started
    if not timed:
        for side, names in waiting:
            wait_for(side, names, None, timeout)
    return took
