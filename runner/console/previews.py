"""Live previews: the first rows of a query over the live sources, shown as they arrive.

The same limits as ``sql-runner preview`` and the session's endpoint: at most ``MAX_ROWS`` rows and
``MAX_SECONDS`` seconds, ``CONCURRENT`` previews at once, a throw-away checkpoint, nothing written.
``answer`` runs one in this process (the session's Spark, or the console's local one) and hands each
piece to a callback as it comes; ``PreviewRun`` keeps a run's rows for the page that polls them.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from http import HTTPStatus
from typing import Any

from pyspark.sql import SparkSession

from jobs.build import BuiltQuery, build_query, sql_preview_query
from runner.analysis.preview import preview
from runner.console.http import Refused, decoded
from runner.core.bounded import TimedOut, within
from runner.core.catalog import Catalog
from runner.core.errors import UserError
from runner.core.protocol.preview import PreviewChunk, PreviewRequest

MAX_ROWS = 1000
MAX_SECONDS = 120.0
CONCURRENT = 2
POOL = "preview"  # the FAIR scheduler pool previews run in, in a session
KEPT = 20  # finished runs a console keeps for their pages


def plain(value: Any) -> Any:
    """A row's value as JSON carries it: numbers, strings, booleans and None as they are, the rest as text."""
    return value if value is None or isinstance(value, bool | int | float | str) else str(value)


def decode_request(body: bytes) -> PreviewRequest:
    return decoded(PreviewRequest, body, "preview request")


def bounded(request: PreviewRequest) -> PreviewRequest:
    """The request within the limits: 1 to ``MAX_ROWS`` rows, 1 to ``MAX_SECONDS`` seconds."""
    limit = max(1, min(request.limit, MAX_ROWS))
    timeout = max(1.0, min(request.timeout, MAX_SECONDS))
    return request.model_copy(update={"limit": limit, "timeout": timeout})


def answer(
    spark: SparkSession,
    request: PreviewRequest,
    *,
    env: Mapping[str, str],
    build_timeout: float,
    emit: Callable[[PreviewChunk], None],
    run_id: str | None = None,
) -> None:
    """Run a (bounded) preview on ``spark``: ``emit`` gets the columns, then each micro-batch's rows, then the
    end. Refused (400, 504) when the query cannot be built."""
    catalog, manifest = Catalog(request.tables), request.manifest
    session = spark.newSession()

    def build() -> BuiltQuery:
        if manifest is not None:
            return build_query(session, manifest, catalog, env, live=True, file=request.file)
        return sql_preview_query(session, request.sql or "", catalog, env)

    try:
        query = within(build_timeout, build, "sql-runner-preview-build")
    except TimedOut:
        raise Refused(HTTPStatus.GATEWAY_TIMEOUT, f"building the query took over {build_timeout:.0f}s") from None
    except UserError as error:
        problems = [p.render() for p in error.problems]
        raise Refused(HTTPStatus.BAD_REQUEST, problems[0], problems) from None
    emit(PreviewChunk(columns=list(query.result.columns), session_run=run_id))
    context = session.sparkContext
    context.setLocalProperty("spark.scheduler.pool", POOL)
    try:
        result = preview(
            query,
            limit=request.limit,
            timeout=request.timeout,
            env=env,
            on_rows=lambda rows: emit(PreviewChunk(rows=[[plain(value) for value in row] for row in rows])),
        )
    finally:
        context.setLocalProperty("spark.scheduler.pool", None)
    emit(PreviewChunk(done=True, timed_out=result.timed_out, session_run=run_id))


class PreviewRun:
    """One preview's rows so far, for the page that polls them; filled by the thread running it."""

    def __init__(self, run_id: str, request: PreviewRequest):
        self.id = run_id
        self.request = request
        self.started = time.monotonic()
        self.columns: list[str] | None = None
        self.rows: list[list[Any]] = []
        self.done = False
        self.timed_out = False
        self.error: str | None = None
        self.problems: list[str] = []
        self.answered_by: str | None = None
        self.lock = threading.Lock()

    def take(self, chunk: PreviewChunk) -> None:
        with self.lock:
            if chunk.columns is not None:
                self.columns = chunk.columns
            room = self.request.limit - len(self.rows)
            self.rows.extend(chunk.rows[: max(0, room)])
            if chunk.error is not None:
                self.error, self.problems, self.done = chunk.error, chunk.problems, True
            if chunk.done:
                self.done, self.timed_out = True, chunk.timed_out

    def fail(self, error: str, problems: list[str] | None = None) -> None:
        self.take(PreviewChunk(error=error, problems=problems or []))

    def since(self, seen: int) -> dict[str, Any]:
        """What a page that has shown ``seen`` rows has not shown yet."""
        with self.lock:
            return {
                "id": self.id,
                "columns": self.columns,
                "rows": self.rows[seen:],
                "total": len(self.rows),
                "done": self.done,
                "timed_out": self.timed_out,
                "error": self.error,
                "problems": self.problems,
                "answered_by": self.answered_by,
                "seconds": round(time.monotonic() - self.started, 1),
                "limit": self.request.limit,
                "timeout": self.request.timeout,
            }


class PreviewRuns:
    """The console's previews: each runs on a thread of its own through ``run`` (the session's, or a local
    Spark); at most ``CONCURRENT`` at once; the last ``KEPT`` kept for their pages."""

    def __init__(self, run: Callable[[PreviewRequest, PreviewRun], None]):
        self._run = run
        self._runs: OrderedDict[str, PreviewRun] = OrderedDict()
        self._ids = itertools.count(1)
        self._slots = threading.BoundedSemaphore(CONCURRENT)
        self._lock = threading.Lock()

    def start(self, request: PreviewRequest) -> PreviewRun:
        if not self._slots.acquire(blocking=False):
            raise Refused(HTTPStatus.TOO_MANY_REQUESTS, f"{CONCURRENT} previews are running; try again")
        with self._lock:
            run = PreviewRun(f"p{next(self._ids)}", bounded(request))
            self._runs[run.id] = run
            while len(self._runs) > KEPT:
                self._runs.popitem(last=False)
        threading.Thread(target=self._carry, args=(run,), name=f"sql-runner-preview-{run.id}", daemon=True).start()
        return run

    def _carry(self, run: PreviewRun) -> None:
        try:
            self._run(run.request, run)
        except Refused as refused:
            run.fail(str(refused), refused.problems)
        except UserError as error:
            problems = [p.render() for p in error.problems]
            run.fail(problems[0], problems)
        except Exception as error:  # noqa: BLE001 - shown on the page, not lost on a thread
            run.fail(f"{type(error).__name__}: {error}")
        finally:
            with run.lock:
                run.done = True
            self._slots.release()

    def get(self, run_id: str) -> PreviewRun | None:
        with self._lock:
            return self._runs.get(run_id)
