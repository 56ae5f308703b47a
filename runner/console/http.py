"""The runner's one HTTP stack: the console's and the session control endpoint's.

Starlette (ASGI routing, requests, responses, middleware) served by uvicorn on a thread of the
process that serves it, so a session serves its control endpoint and its console from the Spark
driver without another process. Every request passes ``Guard``:

- a token is required, compared in constant time with every token accepted: ``Authorization:
  Bearer <token>`` (the CLI, Prometheus) or the console's cookie (a browser, after ``POST /login``;
  ``HttpOnly``, ``SameSite=Strict``, so no other site's page can send it). Without one the answer is
  401 before anything is read: a login form for a browser, a JSON error otherwise. Only ``/login``
  and the console's static files (the same for everyone, holding no state) answer without a token;
- a body holds at most ``MAX_BODY`` bytes (413);
- every answer forbids framing, sniffing, caching and any script, style or connection but the
  console's own (a Content-Security-Policy of ``'self'``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
from collections.abc import Callable
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qs

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

log = logging.getLogger(__name__)

MAX_BODY = 1 << 20  # bytes of one request
COOKIE = "sql_runner_console"
PUBLIC = ("/login", "/static/")  # answered without a token: the login form and the console's own assets

HEADERS = {
    "content-security-policy": (
        "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; "
        "frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
    ),
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}


class Refused(Exception):
    """A request answered with an HTTP error and a message."""

    def __init__(self, status: HTTPStatus, message: str, problems: list[str] | None = None):
        super().__init__(message)
        self.status = status
        self.problems = problems or []


def token_of(request: Request) -> str:
    """The token a request carries: its bearer token, else the console's cookie ("" for none)."""
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    if scheme == "Bearer" and given.strip():
        return given.strip()
    return request.cookies.get(COOKIE, "")


def holder_of(request: Request) -> str:
    """The name of the token the request was let in with (``Guard`` put it there)."""
    return request.scope["state"]["token_name"]


class Guard:
    """ASGI middleware: the token check, the body limit and the security headers of every answer.

    ``holder``: the name of the token given, or None if it is none of the accepted ones (read on every
    request, so a token made while serving is accepted at once); ``login_page``: the 401 page a browser
    gets (None: JSON only)."""

    def __init__(self, app: ASGIApp, holder: Callable[[str], str | None], login_page: Callable[[str], str] | None):
        self.app = app
        self.holder = holder
        self.login_page = login_page

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def secured(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", []) if k.decode().lower() not in HEADERS]
                headers += [(k.encode(), v.encode()) for k, v in HEADERS.items()]
                message = {**message, "headers": headers}
            await send(message)

        request = Request(scope)
        length = request.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > MAX_BODY):
            answer = refusal(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"a request may hold at most {MAX_BODY} bytes")
            await answer(scope, receive, secured)
            return
        path = scope["path"]
        if not path.startswith(PUBLIC):
            name = self.holder(token_of(request)) if token_of(request) else None
            if name is None:
                client = scope.get("client") or ("?",)
                log.info(f"refused a request without a valid token from {client[0]}")
                await self._unauthorised(request)(scope, receive, secured)
                return
            scope.setdefault("state", {})["token_name"] = name
        await self.app(scope, _capped(receive), secured)

    def _unauthorised(self, request: Request) -> Response:
        message = "a token is required: Authorization: Bearer <token>, or sign in to the console"
        if self.login_page is not None and "text/html" in request.headers.get("accept", ""):
            target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            return HTMLResponse(self.login_page(target), status_code=HTTPStatus.UNAUTHORIZED)
        return refusal(HTTPStatus.UNAUTHORIZED, message)


def _capped(receive: Receive) -> Receive:
    """``receive``, refusing a body (sent in chunks, with no length given) once it is over ``MAX_BODY``."""
    taken = 0

    async def capped() -> dict[str, Any]:
        nonlocal taken
        message = await receive()
        if message["type"] == "http.request":
            taken += len(message.get("body", b""))
            if taken > MAX_BODY:
                raise Refused(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"a request may hold at most {MAX_BODY} bytes")
        return message

    return capped


def refusal(status: HTTPStatus, message: str, problems: list[str] | None = None) -> JSONResponse:
    return JSONResponse({"error": message, "problems": problems or []}, status_code=status)


async def form_of(request: Request) -> dict[str, str]:
    """An URL-encoded form's fields (first value of each)."""
    fields = parse_qs((await request.body()).decode("utf-8", "replace"), keep_blank_values=True)
    return {key: values[0] for key, values in fields.items()}


async def json_of(request: Request) -> dict[str, Any]:
    """A JSON object body; 400 if the body is not one."""
    try:
        data = json.loads(await request.body() or b"{}")
    except ValueError as error:
        raise Refused(HTTPStatus.BAD_REQUEST, f"the body is not JSON: {error}") from None
    if not isinstance(data, dict):
        raise Refused(HTTPStatus.BAD_REQUEST, "the body must be a JSON object")
    return data


async def refused_answer(_request: Request, error: Exception) -> Response:
    assert isinstance(error, Refused)
    return refusal(error.status, str(error), error.problems)


def application(routes: list[Any], holder: Callable[[str], str | None], login_page=None) -> ASGIApp:
    """A Starlette application of ``routes`` behind the guard."""
    app = Starlette(routes=routes, exception_handlers={Refused: refused_answer})
    return Guard(app, holder, login_page)


class Server:
    """An ASGI application served by uvicorn on a daemon thread, on ``address``:``port`` (0: any free port)."""

    def __init__(self, app: ASGIApp, *, address: str, port: int, name: str):
        self.socket = socket.create_server((address, port), family=_family(address), reuse_port=False)
        self.port = self.socket.getsockname()[1]
        host = address if address not in ("0.0.0.0", "::", "") else socket.getfqdn()
        self.url = f"http://{f'[{host}]' if ':' in host else host}:{self.port}"
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off", timeout_graceful_shutdown=2)
        self.server = uvicorn.Server(config)
        self.name = name
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._serve, name=self.name, daemon=True)
        self._thread.start()
        while not self.server.started and self._thread.is_alive():
            self._thread.join(0.02)

    def _serve(self) -> None:
        asyncio.run(self.server.serve(sockets=[self.socket]))

    def stop(self) -> None:
        self.server.should_exit = True
        if self._thread is not None:
            self._thread.join(10)
        self.socket.close()


def _family(address: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in address else socket.AF_INET
