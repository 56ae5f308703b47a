"""The session's control endpoint: live previews answered by the running session (no new JVM), and the
web console (``runner/console/``), on the runner's one HTTP stack (``runner/console/http.py``).

It binds ``127.0.0.1`` by default (``session start --control-address`` for a private network, e.g.
EMR's) on a free port, and publishes where it listens in ``session/control.json`` in the state store
together with a token made for this session run. Every request must carry that token, a console
token (``sql-runner console --print-token``) or a browser's sign-in made with one
(``runner/console/signin.py``); one without, or with another, is refused with 401 before anything is
read or run. No token ever appears in a log, the health file or ``status``: only what can read the
team's state store can use the endpoint.

``POST /preview`` with ``{"sql": ...}`` or ``{"manifest": {...}}``, plus ``"tables"`` (the table
definitions the caller sees: placeholders unresolved, resolved here from the session's environment),
``"limit"`` and ``"timeout"``: the first rows of the query over the live sources, in a fresh
``newSession()`` and the ``preview`` FAIR pool, with a throw-away checkpoint. It writes nothing and
touches no deployed state. Rows and seconds are capped, at most two previews run at once (429
otherwise), building a query (a code snippet) has the session's build timeout. With ``"stream": true``
the answer is one ``PreviewChunk`` JSON line per piece, as rows arrive.

``POST /judge`` with a ``JudgeRequest``: a manifest judged on the session's warm Spark, as a judging driver
would, for ``sql-runner deploy`` to a target whose jobs cannot judge their own (YARN); the answer is a
``Verdict``. It shares the previews' slots, writes nothing and touches no deployed state.
"""

from __future__ import annotations

import hmac
import logging
import os
import queue
import secrets
import threading
import time
from collections.abc import Iterator, Mapping
from http import HTTPStatus

from pyspark.sql import SparkSession
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from runner.analysis.judge import verdict
from runner.console import previews
from runner.console.app import Console, console_routes, not_found_page
from runner.console.http import Access, Refused, Server, application, decoded, json_body
from runner.console.previews import PreviewRun
from runner.core import layout
from runner.core.bounded import TimedOut, within
from runner.core.bucket import Bucket
from runner.core.catalog import Catalog
from runner.core.errors import Problem
from runner.core.placeholders import Values
from runner.core.protocol.document import now
from runner.core.protocol.launch import JudgeRequest, Verdict
from runner.core.protocol.preview import PreviewAnswer, PreviewChunk, PreviewRequest
from runner.core.protocol.session import SessionControl, read_control, write_control

log = logging.getLogger(__name__)

SESSION_TOKEN_NAME = "session-control"  # what the session's own token (the CLI's previews) is called


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
        console: Console | None = None,
    ):
        self.spark = spark
        self.records = records
        self.run_id = run_id
        self.env = env
        self.build_timeout = build_timeout
        self.token = secrets.token_urlsafe(32)
        self.slots = threading.BoundedSemaphore(previews.CONCURRENT)
        self.console = console

        def own(given: str) -> str | None:
            return SESSION_TOKEN_NAME if hmac.compare_digest(given.encode(), self.token.encode()) else None

        routes = [Route("/preview", self.answer, methods=["POST"]), Route("/judge", self.judge, methods=["POST"])]
        if console is not None:
            routes += console_routes(console)
        if console is not None:
            app = application(routes, console.access(own), not_found_page(console))
        else:
            app = application(routes, Access(own))
        self.server = Server(app, address=address, port=port, name="sql-runner-control")
        self.url = self.server.url

    def start(self) -> None:
        """Serve on a daemon thread and publish the address and this run's token in the state store."""
        self.server.start()
        write_control(self.records, SessionControl(run_id=self.run_id, url=self.url, token=self.token))
        log.info(f"control endpoint on {self.url} (token in {layout.SESSION_CONTROL} of the state store)")
        if self.console is not None:
            log.info(f"console on {self.url}/ (sign in with a token from: sql-runner console --print-token)")

    def stop(self) -> None:
        self.server.stop()
        published = read_control(self.records)
        if published is not None and published.run_id == self.run_id:
            self.records.delete(layout.SESSION_CONTROL)

    # ---- one request -------------------------------------------------------------------------

    async def answer(self, request: Request) -> Response:
        body = previews.bounded(previews.decode_request(await json_body(request)))
        if not self.slots.acquire(blocking=False):
            raise Refused(HTTPStatus.TOO_MANY_REQUESTS, f"{previews.CONCURRENT} previews are running; try again")
        if body.stream:  # the preview starts now, and gives its slot back when it ends, read or not
            return StreamingResponse(self._stream(body), media_type="application/x-ndjson")
        try:
            return Response((await run_in_threadpool(self.preview, body)).encode(), media_type="application/json")
        finally:
            self.slots.release()

    def preview(self, body: PreviewRequest) -> PreviewAnswer:
        """The whole answer at once (``sql-runner preview``)."""
        started = time.monotonic()
        run = PreviewRun(self.run_id, body)
        self.run(body, run.take)
        answer = PreviewAnswer(
            session_run=self.run_id,
            columns=run.columns or [],
            rows=run.rows,
            timed_out=run.timed_out,
            limit=body.limit,
            timeout=body.timeout,
            seconds=round(time.monotonic() - started, 3),
        )
        log.info(f"preview answered: {len(answer.rows)} row(s) in {answer.seconds:.2f}s")
        return answer

    async def judge(self, request: Request) -> Response:
        """A manifest judged on the session's warm Spark for a deploy whose target's jobs cannot judge their own
        (``JudgeRequest``; answered with a ``Verdict``: what Spark found, or the problems)."""
        body = decoded(JudgeRequest, await json_body(request), "judge request")
        if not self.slots.acquire(blocking=False):
            raise Refused(HTTPStatus.TOO_MANY_REQUESTS, f"{previews.CONCURRENT} previews or judgements are running")
        try:
            answer = await run_in_threadpool(self.verdict, body)
        finally:
            self.slots.release()
        return Response(answer.encode(), media_type="application/json")

    def verdict(self, body: JudgeRequest) -> Verdict:
        """Judged within the build timeout (a code snippet that never returns is the manifest's problem, as in the
        session's own judging), its placeholders resolved from this environment and the deploy's sources, as the
        job's driver on the cluster resolves them."""
        name, judge_id = body.manifest.name, f"session-{self.run_id}"
        spark, catalog = self.spark.newSession(), Catalog(body.tables)
        values = Values(os.environ, body.placeholders)
        began = time.monotonic()
        try:
            found = within(
                self.build_timeout,
                lambda: verdict(spark, body.manifest, catalog, values, body.judging, judge_id),
                f"sql-runner-judge-{name}",
            )
        except TimedOut:
            timed_out = Problem.of("SESSION_QUERY_BUILD_TIMEOUT", name=name, seconds=f"{self.build_timeout:.0f}")
            found = Verdict(launch_id=judge_id, at=now(), seconds=time.monotonic() - began, problems=(timed_out,))
        said = "deployable" if found.ok else f"{len(found.problems)} problem(s)" if found.problems else "failed"
        log.info(f"judged {name} for a deploy in {found.seconds:.2f}s: {said}")
        return found

    def run(self, body: PreviewRequest, emit) -> None:
        previews.answer(self.spark, body, env=self.env, build_timeout=self.build_timeout, emit=emit, run_id=self.run_id)

    def _stream(self, body: PreviewRequest) -> Iterator[bytes]:
        """The preview's pieces as JSON lines, as they come: it runs on a thread of its own, started here
        (before anything is read) so that its slot is released when it ends even if nobody reads them."""
        pieces: queue.Queue[PreviewChunk | None] = queue.Queue()

        def carry() -> None:
            try:
                self.run(body, pieces.put)
            except Refused as refused:
                pieces.put(PreviewChunk(error=str(refused), problems=refused.problems))
            except Exception as error:  # noqa: BLE001 - said in the answer, which has begun
                pieces.put(PreviewChunk(error=f"{type(error).__name__}: {error}"))
            finally:
                pieces.put(None)
                self.slots.release()

        threading.Thread(target=carry, name="sql-runner-preview", daemon=True).start()

        def lines() -> Iterator[bytes]:
            while (piece := pieces.get()) is not None:
                yield piece.encode(line=True) + b"\n"

        return lines()
