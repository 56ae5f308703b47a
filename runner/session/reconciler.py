"""The session's reconciler: deploy what the desired manifests say, through the same ``Deployer`` as
``sql-runner deploy``, with the session as the target.

On a change of the desired listing, each session-mode manifest whose content (merged over the
template, with the definitions of the tables it uses) changed is deployed: new -> start; changed ->
stop with a savepoint, then restore or start the next version; gone -> stop with a savepoint and mark
removed. An invalid manifest is reported (``errors/<name>.json``, the session's health and log) and
changes nothing. A query stopped from outside (``sql-runner stop``) or parked is *held*: it stays
stopped until its manifest changes, and the held queries are kept in ``session/held.json`` so a
restarted session keeps them stopped too.

The reconciler runs on the session's loop thread only; the health publisher (another thread) reads
``invalid_now()``, a copy taken under a lock.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from runner.authoring.project import Project
from runner.core import layout, logs
from runner.core.errors import UserError
from runner.core.manifest import Manifest
from runner.core.protocol.control import DeployError, write_deploy_error
from runner.core.protocol.session import HeldQueries, HeldQuery, read_held, write_held
from runner.deploy.deployer import Deployer
from runner.deploy.inputs import Prepared
from runner.state import records
from runner.state.desired import Desired
from runner.state.lease import LeaseHeld

log = logging.getLogger(__name__)

PROJECT = "(project)"  # what ``invalid`` calls a project that does not load


class Reconciler:
    def __init__(
        self,
        deployer: Deployer,
        desired: Desired,
        *,
        target_kind: str,
        prepare: Callable[[Project, Path], Prepared],
        check: Callable[[Manifest, str], None],
    ):
        """``prepare(project, path)``: load and analyse one manifest (UserError if it is not deployable);
        ``check(manifest, file)``: what else the session requires of it (UserError if not met)."""
        self.deployer = deployer
        self.desired = desired
        self.bucket = deployer.store.manifests
        self.target_kind = target_kind  # the session's: only jobs deployed there are removed from it
        self.prepare = prepare
        self.check = check
        self.listing: dict[str, str] | None = None
        self.project: Project | None = None
        self.applied: dict[str, str] = {}  # name -> fingerprint of the manifest last deployed (or refused)
        self.used_tables: dict[str, list[str]] = {}  # name -> definitions of the tables it used
        self.held: dict[str, str] = {}  # name -> fingerprint it was held at
        for name, entry in read_held(self.bucket).queries.items():
            self.held[name] = entry.fingerprint
            self.used_tables[name] = list(entry.tables)
        self.retry: set[str] = set()  # names to deploy again on the next round (lease busy, refused restore)
        self._invalid: dict[str, str] = {}  # name or file -> why its manifest is not deployable
        self._invalid_lock = threading.Lock()

    # ---- one round -------------------------------------------------------------------------

    def round(self) -> None:
        """Deploy what changed since the last round (and what is to be retried)."""
        listing = self.desired.listing()
        if listing != self.listing or self.retry:
            changed = listing != self.listing
            self.listing = listing
            self.reconcile(full=changed)

    def reconcile(self, *, full: bool) -> None:
        """Deploy every session manifest whose content changed, and remove the ones that are gone."""
        if full:
            try:
                assert self.listing is not None
                self.project = self.desired.load(self.listing)
                self._valid(PROJECT)
            except UserError as error:
                self.report_invalid(PROJECT, error)
                return
        project = self.project
        assert project is not None
        retry, self.retry = self.retry, set()
        present: set[str] = set()
        for path in project.manifest_paths():
            try:
                manifest = project.load_manifest(path)
            except UserError as error:
                self.report_invalid(path.stem, error, file=project.display(path))
                present.add(path.stem)
                continue
            present.add(manifest.name)
            if manifest.mode != "session":
                continue
            fingerprint = self._fingerprint(manifest.to_dict(), manifest.name, project)
            if self.applied.get(manifest.name) == fingerprint and manifest.name not in retry:
                continue
            if self.held.get(manifest.name) == fingerprint:
                self.applied[manifest.name] = fingerprint
                log.info("held stopped until its manifest changes", extra=logs.job(manifest.name))
                continue
            self.held.pop(manifest.name, None)
            self._deploy(project, manifest.name, path, fingerprint)
        for name in records.deployed_names(self.bucket):
            if name in present:
                continue
            record, _ = records.read_deployed(self.bucket, name)
            if record is None or record.removed or record.target != self.target_kind:
                continue
            self._deploy(project, name, None, None)
        self._write_held()

    def _fingerprint(self, manifest: dict[str, Any], name: str, project: Project) -> str:
        """The manifest's content and the definitions of the tables it used when last deployed."""
        tables = {t.name: t for t in project.catalog.tables}
        used = [
            json.dumps(tables[n].definition(), sort_keys=True) if n in tables else f"missing {n}"
            for n in self.used_tables.get(name, [])
        ]
        text = json.dumps({"manifest": manifest, "tables": used}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def _deploy(self, project: Project, name: str, path: Path | None, fingerprint: str | None) -> None:
        started = time.monotonic()
        try:
            prepared = self.prepare(project, path) if path is not None else None
            if prepared is not None:
                self.check(prepared.manifest, prepared.file)
                self.used_tables[name] = sorted(t.name for t in prepared.tables)
                fingerprint = self._fingerprint(prepared.manifest.to_dict(), name, project)
            decision = self.deployer.decide(name, prepared)
            if decision.action.kind != "nothing":
                log.info(f"{decision.action.summary}", extra=logs.job(name))
                self.deployer.carry_out(decision, purpose="session")
                log.info(f"done in {time.monotonic() - started:.2f}s", extra=logs.job(name))
        except LeaseHeld as error:
            log.info(f"{error.problems[0].render()}; trying again next round", extra=logs.job(name))
            self.retry.add(name)
            return
        except UserError as error:
            self.report_invalid(name, error)
        else:
            self._valid(name)
            self.bucket.delete(layout.deploy_error(name))
        if fingerprint is not None:
            self.applied[name] = fingerprint
        else:
            self.applied.pop(name, None)

    # ---- what is not deployable ------------------------------------------------------------

    def report_invalid(self, name: str, error: UserError, *, file: str | None = None) -> None:
        lines = [problem.render() for problem in error.problems]
        with self._invalid_lock:
            said = self._invalid.get(name)
            self._invalid[name] = "\n".join(lines)
        if said != "\n".join(lines):
            for line in lines:
                log.info(f"not deployed: {line}")
        if name != PROJECT:
            write_deploy_error(self.bucket, DeployError(name=name, file=file, problems=lines))

    def _valid(self, name: str) -> None:
        with self._invalid_lock:
            self._invalid.pop(name, None)

    def invalid_now(self) -> dict[str, str]:
        """What is not deployed because it is invalid (name or file -> why), sorted; safe from any thread."""
        with self._invalid_lock:
            return dict(sorted(self._invalid.items()))

    # ---- held queries ----------------------------------------------------------------------

    def hold(self, name: str) -> None:
        """Keep ``name`` stopped until its manifest changes (stopped on request, or parked)."""
        fingerprint = self.applied.get(name)
        if fingerprint is not None:
            self.held[name] = fingerprint
            self._write_held()

    def release(self, name: str) -> None:
        """``name`` was started on request: it is no longer held."""
        if self.held.pop(name, None) is not None:
            self._write_held()

    def plan_again(self, name: str) -> None:
        """Decide ``name`` again next round, whatever its manifest (Spark refused its restored state)."""
        self.retry.add(name)
        self.applied.pop(name, None)

    def _write_held(self) -> None:
        """Persist the held queries, with the tables their fingerprint covers (a restarted session reads them)."""
        held = HeldQueries(
            queries={
                name: HeldQuery(fingerprint=fingerprint, tables=self.used_tables.get(name, []))
                for name, fingerprint in sorted(self.held.items())
            }
        )
        if held.queries != read_held(self.bucket).queries:
            write_held(self.bucket, held)
