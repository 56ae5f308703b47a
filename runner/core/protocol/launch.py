"""A job that judges its own manifest before it starts, and the runner that decides on the judgement.

A new or changed query must be analysed by Spark before the runner can decide what deploying it
means (checked as ``validate`` checks it, compared with the deployed query). Rather than start a
Spark of its own for that and throw it away, the runner launches the job at once with the desired
manifest (``JobSpec.judging``); the job's driver analyses it and writes a :class:`Verdict`, then
waits. The runner reads the verdict, decides (``runner/deploy/plan.py``), records the decision and
carries it out; the job's last step is a :class:`Release`: start, from the final spec the runner
wrote, or do nothing and exit. Until it is released the job writes nothing but its verdict, so a
refusal changes nothing, and no target counts it as the job's running application.

``launches/<name>/<launch-id>/verdict.json`` has one writer, the judging driver
(``runner/analysis/driver.py``), and one reader, the runner (``runner/deploy/launches.py``);
``release.json`` the other way round.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from runner.core import layout
from runner.core.bucket import Bucket
from runner.core.errors import Problem
from runner.core.manifest import Manifest
from runner.core.placeholders import Sources
from runner.core.protocol.document import Document, read
from runner.core.protocol.jobspec import Judging
from runner.core.querydiff import QueryDiff
from runner.core.starts import SourceTable
from runner.core.tables import TableDef


class Verdict(Document):
    """What the job's driver found: the problems that make the manifest undeployable, or the tables it uses,
    the sources it reads and how its query differs from the deployed one."""

    launch_id: str
    at: str
    seconds: float  # the analysis, from the driver's Spark being up to the verdict
    problems: tuple[Problem, ...] = ()
    tables: tuple[TableDef, ...] = ()  # every table read or written
    sources: tuple[SourceTable, ...] = ()  # the tables read as streams
    diff: QueryDiff | None = None  # None: nothing deployed to compare with
    failure: str | None = None  # the analysis itself failed (not the manifest's fault): why

    @property
    def ok(self) -> bool:
        return not self.problems and self.failure is None


class JudgeRequest(Document):
    """A manifest the team's session is asked to judge on its warm Spark (``POST /judge`` on its control endpoint),
    for a target whose jobs cannot judge their own (YARN): answered with a :class:`Verdict`, as a judging
    driver's. ``sql-runner deploy`` asks (``runner/targets/session.py``), the session answers
    (``runner/session/endpoint.py``)."""

    manifest: Manifest  # merged, without meta, placeholders unresolved (the session resolves them)
    tables: tuple[TableDef, ...]  # the project's tables, as the caller sees them
    judging: Judging  # the manifest's file, and the deployed query it is compared with
    placeholders: Sources = Sources()  # where the deploy's jobs look placeholders up beyond their environment


class Release(Document):
    """The runner's answer: ``start`` from the final spec at ``spec_key``, or exit having done nothing."""

    launch_id: str
    start: bool
    spec_key: str | None = None  # the run's spec (with its meta, checkpoint and where sources start)
    reason: str = ""  # why it is not started


def write_verdict(bucket: Bucket, name: str, verdict: Verdict) -> None:
    bucket.write(layout.launch_verdict(name, verdict.launch_id), verdict.encode())


def read_verdict(bucket: Bucket, name: str, launch_id: str) -> Verdict | None:
    return read(bucket, layout.launch_verdict(name, launch_id), Verdict)


def write_release(bucket: Bucket, name: str, release: Release) -> None:
    bucket.write(layout.launch_release(name, release.launch_id), release.encode())


def read_release(bucket: Bucket, name: str, launch_id: str) -> Release | None:
    return read(bucket, layout.launch_release(name, launch_id), Release)


def clear_launch(bucket: Bucket, name: str, launch_id: str) -> None:
    """Delete what a launch and the runner said to each other, once the job has its answer (what was decided
    on the verdict is in the decision's history)."""
    bucket.delete_prefix(layout.launch(name, launch_id))


def poll(find: Callable[[], Document | None], *, deadline: float, every: float, alive: Callable[[], bool]):
    """``find()`` until it gives a document, ``alive()`` turns False or ``deadline`` (time.monotonic()) passes;
    None then."""
    while True:
        found = find()
        if found is not None:
            return found
        if time.monotonic() >= deadline or not alive():
            return find()
        time.sleep(every)
