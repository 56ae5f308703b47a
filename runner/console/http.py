"""The runner's one HTTP stack: the console's and the session control endpoint's.

Starlette (ASGI routing, requests, responses, middleware) served by uvicorn on a thread of the
process that serves it, so a session serves its control endpoint and its console from the Spark
driver without another process. Every request passes ``Guard``:

- it must carry a token, ``Authorization: Bearer <token>`` (the CLI, Prometheus, scripts), compared in
  constant time with every token accepted, or, where the application has sign-ins (the console), the
  cookie of a browser's sign-in (``runner/console/signin.py``). Without either the answer is 401 before
  anything is read: a sign-in form for a browser, a JSON error otherwise. Only the sign-in form and the
  console's static files (the same for everyone, holding no state) answer without one;
- a request let in by a sign-in's cookie is one a browser sent, so it must come from the console's own
  pages: a request another page made it send (``Sec-Fetch-Site`` other than ``same-origin``) is refused
  unless it is a plain navigation, and one that can change anything (any method but GET and HEAD) must
  say the console's own origin in ``Origin`` and carry the sign-in's anti-forgery key in
  ``X-Console-Key``, a header no form can set and no other page can read;
- a JSON body must say so (``Content-Type: application/json``), so a form cannot pose as one;
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
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, Protocol, TypeVar
from urllib.parse import parse_qs

import uvicorn
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from runner.console.signin import Refusal, SignIn, SignIns, cookie_name, same_key
from runner.core.protocol.console import digest
from runner.core.protocol.document import Document

log = logging.getLogger(__name__)

MAX_BODY = 1 << 20  # bytes of one request
KEY_HEADER = "x-console-key"  # the sign-in's anti-forgery key, sent by the console's script
PUBLIC = ("/login", "/static/")  # answered without a token: the sign-in form and the console's own assets
SAFE_METHODS = ("GET", "HEAD")

HEADERS = {
    "content-security-policy": (
        "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; "
        "frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
    ),
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",  # with no-referrer, a browser says "Origin: null" for its own forms
    "cache-control": "no-store",
}


class Refused(Exception):
    """A request answered with an HTTP error and a message."""

    def __init__(self, status: HTTPStatus, message: str, problems: list[str] | None = None):
        super().__init__(message)
        self.status = status
        self.problems = problems or []


class SignInPages(Protocol):
    """The pages of signing in, as the application that has sign-ins renders them."""

    def form(self, next_path: str, nonce: str, error: str | None) -> str: ...

    def signed_in(self, next_path: str, key: str) -> str: ...


@dataclass
class Access:
    """Who may use an application: ``holder`` names the bearer token given (None: not one of those
    accepted; read on every request, so a token made while serving is accepted at once); with
    ``sign_ins``, browsers sign in with a console token (``holder_of_digest`` names the token a sign-in
    was made with, so that one made anew ends it; ``pages`` renders the sign-in pages)."""

    holder: Callable[[str], str | None]
    sign_ins: SignIns | None = None
    holder_of_digest: Callable[[str], str | None] | None = None
    pages: SignInPages | None = None


def bearer_of(request: Request) -> str:
    """The bearer token a request carries ("" for none)."""
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    return given.strip() if scheme == "Bearer" else ""


def holder_of(request: Request) -> str:
    """The name of the token the request was let in with (``Guard`` put it there)."""
    return request.scope["state"]["token_name"]


def sign_in_of(request: Request) -> SignIn | None:
    """The sign-in a browser's request was let in with (None: a bearer token)."""
    return request.scope["state"].get("sign_in")


def browser_port(request: Request) -> int:
    """The port the browser reached this server on (its ``Host``), which names the sign-in's cookie."""
    return request.url.port or (443 if request.url.scheme == "https" else 80)


def own_origin(request: Request) -> str:
    """This server's origin as the browser sees it: ``http://127.0.0.1:8099``."""
    return f"{request.url.scheme}://{request.url.netloc}".lower()


def foreign(request: Request) -> str | None:
    """Why a browser's request was not made by this server's own pages (None: it was, or it is a plain
    navigation to one of them)."""
    site = request.headers.get("sec-fetch-site")
    if site in (None, "same-origin", "none"):
        return None
    if request.method in SAFE_METHODS and request.headers.get("sec-fetch-mode") == "navigate":
        return None
    return f"refused: a request made by a page of another origin ({site}); use the console's own pages"


def cross_origin(request: Request) -> str | None:
    """Why a request that changes something did not come from this server's own pages (None: it did)."""
    origin = request.headers.get("origin")
    if origin is None:
        return "refused: a browser's request that changes anything must say its Origin; use the console's own pages"
    if origin.lower() != own_origin(request):
        return f"refused: a request from {origin}, not from this console ({own_origin(request)})"
    site = request.headers.get("sec-fetch-site")
    if site not in (None, "same-origin"):
        return f"refused: a request made by a page of another origin ({site}); use the console's own pages"
    return None


class Guard:
    """ASGI middleware: the token and sign-in checks, the body limit and the security headers of every answer."""

    def __init__(self, app: ASGIApp, access: Access):
        self.app = app
        self.access = access

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
        if not scope["path"].startswith(PUBLIC):
            refused = self._let_in(request, scope.setdefault("state", {}))
            if refused is not None:
                answer, why = refused
                client = scope.get("client") or ("?",)
                log.info(f"refused {request.method} {scope['path']} from {client[0]}: {why}")
                await answer(scope, receive, secured)
                return
        await self.app(scope, _capped(receive), secured)

    def _let_in(self, request: Request, state: dict[str, Any]) -> tuple[Response, str] | None:
        """None when the request may go on (``state`` then names who sent it), else the answer refusing it
        and why."""
        bearer = bearer_of(request)
        if bearer:
            name = self.access.holder(bearer)
            if name is None:
                return self._unauthorised(request, None)
            state["token_name"] = name
            return None
        sign_ins = self.access.sign_ins
        given = request.cookies.get(cookie_name(browser_port(request)), "") if sign_ins is not None else ""
        if not given:
            return self._unauthorised(request, None)
        assert sign_ins is not None and self.access.holder_of_digest is not None
        found = sign_ins.find(given, self.access.holder_of_digest)
        if isinstance(found, Refusal):
            return self._unauthorised(request, found.value)
        why = foreign(request)
        if why is None and request.method not in SAFE_METHODS:
            why = cross_origin(request)
            if why is None and not same_key(found, request.headers.get(KEY_HEADER, "")):
                why = (
                    "refused: the request does not carry this sign-in's anti-forgery key (X-Console-Key), "
                    "which the console's own pages send; reload the page, or sign in again"
                )
        if why is not None:
            return refusal(HTTPStatus.FORBIDDEN, why), why
        state["token_name"] = found.holder
        state["sign_in"] = found
        return None

    def _unauthorised(self, request: Request, why: str | None) -> tuple[Response, str]:
        message = why or "a token is required: Authorization: Bearer <token>, or sign in to the console"
        pages = self.access.pages
        if pages is not None and self.access.sign_ins is not None and "text/html" in request.headers.get("accept", ""):
            target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            page = pages.form(local_path(target), self.access.sign_ins.nonce(), why)
            return HTMLResponse(page, status_code=HTTPStatus.UNAUTHORIZED), message
        return refusal(HTTPStatus.UNAUTHORIZED, message), message


def local_path(path: str) -> str:
    """``path`` if it is a path of this server (never another site's), else ``/``."""
    return path if path.startswith("/") and not path.startswith("//") and "\\" not in path else "/"


def sign_in_routes(access: Access) -> list[Route]:
    """``GET /login`` (the form, with a one-time nonce), ``POST /login`` (a token for a sign-in) and
    ``POST /logout`` (the sign-in ends)."""
    sign_ins, pages = access.sign_ins, access.pages
    assert sign_ins is not None and pages is not None

    def form(target: str, error: str | None, status: HTTPStatus) -> HTMLResponse:
        return HTMLResponse(pages.form(target, sign_ins.nonce(), error), status_code=status)

    async def login_form(request: Request) -> Response:
        return form(local_path(request.query_params.get("next", "/")), None, HTTPStatus.OK)

    async def login(request: Request) -> Response:
        fields = await form_of(request)
        target = local_path(fields.get("next", "/"))
        if request.headers.get("origin") is not None and (why := cross_origin(request)) is not None:
            return form(target, why, HTTPStatus.FORBIDDEN)
        if not sign_ins.use_nonce(fields.get("nonce", "")):
            why = "this sign-in form has expired or was sent already: sign in again on this form"
            return form(target, why, HTTPStatus.FORBIDDEN)
        token = fields.get("token", "").strip()
        # a console token: a sign-in lasts while its token does (the session's own token is for its CLI)
        name = access.holder_of_digest(digest(token)) if token and access.holder_of_digest else None
        if name is None:
            return form(target, "That token is not one of this console's.", HTTPStatus.UNAUTHORIZED)
        made, sign_in = sign_ins.make(name, token)
        log.info(f"{name} signed in to the console from {(request.client or ('?',))[0]}")
        answer = HTMLResponse(pages.signed_in(target, sign_in.key))
        answer.set_cookie(
            cookie_name(browser_port(request)),
            made,
            httponly=True,
            samesite="strict",
            path="/",
            secure=request.url.scheme == "https",
        )
        return answer

    async def logout(request: Request) -> Response:
        given = request.cookies.get(cookie_name(browser_port(request)), "")
        if sign_in_of(request) is not None and given:
            sign_ins.end(given)
            log.info(f"{holder_of(request)} signed out of the console")
        answer = RedirectResponse("/login", status_code=HTTPStatus.SEE_OTHER)
        answer.delete_cookie(cookie_name(browser_port(request)), path="/", httponly=True, samesite="strict")
        return answer

    return [
        Route("/login", login_form, methods=["GET"]),
        Route("/login", login, methods=["POST"]),
        Route("/logout", logout, methods=["POST"]),
    ]


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


D = TypeVar("D", bound=Document)


def decoded(kind: type[D], body: bytes, what: str) -> D:
    """A request's JSON body as the document ``kind``; 400 naming every field at fault ("not a ``what``: ...")."""
    try:
        return kind.decode(body or b"{}")
    except ValidationError as error:
        reasons = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'request'}: {e['msg']}" for e in error.errors())
        raise Refused(HTTPStatus.BAD_REQUEST, f"not a {what}: {reasons}") from None


async def json_body(request: Request) -> bytes:
    """The body of a request that says it is JSON (415 if it does not: a form cannot pose as one)."""
    media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media != "application/json":
        said = f"Content-Type {media}" if media else "no Content-Type"
        raise Refused(
            HTTPStatus.UNSUPPORTED_MEDIA_TYPE, f"the body must be JSON (Content-Type: application/json), not {said}"
        )
    return await request.body()


async def json_of(request: Request) -> dict[str, Any]:
    """A JSON object body; 415 if it does not say it is JSON, 400 if it is not a JSON object."""
    try:
        data = json.loads(await json_body(request) or b"{}")
    except ValueError as error:
        raise Refused(HTTPStatus.BAD_REQUEST, f"the body is not JSON: {error}") from None
    if not isinstance(data, dict):
        raise Refused(HTTPStatus.BAD_REQUEST, "the body must be a JSON object")
    return data


async def refused_answer(_request: Request, error: Exception) -> Response:
    assert isinstance(error, Refused)
    return refusal(error.status, str(error), error.problems)


def application(
    routes: list[Any], access: Access, not_found: Callable[[Request, Exception], Awaitable[Response]] | None = None
) -> ASGIApp:
    """A Starlette application of ``routes`` behind the guard; with sign-ins, their routes too; ``not_found``
    answers a path no route serves."""
    if access.sign_ins is not None:
        routes = [*sign_in_routes(access), *routes]
    handlers: dict[Any, Any] = {Refused: refused_answer}
    if not_found is not None:
        handlers[HTTPStatus.NOT_FOUND.value] = not_found
    app = Starlette(routes=routes, exception_handlers=handlers)
    return Guard(app, access)


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
