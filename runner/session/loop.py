"""The session's control loop: keep the hosted queries where the desired manifests say.

Every ``poll`` seconds it:

1. lists the desired manifests (the project folder's files, or the manifests bucket's
   ``manifests/`` keys with their ETags). An unchanged listing costs nothing more; on a
   change, each session-mode manifest whose content (merged over the template, with the
   definitions of the tables it uses) changed is deployed through the same ``Deployer``
   as ``sql-runner deploy`` (prepare, ``plan_one``, steps, executor) with this session
   as the target: new -> start; changed -> stop with a savepoint, then restore or start
   the next version; gone -> stop with a savepoint and mark removed. An invalid manifest
   is reported (``errors/<name>.json``, the session's health and log) and changes nothing;
2. answers requests through the store: start a job spec, stop a query, stop the session;
3. supervises the queries (``QueryHost.supervise``: restarts with backoff, parking) and
   records what it did in each job's history;
4. publishes its health.

A query stopped from outside (``sql-runner stop``) or parked stays stopped until its
manifest changes (``session/held.json``, so a restarted session keeps it stopped too).
"""

from __future__ import annotations

import hashlib
import json
import queue
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from runner.authoring.project import Project, load_project
from runner.core import layout
from runner.core.bucket import Bucket
from runner.core.errors import UserError
from runner.core.jobspec import JobSpec
from runner.deploy.deployer import Deployer
from runner.deploy.executor import taken_summary
from runner.deploy.inputs import Prepared
from runner.session.bounded import TimedOut, within
from runner.session.host import Event, QueryHost
from runner.state import records
from runner.state.desired import sync_desired
from runner.state.lease import LeaseHeld
from runner.state.store import Store
from runner.targets.base import JobIdentity, Launch

Log = Callable[[str], None]
HEARTBEAT_SECONDS = 5.0


class Desired:
    """Where the desired manifests come from: a project folder, or the manifests bucket.

    The bucket's manifests are copied into one folder kept for the session's life, so
    relative paths in their DDL resolve the same way on every reload (a new folder each
    time would make every table look changed). Only the keys whose ETag changed since the
    last copy are read again, so a change to one manifest costs one GET, not one per file.
    """

    def __init__(self, folder: Path | None = None, bucket: Bucket | None = None):
        self.folder = folder
        self.bucket = bucket
        self._copy = Path(tempfile.mkdtemp(prefix="sql-runner-session-")) if folder is None else None
        self._copied: dict[str, str] = {}  # key -> the ETag of the copy in the folder

    def describe(self) -> str:
        if self.folder is not None:
            return f"{self.folder / 'manifests'}"
        assert self.bucket is not None
        return self.bucket.uri(layout.DESIRED_PREFIX)

    def listing(self) -> dict[str, str]:
        """Every desired file with a tag that changes with its content; cheap (no file is read)."""
        if self.folder is not None:
            found = {}
            for path in sorted((self.folder / "manifests").rglob("*")):
                if path.is_file():
                    stat = path.stat()
                    found[path.relative_to(self.folder).as_posix()] = f"{stat.st_mtime_ns}-{stat.st_size}"
            return found
        assert self.bucket is not None
        return self.bucket.listing(layout.DESIRED_PREFIX)

    def load(self, listing: dict[str, str]) -> Project:
        """The desired project: the folder, or the session's copy of the bucket's manifests brought up
        to ``listing`` (this round's ``listing()``)."""
        if self.folder is not None:
            return load_project(self.folder)
        assert self.bucket is not None and self._copy is not None
        sync_desired(self.bucket, self._copy, listing, self._copied)
        return load_project(self._copy)


class Session:
    def __init__(
        self,
        deployer: Deployer,
        host: QueryHost,
        desired: Desired,
        *,
        team: str,
        run_id: str,
        poll: float,
        env: Mapping[str, str],
        log: Log,
    ):
        self.deployer = deployer
        self.host = host
        self.desired = desired
        self.store: Store = deployer.store
        self.bucket = self.store.manifests
        self.team = team
        self.run_id = run_id
        self.poll = poll
        self.env = env
        self.log = log
        self.started = time.monotonic()
        self.started_at = datetime.now(UTC).isoformat(timespec="seconds")
        self.listing: dict[str, str] | None = None
        self.applied: dict[str, str] = {}  # name -> fingerprint of the manifest last deployed (or refused)
        self.used_tables: dict[str, list[str]] = {}  # name -> definitions of the tables it used
        self.invalid: dict[str, str] = {}  # name or file -> why its manifest is not deployable
        self.held: dict[str, str] = {}  # name -> fingerprint it was held at
        for name, entry in self._read_held().items():
            self.held[name] = entry["fingerprint"]
            self.used_tables[name] = entry["tables"]
        self.retry: set[str] = set()  # names to deploy again on the next round (lease busy)
        self.events: queue.Queue[Event] = queue.Queue()  # from the supervisor thread to the loop
        self._last_health: tuple[float, str] | None = None
        self._project: Project | None = None
        self.stopping = False
        self.control_url: str | None = None  # the control endpoint's address (its token is not published here)

    # ---- the loop ------------------------------------------------------------------------

    def run(self, should_stop: Callable[[], bool]) -> None:
        """Reconcile until asked to stop (the session stop request, or ``should_stop``).

        Supervision (progress, failures, restarts) and health run on their own thread, so a
        long reconcile (a session starting fifty queries) never holds them up.
        """
        self.publish_health("running", force=True)
        done = threading.Event()
        supervisor = threading.Thread(target=self._supervise, args=(done,), name="sql-runner-supervisor", daemon=True)
        supervisor.start()
        while not should_stop():
            started = time.monotonic()
            try:
                if self._stop_requested():
                    break
                self.round()
            except Exception as error:  # noqa: BLE001 - one bad round must not end the session
                self.log(f"session round failed: {type(error).__name__}: {error}")
            time.sleep(max(0.0, self.poll - (time.monotonic() - started)))
        done.set()
        supervisor.join()
        self.shutdown()

    def round(self) -> None:
        """One pass: desired changes, requests, and what the supervisor reported."""
        listing = self.desired.listing()
        if listing != self.listing or self.retry:
            changed = listing != self.listing
            self.listing = listing
            self.reconcile(full=changed)
        self.answer_requests()
        while not self.events.empty():
            self._on_event(self.events.get())

    def _supervise(self, done: threading.Event) -> None:
        """The supervisor thread: the host's supervision and the session's health, every poll."""
        while not done.wait(self.poll):
            try:
                for event in self.host.supervise():
                    self._record_event(event)
                    self.events.put(event)
                self.publish_health("running")
            except Exception as error:  # noqa: BLE001 - supervision carries on
                self.log(f"supervision failed: {type(error).__name__}: {error}")

    # ---- deploying desired changes ---------------------------------------------------------

    def reconcile(self, *, full: bool) -> None:
        """Deploy every session manifest whose content changed, and remove the ones that are gone."""
        if full:
            try:
                assert self.listing is not None
                self._project = self.desired.load(self.listing)
                self.invalid.pop("(project)", None)
            except UserError as error:
                self._report_invalid("(project)", error)
                return
        project = self._project
        assert project is not None
        self.deployer.project = project
        retry, self.retry = self.retry, set()
        present: set[str] = set()
        for path in project.manifest_paths():
            try:
                manifest = project.load_manifest(path)
            except UserError as error:
                self._report_invalid(path.stem, error, file=project.display(path))
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
                self.log(f"[{manifest.name}] held stopped until its manifest changes")
                continue
            self.held.pop(manifest.name, None)
            self._deploy(manifest.name, path, fingerprint)
        for name in records.deployed_names(self.bucket):
            if name in present:
                continue
            record, _ = records.read_deployed(self.bucket, name)
            if record is None or record.removed or record.target != self.host.kind:
                continue
            self._deploy(name, None, None)
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

    def _deploy(self, name: str, path: Path | None, fingerprint: str | None) -> None:
        started = time.monotonic()
        try:
            prepared = self._prepare(name, path) if path is not None else None
            if prepared is not None:
                self._check_session_properties(prepared.manifest, prepared.file)
                self.used_tables[name] = sorted(t.name for t in prepared.tables)
                fingerprint = self._fingerprint(prepared.manifest.to_dict(), name, self.deployer.project)
            decision = self.deployer.decide(name, prepared)
            if decision.action.kind != "nothing":
                self.log(f"[{name}] {decision.action.summary}")
                self.deployer.carry_out(decision, purpose="session")
                self.log(f"[{name}] done in {time.monotonic() - started:.2f}s")
        except LeaseHeld as error:
            self.log(f"[{name}] {error.problems[0].render()}; trying again next round")
            self.retry.add(name)
            return
        except UserError as error:
            self._report_invalid(name, error)
        else:
            self.invalid.pop(name, None)
            self.bucket.delete(layout.deploy_error(name))
        if fingerprint is not None:
            self.applied[name] = fingerprint
        else:
            self.applied.pop(name, None)

    def _prepare(self, name: str, path: Path) -> Prepared:
        """Check the manifest (analysing its query runs its code snippet) within the build timeout, so a
        snippet that never returns is reported instead of holding up every other change."""
        try:
            return within(
                self.host.protection.build_timeout, lambda: self.deployer.prepare(path), f"sql-runner-prepare-{name}"
            )
        except TimedOut:
            raise self.host.build_timed_out(name) from None

    def _check_session_properties(self, manifest, file: str) -> None:
        """A session query can set only SQL properties: the rest belong to the whole application."""
        for key in manifest.spark_properties:
            if not key.startswith("spark.sql.") or not self.host.spark.conf.isModifiable(key):
                raise UserError.of("SESSION_PROPERTY_NOT_PER_QUERY", file=file, field=f"sparkProperties.{key}", key=key)

    def _report_invalid(self, name: str, error: UserError, *, file: str | None = None) -> None:
        lines = [problem.render() for problem in error.problems]
        if self.invalid.get(name) != "\n".join(lines):
            for line in lines:
                self.log(f"not deployed: {line}")
        self.invalid[name] = "\n".join(lines)
        if name != "(project)":
            body = {"name": name, "file": file, "at": datetime.now(UTC).isoformat(), "problems": lines}
            self.bucket.write(layout.deploy_error(name), json.dumps(body, indent=2).encode())

    # ---- requests through the store -------------------------------------------------------

    def answer_requests(self) -> None:
        for key in self.bucket.keys(layout.CONTROL_PREFIX):
            name = key.removeprefix(layout.CONTROL_PREFIX).split("/", 1)[0]
            if key == layout.stop_request(name):
                self._answer_stop(name)
            elif key == layout.start_request(name):
                self._answer_start(name)

    def _answer_stop(self, name: str) -> None:
        hosted = self.host.hosted.get(name)
        if hosted is None or not hosted.active:
            return  # not ours: an application-mode job answers its own requests
        blob = self.bucket.read(layout.stop_request(name))
        if blob is None:
            return
        request = json.loads(blob.text)
        if request.get("version") not in (None, hosted.identity.version):
            return
        job = self.host.find(self.team, name)
        assert job is not None
        if request.get("force"):
            self.host.stop(job, force=True)
        else:
            self.host.stop_gracefully(job, timeout=self.deployer.settings.stop_timeout)
        self.bucket.write(
            layout.stop_acknowledged(name),
            json.dumps(
                {"id": request.get("id"), "version": hosted.identity.version, "run-id": hosted.identity.run_id}
            ).encode(),
        )
        fingerprint = self.applied.get(name)
        if fingerprint is not None:
            self.held[name] = fingerprint
            self._write_held()
        self.log(f"[{name}] stopped on request; held until its manifest changes")

    def _answer_start(self, name: str) -> None:
        blob = self.bucket.read(layout.start_request(name))
        if blob is None:
            return
        self.bucket.delete(layout.start_request(name))
        request = json.loads(blob.text)
        answer: dict[str, Any] = {"id": request.get("id")}
        try:
            spec = JobSpec.from_json(request["spec"])
            identity = JobIdentity(self.team, name, spec.manifest.version, spec.run_id)
            job = self.host.submit(Launch(identity, spec, [], self.env))
            answer.update({"job": job.job_id, "detail": job.detail})
            self.held.pop(name, None)
            self._write_held()
        except UserError as error:
            answer["error"] = error.problems[0].render()
        except Exception as error:  # noqa: BLE001 - answered, so the requester is not left waiting
            answer["error"] = f"{type(error).__name__}: {error}"
        self.bucket.write(layout.start_answer(name), json.dumps(answer).encode())

    def _stop_requested(self) -> bool:
        blob = self.bucket.read(layout.SESSION_STOP)
        if blob is None:
            return False
        request = json.loads(blob.text)
        return request.get("run-id") in (None, self.run_id)

    # ---- supervision and health ------------------------------------------------------------

    def _record_event(self, event: Event) -> None:
        """What the host did on its own, in the job's history."""
        self.deployer.record(
            event.name,
            event.kind,
            event.summary,
            list(event.reasons),
            event.version,
            {"session-run": self.run_id},
            {"result": "failed" if event.kind in ("failing", "parked", "refused") else "ok"},
            time.monotonic(),
            target=self.host.kind,
        )

    def _on_event(self, event: Event) -> None:
        """A parked job is held until its manifest changes; a refused restore is planned again at once."""
        if event.kind == "parked":
            fingerprint = self.applied.get(event.name)
            if fingerprint is not None:
                self.held[event.name] = fingerprint
                self._write_held()
        if event.kind == "refused":
            self.retry.add(event.name)
            self.applied.pop(event.name, None)

    def publish_health(self, state: str, *, force: bool = False) -> None:
        counts = self.host.counts()
        invalid = dict(self.invalid)  # a copy: the loop thread updates it
        summary = json.dumps([state, counts, sorted(invalid)])
        now = time.monotonic()
        last = self._last_health
        if not force and last and last[1] == summary and now - last[0] < HEARTBEAT_SECONDS:
            return
        health = {
            "state": state,
            "team": self.team,
            "run-id": self.run_id,
            "started-at": self.started_at,
            "updated-at": datetime.now(UTC).isoformat(timespec="milliseconds"),
            "uptime-seconds": round(now - self.started, 1),
            "queries": counts,
            "invalid": dict(sorted(invalid.items())),
            "control-url": self.control_url,
        }
        self.bucket.write(layout.SESSION_HEALTH, json.dumps(health, indent=2).encode())
        self._last_health = (now, summary)

    def _read_held(self) -> dict[str, dict[str, Any]]:
        blob = self.bucket.read(layout.SESSION_HELD)
        return json.loads(blob.text) if blob else {}

    def _write_held(self) -> None:
        """Persist the held queries, with the tables their fingerprint covers (a restarted session reads them)."""
        held = {
            name: {"fingerprint": fingerprint, "tables": self.used_tables.get(name, [])}
            for name, fingerprint in sorted(self.held.items())
        }
        if held != self._read_held():
            self.bucket.write(layout.SESSION_HELD, json.dumps(held, indent=2).encode())

    # ---- stopping the session --------------------------------------------------------------

    def shutdown(self) -> None:
        """Stop every query between micro-batches with a savepoint, then say the session stopped."""
        self.stopping = True
        self.publish_health("stopping", force=True)
        for name, hosted in sorted(self.host.hosted.items()):
            if not hosted.active:
                continue
            record, _ = records.read_deployed(self.bucket, name)
            job = self.host.find(self.team, name)
            if record is None or job is None:
                continue
            started = time.monotonic()
            try:
                taken = self.deployer.executor.stop_with_savepoint(record, job, reason="session stopped")
                outcome = {"result": "ok", "savepoint": taken_summary(taken)}
            except Exception as error:  # noqa: BLE001 - keep stopping the others
                outcome = {"result": "failed", "error": f"{type(error).__name__}: {error}"}
            self.deployer.record(
                name,
                "stop",
                "session stopped: stop with savepoint",
                ["sql-runner session stop"],
                record.version,
                {"session-run": self.run_id},
                outcome,
                started,
                target=self.host.kind,
            )
        blob = self.bucket.read(layout.SESSION_STOP)
        request = json.loads(blob.text) if blob else {}
        self.publish_health("stopped", force=True)
        self.bucket.write(
            layout.SESSION_STOPPED,
            json.dumps({"id": request.get("id"), "run-id": self.run_id, "at": datetime.now(UTC).isoformat()}).encode(),
        )
        self.bucket.delete(layout.SESSION_STOP)
