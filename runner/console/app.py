"""The web console: pages, their JSON, actions and ``/metrics``, as Starlette routes.

``sql-runner console`` serves them on their own (``runner/cli/console.py``); the session serves them
beside its control endpoint (``runner/session/endpoint.py``). Both read the state store (local or
S3), so application-mode jobs and session queries show alike.

Pages are rendered on the server by Jinja2 with autoescaping, so whatever a user wrote (a manifest's
description, its SQL, a dead letter) is shown as text; the one script (``static/console.js``)
refreshes them from the JSON routes and writes only text nodes. Nothing is loaded from elsewhere.
Nothing changes state on a GET: the actions (stop with savepoint, take a savepoint, deploy the
desired manifest) are POSTs, answered only when the console was started with ``--allow-actions``,
each with the query's name typed again as confirmation, and recorded in history under the name of
the token that asked.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from http import HTTPStatus
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from runner.authoring.manifest_file import parse_manifest
from runner.authoring.project import Project
from runner.console import metrics
from runner.console.http import Access, Refused, holder_of, json_of, refusal
from runner.console.overview import Overview, Stall
from runner.console.previews import PreviewRun, PreviewRuns
from runner.console.query import details, log_path, log_tail
from runner.console.signin import SignIns
from runner.core import layout
from runner.core.errors import UserError
from runner.core.manifest import Manifest
from runner.core.protocol.console import ConsoleAccess, read_access
from runner.core.protocol.history import HistoryEntry
from runner.core.protocol.planned import PlannedAction
from runner.core.protocol.preview import PreviewRequest
from runner.deploy.deployer import Deployer
from runner.deploy.status import observe_job
from runner.state import records
from runner.state.desired import Desired
from runner.state.store import Store
from runner.targets.base import Target
from runner.targets.modes import Targets

log = logging.getLogger(__name__)

HERE = Path(__file__).parent
TEMPLATES = Environment(
    loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape(["html"]), auto_reload=False
)
ACCESS_FRESH = 2.0  # seconds a read of the console's tokens is trusted


def session_log(application: Target, team: str) -> Callable[[], Path | None]:
    """Where the team's session application logs, when it runs on this machine (a local target)."""

    def find() -> Path | None:
        job = application.find(team, layout.SESSION_JOB)
        if job is None or not job.detail.startswith("log "):
            return None
        return Path(job.detail.removeprefix("log "))

    return find


class ConsoleSignInPages:
    """The console's sign-in form, and the page that hands a new sign-in's anti-forgery key to its script."""

    def form(self, next_path: str, nonce: str, error: str | None) -> str:
        return TEMPLATES.get_template("login.html").render(next=next_path, nonce=nonce, error=error)

    def signed_in(self, next_path: str, key: str) -> str:
        return TEMPLATES.get_template("signed-in.html").render(next=next_path, key=key)


@dataclass
class PlanAnswer:
    """The plan's verdict on a query's desired manifest, as the console answers it: a planned action, or why
    there is none (``refused``: its problems; ``error``: the analysis failed)."""

    key: str
    answer: dict[str, Any] | None = None  # None while it is computed


class Console:
    """What the console's routes read and do, over one team's state store."""

    def __init__(
        self,
        store: Store,
        targets: Targets,
        team: str,
        *,
        desired: Desired,
        deployer: Callable[[Project | None, str | None], Deployer],
        preview: Callable[[PreviewRequest, PreviewRun], None],
        allow_actions: bool = False,
        stall: Stall | None = None,
        session_log: Callable[[], Path | None] = lambda: None,
        served_by: str = "console",
        sign_ins: SignIns | None = None,
    ):
        self.store, self.targets, self.team = store, targets, team
        self.desired = desired
        self.deployer = deployer  # (project, who asked) -> a deployer over the store and the targets
        self.allow_actions = allow_actions
        self.session_log = session_log
        self.served_by = served_by
        self.sign_ins = sign_ins or SignIns()
        self.overview = Overview(store, targets, team, stall or Stall())
        self.previews = PreviewRuns(preview)
        self._access: tuple[float, Any] = (0.0, None)
        self._verdicts: dict[str, PlanAnswer] = {}
        self._verdicts_lock = threading.Lock()
        self._analysis = threading.Lock()  # one Spark analysis at a time (verdicts, validation)

    # ---- tokens ------------------------------------------------------------------------------

    def tokens(self) -> ConsoleAccess:
        """The console's tokens, read again when older than ``ACCESS_FRESH`` seconds."""
        read_at, access = self._access
        if access is None or time.monotonic() - read_at > ACCESS_FRESH:
            access = read_access(self.store.manifests)
            self._access = (time.monotonic(), access)
        return access

    def holder(self, given: str) -> str | None:
        """The name of the console token ``given`` is (None: none)."""
        return self.tokens().holder(given)

    def access(self, bearer: Callable[[str], str | None] | None = None) -> Access:
        """Who may use the console: its tokens as bearer tokens (and ``bearer``'s too: the session's own),
        and browsers signed in with one of its tokens."""
        return Access(
            holder=lambda given: (bearer(given) if bearer else None) or self.holder(given),
            sign_ins=self.sign_ins,
            holder_of_digest=lambda given: self.tokens().holder_of_digest(given),
            pages=ConsoleSignInPages(),
        )

    # ---- the desired manifests ---------------------------------------------------------------

    def project(self) -> Project:
        return self.desired.load(self.desired.listing())

    def desired_manifest(self, project: Project, name: str) -> tuple[str, Manifest, Path] | None:
        for path in project.manifest_paths():
            if path.name.rsplit(".", 1)[0] == name:
                return project.display(path), project.load_manifest(path), path
        return None

    # ---- one query ---------------------------------------------------------------------------

    def known(self, name: str) -> None:
        if name not in records.deployed_names(self.store.manifests):
            raise Refused(HTTPStatus.NOT_FOUND, f"no query named {name} is deployed")

    def query(self, name: str) -> dict[str, Any]:
        self.known(name)
        at = datetime.now(UTC)
        view = observe_job(self.store, self.targets, self.team, name, at)
        problems: list[str] = []
        desired = None
        try:
            found = self.desired_manifest(self.project(), name)
            desired = (found[0], found[1]) if found is not None else None
        except UserError as error:
            problems = [p.render() for p in error.problems]
        shown = details(self.store, view, desired, at)
        shown["desired_problems"] = problems
        shown["log"] = log_path(view, self.session_log()) is not None
        shown["allow_actions"] = self.allow_actions
        return shown

    def verdict(self, name: str) -> dict[str, Any]:
        """The plan's decision for the desired manifest, with its reasons: computed on a thread (it takes
        Spark), kept until the desired manifest, its tables or the deployed record change."""
        self.known(name)
        project = self.project()
        record, _ = records.read_deployed(self.store.manifests, name)
        assert record is not None
        found = None
        try:
            found = self.desired_manifest(project, name)
        except UserError as error:
            return {"refused": [p.render() for p in error.problems]}
        if found is None:
            summary = "no desired manifest: a whole-project deploy would remove the query"
            return PlannedAction(name=name, decision="remove", summary=summary).model_dump(mode="json", by_alias=True)
        tables = json.dumps([t.model_dump(mode="json") for t in project.catalog.tables], sort_keys=True, default=str)
        text = json.dumps(found[1].to_dict(), sort_keys=True, default=str)
        key = hashlib.sha256(f"{text}|{tables}|{record.version}|{record.run_id}".encode()).hexdigest()
        with self._verdicts_lock:
            known = self._verdicts.get(name)
            if known is not None and known.key == key:
                return known.answer or {"pending": True}
            verdict = PlanAnswer(key)
            self._verdicts[name] = verdict
        threading.Thread(
            target=self._decide, args=(verdict, project, name, found[2]), name="sql-runner-verdict", daemon=True
        ).start()
        return {"pending": True}

    def _decide(self, verdict: PlanAnswer, project: Project, name: str, path: Path) -> None:
        try:
            with self._analysis:
                deployer = self.deployer(project, None)
                decision = deployer.decide(name, deployer.prepare(path))
            verdict.answer = decision.action.planned().model_dump(mode="json", by_alias=True)
        except UserError as error:
            verdict.answer = {"refused": [p.render() for p in error.problems]}
        except Exception as error:  # noqa: BLE001 - shown on the page
            log.exception("the plan for the console failed")
            verdict.answer = {"error": f"{type(error).__name__}: {error}"}

    def act(self, name: str, action: str, confirm: str, who: str) -> HistoryEntry:
        """Carry out an action asked through the console; recorded in history under ``who``."""
        if not self.allow_actions:
            raise Refused(HTTPStatus.FORBIDDEN, "this console is read-only: start it with --allow-actions")
        self.known(name)
        if confirm != name:
            raise Refused(HTTPStatus.BAD_REQUEST, f"to confirm, give the query's name ({name}) as 'confirm'")
        requested_by = f"console:{who}"
        log.info(f"{action} of {name} asked through the console by {who}")
        try:
            if action == "stop":
                return self.deployer(None, requested_by).stop(name, savepoint=True)
            if action == "savepoint":
                return self.deployer(None, requested_by).savepoint(name)
            project = self.project()
            found = self.desired_manifest(project, name)
            if found is None:
                raise Refused(HTTPStatus.CONFLICT, f"{name} has no desired manifest to deploy")
            with self._analysis:
                deployer = self.deployer(project, requested_by)
                decision = deployer.decide(name, deployer.prepare(found[2]))
            return deployer.carry_out(decision)
        except UserError as error:
            problems = [p.render() for p in error.problems]
            raise Refused(HTTPStatus.CONFLICT, problems[0], problems) from None

    # ---- previews ----------------------------------------------------------------------------

    def preview_request(self, body: dict[str, Any]) -> PreviewRequest:
        """A preview of ``sql`` over the declared tables, or of a manifest being edited (``manifest``: its
        YAML text, not saved), within the CLI's limits."""
        project = self.project()
        sql, text = body.get("sql"), body.get("manifest")
        if (sql is None) == (text is None) or not isinstance(sql or text, str):
            raise Refused(HTTPStatus.BAD_REQUEST, "give exactly one of 'sql' and 'manifest' (text)")
        manifest = self.parse(project, text) if text is not None else None
        try:
            limit, timeout = int(body.get("limit", 20)), float(body.get("timeout", 30.0))
        except (TypeError, ValueError):
            raise Refused(HTTPStatus.BAD_REQUEST, "'limit' and 'timeout' are numbers") from None
        return PreviewRequest(
            sql=sql,
            manifest=manifest,
            file="(editor)" if manifest is not None else None,
            tables=project.catalog.tables,
            limit=limit,
            timeout=timeout,
        )

    def parse(self, project: Project, text: str) -> Manifest:
        try:
            return parse_manifest(text, project.template, file="(editor)")
        except UserError as error:
            problems = [p.render() for p in error.problems]
            raise Refused(HTTPStatus.BAD_REQUEST, problems[0], problems) from None

    def validate(self, text: str) -> dict[str, Any]:
        """Check a manifest being edited as ``sql-runner validate`` does (its query analysed by Spark over
        the declared tables); nothing is saved."""
        from runner.analysis.validate import analyse

        project = self.project()
        manifest = self.parse(project, text)
        try:
            with self._analysis:
                deployer = self.deployer(project, None)
                env = deployer.settings.values
                analysed = analyse(deployer.spark(), manifest, project.catalog, env, file="(editor)")
        except UserError as error:
            problems = [p.render() for p in error.problems]
            raise Refused(HTTPStatus.BAD_REQUEST, problems[0], problems) from None
        return {
            "name": manifest.name,
            "reads": [t.name for t in analysed.reads],
            "lookups": [t.name for t in analysed.lookups],
            "writes": analysed.target.name,
        }


def console_routes(console: Console) -> list[Any]:
    """The console's routes, for a Starlette application behind ``runner/console/http.py``'s guard."""

    def page(name: str, request: Request, status: HTTPStatus = HTTPStatus.OK, **values: Any) -> HTMLResponse:
        values.update(team=console.team, who=holder_of(request), served_by=console.served_by, page=name)
        return HTMLResponse(TEMPLATES.get_template(f"{name}.html").render(**values), status_code=status)

    async def overview_page(request: Request) -> Response:
        return page("overview", request)

    async def overview_json(_request: Request) -> Response:
        rows = await run_in_threadpool(console.overview.rows)
        session = await run_in_threadpool(console.overview.session)
        return JSONResponse({"team": console.team, "rows": rows, "session": session, "at": time.time()})

    async def query_page(request: Request) -> Response:
        try:
            shown = await run_in_threadpool(console.query, request.path_params["name"])
        except Refused as refused:
            if refused.status != HTTPStatus.NOT_FOUND:
                raise
            return page("missing", request, HTTPStatus.NOT_FOUND, message=f"{refused}.")
        return page("query", request, q=shown)

    async def query_json(request: Request) -> Response:
        return JSONResponse(await run_in_threadpool(console.query, request.path_params["name"]))

    async def verdict_json(request: Request) -> Response:
        return JSONResponse(await run_in_threadpool(console.verdict, request.path_params["name"]))

    async def query_log(request: Request) -> Response:
        name = request.path_params["name"]
        await run_in_threadpool(console.known, name)
        at = datetime.now(UTC)
        view = await run_in_threadpool(observe_job, console.store, console.targets, console.team, name, at)
        path = await run_in_threadpool(log_path, view, console.session_log())
        if path is None:
            where = view.job.detail if view.job is not None and view.job.detail else "its target"
            return PlainTextResponse(f"{name}'s log is not on this machine: see {where}\n", status_code=404)
        return PlainTextResponse(await run_in_threadpool(log_tail, path, name))

    async def action(request: Request) -> Response:
        body = await json_of(request)
        name, kind = request.path_params["name"], request.path_params["action"]
        if kind not in ("stop", "savepoint", "deploy"):
            raise Refused(HTTPStatus.NOT_FOUND, f"no action {kind}: stop, savepoint or deploy")
        entry = await run_in_threadpool(console.act, name, kind, str(body.get("confirm", "")), holder_of(request))
        return JSONResponse({"decision": entry.decision, "summary": entry.summary, "result": entry.outcome.result})

    async def preview_page(request: Request) -> Response:
        project = await run_in_threadpool(console.project)
        return page("preview", request, tables=project.catalog.tables)

    async def preview_start(request: Request) -> Response:
        wanted = await run_in_threadpool(console.preview_request, await json_of(request))
        run = console.previews.start(wanted)
        return JSONResponse({"id": run.id, "limit": run.request.limit, "timeout": run.request.timeout})

    async def preview_rows(request: Request) -> Response:
        run = console.previews.get(request.path_params["id"])
        if run is None:
            raise Refused(HTTPStatus.NOT_FOUND, "no such preview (the console keeps the last 20)")
        try:
            seen = max(0, int(request.query_params.get("seen", "0")))
        except ValueError:
            raise Refused(HTTPStatus.BAD_REQUEST, "'seen' is a number of rows") from None
        return JSONResponse(run.since(seen))

    async def validate(request: Request) -> Response:
        text = (await json_of(request)).get("manifest")
        if not isinstance(text, str):
            raise Refused(HTTPStatus.BAD_REQUEST, "give the manifest's YAML text as 'manifest'")
        return JSONResponse(await run_in_threadpool(console.validate, text))

    async def scrape(_request: Request) -> Response:
        return Response(await run_in_threadpool(metrics.exposition, console.overview), media_type=metrics.CONTENT_TYPE)

    return [
        Route("/", overview_page),
        Route("/api/overview", overview_json),
        Route("/query/{name}", query_page),
        Route("/query/{name}/log", query_log),
        Route("/api/query/{name}", query_json),
        Route("/api/query/{name}/verdict", verdict_json),
        Route("/api/query/{name}/{action}", action, methods=["POST"]),
        Route("/preview", preview_page),
        Route("/api/preview", preview_start, methods=["POST"]),
        Route("/api/preview/{id}", preview_rows),
        Route("/api/validate", validate, methods=["POST"]),
        Route("/metrics", scrape),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]


def not_found_page(console: Console) -> Callable[[Request, Exception], Awaitable[Response]]:
    """What a path the console does not serve answers: a page for a browser, a JSON error otherwise."""

    async def not_found(request: Request, _error: Exception) -> Response:
        message = f"the console has no page {request.url.path}"
        if "text/html" not in request.headers.get("accept", ""):
            return refusal(HTTPStatus.NOT_FOUND, message)
        values = {"team": console.team, "who": holder_of(request), "served_by": console.served_by, "page": "missing"}
        text = TEMPLATES.get_template("missing.html").render(message=f"{message[0].upper()}{message[1:]}.", **values)
        return HTMLResponse(text, status_code=HTTPStatus.NOT_FOUND)

    return not_found
