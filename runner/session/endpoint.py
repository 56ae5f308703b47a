"""The session's control endpoint: live previews answered by the running session (no new JVM).

An HTTP server on a thread of the session application. It binds ``127.0.0.1`` by default
(``session start --control-address`` for a private network, e.g. EMR's) on a free port,
and publishes where it listens in ``session/control.json`` in the state store together
with a token made for this session run. Every request must carry that token
(``Authorization: Bearer <token>``); one without it, or with another, is refused with 401
before anything is read or run. The token never appears in a log, the health file or
``status``: only what can read the team's state store can use the endpoint.

``POST /preview`` with ``{"sql": ...}`` or ``{"manifest": {...}}``, plus ``"tables"`` (the
table definitions the caller sees: placeholders unresolved, resolved here from the
session's environment), ``"limit"`` and ``"timeout"``: the first rows of the query over
the live sources, in a fresh ``newSession()`` and the ``preview`` FAIR pool, with a
throw-away checkpoint. It writes nothing and touches no deployed state. Rows and seconds
are capped, at most two previews run at once (429 otherwise), building a query (a code
snippet) has the session's build timeout.
"""

from __future__ import annotations

import hmac
import logging
import secrets
import socket
import threading
import time
from collections.abc import Mapping
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from pydantic import ValidationError
from pyspark.sql import SparkSession

from jobs.build import BuiltQuery, build_query, sql_preview_query
from runner.analysis.preview import preview
from runner.core import layout
from runner.core.bucket import Bucket
from runner.core.catalog import Catalog
from runner.core.errors import UserError
from runner.core.manifest import Manifest
from runner.core.protocol.document import Document
from runner.core.protocol.preview import PreviewAnswer, PreviewRefusal, PreviewRequest
from runner.core.protocol.session import SessionControl, read_control, write_control
from runner.core.tables import TableDef
from runner.session.bounded import TimedOut, within

log = logging.getLogger(__name__)

MAX_BODY = 1 << 20  # bytes of one request
MAX_ROWS = 1000
MAX_SECONDS = 120.0
CONCURRENT_PREVIEWS = 2
POOL = "preview"


def _plain(value: Any) -> Any:
    """A row's value as JSON carries it: numbers, strings, booleans and None as they are, the rest as text."""
    return value if value is None or isinstance(value, bool | int | float | str) else str(value)


class Refused(Exception):
    """A request answered with an HTTP error and a message."""

    def __init__(self, status: HTTPStatus, message: str, problems: list[str] | None = None):
        super().__init__(message)
        self.status = status
        self.problems = problems or []


class ControlEndpoint:
    def __init__(
        self,
        spark: SparkSession,
        records: Bucket,
        *,
        run_id: str,
        address: str,
        port: int,
        env: Mapping[str, str],
        build_timeout: float,
    ):
        self.spark = spark
        self.records = records
        self.run_id = run_id
        self.env = env
        self.build_timeout = build_timeout
        self.token = secrets.token_urlsafe(32)
        self.slots = threading.BoundedSemaphore(CONCURRENT_PREVIEWS)
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            server_version = "sql-runner-session"

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                endpoint.answer(self)

            def do_GET(self) -> None:  # noqa: N802
                endpoint.answer(self)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the request line only, never headers
                pass

        self.server = ThreadingHTTPServer((address, port), Handler)
        self.server.daemon_threads = True
        host = address if address not in ("0.0.0.0", "::", "") else socket.getfqdn()
        self.url = f"http://{host}:{self.server.server_address[1]}"
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Serve on a daemon thread and publish the address and this run's token in the state store."""
        self._thread = threading.Thread(target=self.server.serve_forever, name="sql-runner-control", daemon=True)
        self._thread.start()
        write_control(self.records, SessionControl(run_id=self.run_id, url=self.url, token=self.token))
        log.info(f"control endpoint on {self.url} (token in {layout.SESSION_CONTROL} of the state store)")

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        published = read_control(self.records)
        if published is not None and published.run_id == self.run_id:
            self.records.delete(layout.SESSION_CONTROL)

    # ---- one request -------------------------------------------------------------------------

    def answer(self, request: BaseHTTPRequestHandler) -> None:
        started = time.monotonic()
        try:
            self._authenticate(request)
            if request.command != "POST" or request.path != "/preview":
                raise Refused(HTTPStatus.NOT_FOUND, f"no {request.command} {request.path}: POST /preview only")
            body = self._body(request)
            if not self.slots.acquire(blocking=False):
                raise Refused(HTTPStatus.TOO_MANY_REQUESTS, f"{CONCURRENT_PREVIEWS} previews are running; try again")
            try:
                answer = self.preview(body)
            finally:
                self.slots.release()
            answer = answer.model_copy(update={"seconds": round(time.monotonic() - started, 3)})
            self._send(request, HTTPStatus.OK, answer)
            log.info(f"preview answered: {len(answer.rows)} row(s) in {answer.seconds:.2f}s")
        except Refused as refused:
            self._send(request, refused.status, PreviewRefusal(error=str(refused), problems=refused.problems))
        except Exception as error:  # noqa: BLE001 - answered, so the caller is not left waiting
            refusal = PreviewRefusal(error=f"{type(error).__name__}: {error}")
            self._send(request, HTTPStatus.INTERNAL_SERVER_ERROR, refusal)

    def _authenticate(self, request: BaseHTTPRequestHandler) -> None:
        given = request.headers.get("Authorization", "")
        scheme, _, token = given.partition(" ")
        if scheme != "Bearer" or not hmac.compare_digest(token.strip().encode(), self.token.encode()):
            log.info(f"refused an unauthenticated request from {request.client_address[0]}")
            raise Refused(HTTPStatus.UNAUTHORIZED, "a token is required: Authorization: Bearer <session token>")

    def _body(self, request: BaseHTTPRequestHandler) -> PreviewRequest:
        length = int(request.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            raise Refused(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"a request may hold at most {MAX_BODY} bytes")
        try:
            return PreviewRequest.decode(request.rfile.read(length) or b"{}")
        except ValidationError as error:
            reasons = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'request'}: {e['msg']}" for e in error.errors())
            raise Refused(HTTPStatus.BAD_REQUEST, f"not a preview request: {reasons}") from None

    def _send(self, request: BaseHTTPRequestHandler, status: HTTPStatus, body: Document) -> None:
        data = body.encode()
        request.send_response(status)
        request.send_header("Content-Type", "application/json")
        request.send_header("Content-Length", str(len(data)))
        request.end_headers()
        request.wfile.write(data)

    # ---- the preview -------------------------------------------------------------------------

    def preview(self, body: PreviewRequest) -> PreviewAnswer:
        limit = max(1, min(body.limit, MAX_ROWS))
        timeout = max(1.0, min(body.timeout, MAX_SECONDS))
        try:
            catalog = Catalog(tuple(TableDef.from_dict(t) for t in body.tables))
            manifest = Manifest.model_validate(body.manifest) if body.manifest is not None else None
        except (KeyError, TypeError, ValueError) as error:
            raise Refused(HTTPStatus.BAD_REQUEST, f"the tables or manifest cannot be read: {error}") from None
        spark = self.spark.newSession()
        query = self._build(spark, manifest, body.sql, catalog, body.file)
        context = spark.sparkContext
        context.setLocalProperty("spark.scheduler.pool", POOL)
        try:
            result = preview(query, limit=limit, timeout=timeout)
        finally:
            context.setLocalProperty("spark.scheduler.pool", None)
        return PreviewAnswer(
            session_run=self.run_id,
            columns=list(result.columns),
            rows=[[_plain(value) for value in row] for row in result.rows],
            timed_out=result.timed_out,
            limit=limit,
            timeout=timeout,
        )

    def _build(
        self, spark: SparkSession, manifest: Manifest | None, sql: str | None, catalog: Catalog, file: str | None
    ) -> BuiltQuery:
        """The query, built on a worker thread: a code snippet that never returns answers 504, not never."""

        def build() -> BuiltQuery:
            if manifest is not None:
                return build_query(spark, manifest, catalog, self.env, live=True, file=file)
            return sql_preview_query(spark, sql or "", catalog, self.env)

        try:
            return within(self.build_timeout, build, "sql-runner-preview-build")
        except TimedOut:
            took = f"building the query took over {self.build_timeout:.0f}s"
            raise Refused(HTTPStatus.GATEWAY_TIMEOUT, took) from None
        except UserError as error:
            problems = [p.render() for p in error.problems]
            raise Refused(HTTPStatus.BAD_REQUEST, problems[0], problems) from None
