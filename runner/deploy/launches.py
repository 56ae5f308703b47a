"""Jobs that judge their own manifests: launched before the decision, released or sent away after it.

A new or changed query needs Spark's judgement before the runner can decide. Where the job's own
driver can give it (``Target.judges``), the runner starts the job at once with the desired manifest
instead of starting a Spark of its own for the analysis: one JVM per launch, not two. The driver
judges (``runner/analysis/driver.py``) and writes its verdict; :meth:`Launcher.verdict` waits for it;
the runner decides and records the decision; then :meth:`Launcher.release` hands the job its final
spec, or :meth:`Launcher.send_away` tells it to exit having done nothing
(``runner/core/protocol/launch.py``).
"""

from __future__ import annotations

import importlib.util
import logging
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from runner.core import layout, logs
from runner.core.catalog import Catalog
from runner.core.errors import UserError
from runner.core.identity import JobIdentity
from runner.core.manifest import Manifest
from runner.core.protocol.deployed import DeploymentRecord
from runner.core.protocol.jobspec import JobSpec, Judging
from runner.core.protocol.launch import Release, Verdict, clear_launch, poll, read_verdict, write_release
from runner.deploy import submit
from runner.deploy.settings import Settings
from runner.targets.base import JudgingTarget, Launch, Prelaunched, RunningJob

log = logging.getLogger(__name__)

VERDICT_WAIT = 600.0  # seconds a driver may take to start and judge (a cluster may queue it)
RELEASE_WAIT = 600.0  # seconds a judged driver waits for its release beyond the stop timeout
EXIT_WAIT = 30.0  # seconds a driver sent away has to exit before it is killed
GROUP_EXIT_WAIT = 5.0  # seconds the rest of its processes have to follow it before they are killed


def driver_entry_point() -> Path:
    """The ``spark-submit`` script of a judging driver (found without importing it: it imports pyspark)."""
    spec = importlib.util.find_spec("runner.analysis.driver")
    assert spec is not None and spec.origin, "runner.analysis.driver is part of the runner"
    return Path(spec.origin)


@dataclass
class Launched:
    """One job launched to judge its manifest, and what became of it."""

    name: str
    launch_id: str
    target: JudgingTarget
    started: Prelaunched
    verdict: Verdict | None = None
    settled: bool = False  # released or sent away
    began: float = field(default_factory=time.monotonic)

    def describe(self) -> str:
        """How the history names the judgement."""
        seconds = f", {self.verdict.seconds:.1f} s of analysis" if self.verdict is not None else ""
        return f"the job's own driver (launch {self.launch_id}{seconds})"


class Launcher:
    """Launches, waits for, releases and sends away jobs judging their own manifests."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.store = settings.store
        self.launched: dict[str, Launched] = {}
        # launching is allowed only inside the deployer's ``with`` block, whose end sends away what the
        # decisions did not start (``Deployer.__exit__``): no launched driver outlives its command
        self.open = False

    def can_judge(self, manifest: Manifest) -> bool:
        """The manifest's job starts on a target whose drivers judge their manifests."""
        try:
            target = self.settings.targets.pick(manifest)
        except UserError:
            return False
        return bool(getattr(target, "judges", False))

    def launch(
        self, manifest: Manifest, file: str, catalog: Catalog, record: DeploymentRecord | None, *, among: int = 1
    ) -> Launched:
        """Start ``manifest``'s job (merged, without meta) to judge it against ``record``, the deployed one;
        ``among``: the launches of this deploy, whose decisions are carried out one after another (each may
        stop a job, waiting up to the stop timeout) before the last one is released."""
        if not self.open:
            raise RuntimeError("a job judging its manifest is launched only inside `with deployer:`")
        settings, store = self.settings, self.store
        name = manifest.name
        target = settings.targets.pick(manifest)
        assert getattr(target, "judges", False), f"{target.kind} jobs do not judge their manifests"
        launch_id = uuid.uuid4().hex[:12]
        judging = Judging.against(file, record, wait=settings.stop_timeout * among + RELEASE_WAIT)
        spec = JobSpec(
            manifest=manifest,
            catalog=catalog,
            checkpoint=store.checkpoints.uri(layout.version_checkpoints(name, 0)),
            dead_letter=store.checkpoints.uri(layout.dead_letter(name)),
            once=settings.once,
            store=store.describe(),
            placeholders=settings.placeholders,
            launch_id=launch_id,
            judging=judging,
        )
        key = layout.launch_spec(name, launch_id)
        store.manifests.write(key, spec.encode(line=True))
        identity = JobIdentity(team=settings.team, name=name, version=0, launch=launch_id)
        args = submit.application_command(
            driver_entry_point(),
            ["--spec-uri", store.manifests.uri(key)],
            master=target.master(),
            env=settings.env,
            app_name=identity.app_name,
            properties=submit.launch_properties(spec),
            options=target.submit_options(identity, manifest.restart_strategy),
            spark_submit=settings.spark_submit,
        )
        log.info(f"starting its job on {target.kind} to judge the manifest there", extra=logs.job(name))
        started = target.prelaunch(Launch(identity, spec, args, submit.environment(settings.env)))
        launched = Launched(name, launch_id, target, started)
        self.launched[name] = launched
        return launched

    def verdict(self, launched: Launched, wait: float = VERDICT_WAIT) -> Verdict:
        """The launched driver's verdict; UserError when it ends or takes ``wait`` seconds without one."""
        bucket = self.store.manifests
        every = 0.1 if bucket.describe().kind == "local" else 0.5
        found = poll(
            lambda: read_verdict(bucket, launched.name, launched.launch_id),
            deadline=launched.began + wait,
            every=every,
            alive=launched.started.alive,
        )
        if found is None:
            code = launched.started.process.poll()
            why = f"exited with code {code}" if code is not None else f"took over {wait:.0f} s"
            self.send_away(launched, "no verdict")
            raise UserError.of("JUDGING_FAILED", name=launched.name, why=why, log=launched.started.log or "above")
        launched.verdict = found
        log.info(
            f"judged by its job's driver in {time.monotonic() - launched.began:.1f} s "
            f"({found.seconds:.1f} s of analysis)",
            extra=logs.job(launched.name),
        )
        return found

    def release(self, launched: Launched, spec: JobSpec, spec_key: str, identity: JobIdentity) -> RunningJob:
        """Hand the judged job its final ``spec`` (written at ``spec_key``): it starts as ``identity``."""
        assert spec.launch_id == launched.launch_id
        if not launched.started.alive():  # it waited longer than it was told to, or died
            launched.settled = True
            code = launched.started.process.poll()
            raise UserError.of(
                "JUDGING_FAILED",
                name=launched.name,
                why=f"exited (code {code}) before it was released, after judging",
                log=launched.started.log or "above",
            )
        write_release(
            self.store.manifests, launched.name, Release(launch_id=launched.launch_id, start=True, spec_key=spec_key)
        )
        launched.settled = True
        return launched.target.adopt(launched.started, identity)

    def send_away(self, launched: Launched, reason: str, *, wait: bool = True) -> None:
        """Tell the judged job to exit having done nothing (no-op for one already released or sent away);
        killed if it has not within ``EXIT_WAIT`` seconds (``wait``: wait for that here)."""
        if launched.settled:
            return
        release = Release(launch_id=launched.launch_id, start=False, reason=reason)
        write_release(self.store.manifests, launched.name, release)
        if wait:
            self._see_off(launched)

    def _see_off(self, launched: Launched) -> None:
        """Wait for a job sent away to exit (killed after ``EXIT_WAIT`` seconds); what it was told goes."""
        launched.settled = True
        try:
            launched.started.process.wait(EXIT_WAIT)
        except subprocess.TimeoutExpired:
            launched.started.kill()
        launched.started.wait_group_gone(GROUP_EXIT_WAIT)
        clear_launch(self.store.manifests, launched.name, launched.launch_id)

    def send_all_away(self, reason: str) -> None:
        """Every launch not released yet exits, having done nothing (told all at once, then seen off)."""
        away = [launched for launched in self.launched.values() if not launched.settled]
        for launched in away:
            self.send_away(launched, reason, wait=False)
        for launched in away:
            self._see_off(launched)
