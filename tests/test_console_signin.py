"""Signing in to the console, and what a sign-in can do, over real servers on loopback (no Spark, no browser;
tests/test_console_actions.py does it in Chromium against a real console).

A small client keeps cookies as a browser does, by host and not by port, so two consoles on one host and
another service beside them see what they would see from a browser. What is checked: the token is sent only
in the sign-in request and is never a cookie; the cookie is named after the console's port, HttpOnly,
SameSite=Strict, Path=/; a request that changes anything needs the console's own Origin and the sign-in's
anti-forgery key; signing out of one console leaves the other signed in; bearer clients keep working.

Bad inputs tried, each refused with 401 or 403 and one line, the route never reached: a form and a
``text/plain`` body posing as JSON (from another port's page, and with no Origin), the anti-forgery key of
another sign-in, no key, a key with the wrong Origin, a request another page made (``Sec-Fetch-Site:
same-site``, ``cross-site``), an expired sign-in, an idle one, a sign-in whose token was made anew, a signed-out
cookie, a replayed sign-in request, an expired sign-in form, a sign-in from another origin, the sign-in cookie
as a bearer token, a wrong token, the session's own token on the sign-in form.
"""

from __future__ import annotations

import http.client
import json
import re
from urllib.parse import urlencode

import pytest
from starlette.responses import JSONResponse
from starlette.routing import Route

from runner.console.app import ConsoleSignInPages
from runner.console.http import Access, Server, application, holder_of, json_of
from runner.console.signin import NONCE_LIFETIME, SignIns, cookie_name
from runner.core.bucket import LocalBucket
from runner.core.protocol.console import issue_token, read_access

SESSION_TOKEN = "the-sessions-own-token"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Console:
    """A console's HTTP stack over a real token store, with one JSON action that records each call."""

    def __init__(self, bucket: LocalBucket, clock: Clock):
        self.bucket = bucket
        self.done: list[tuple[str, dict]] = []
        self.sign_ins = SignIns(lifetime=3600, idle=600, clock=clock)

        async def act(request):
            body = await json_of(request)
            self.done.append((holder_of(request), body))
            return JSONResponse({"done": True})

        async def page(request):
            return JSONResponse({"who": holder_of(request)})

        access = Access(  # as a session serves it: its own token beside the console's
            holder=lambda given: "session-control" if given == SESSION_TOKEN else read_access(bucket).holder(given),
            sign_ins=self.sign_ins,
            holder_of_digest=lambda given: read_access(bucket).holder_of_digest(given),
            pages=ConsoleSignInPages(),
        )
        routes = [Route("/api/query/q/savepoint", act, methods=["POST"]), Route("/api/overview", page)]
        self.server = Server(application(routes, access), address="127.0.0.1", port=0, name="test-console")
        self.server.start()
        self.port = self.server.port
        self.origin = f"http://127.0.0.1:{self.port}"


class Browser:
    """Cookies kept per host, whatever the port, as browsers keep them (RFC 6265: cookies do not isolate by port)."""

    def __init__(self) -> None:
        self.cookies: dict[str, str] = {}
        self.key_by_origin: dict[str, str] = {}  # what the console's script keeps in the origin's storage

    def send(self, port: int, method: str, path: str, *, body: bytes | None = None, headers: dict | None = None):
        """(status, headers, body text) of one request to 127.0.0.1:``port``, with the host's cookies."""
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        sent = dict(headers or {})
        if self.cookies:
            sent["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        connection.request(method, path, body=body, headers=sent)
        answer = connection.getresponse()
        text = answer.read().decode()
        for header in answer.headers.get_all("set-cookie") or []:
            name, _, rest = header.partition("=")
            value = rest.split(";", 1)[0]
            if value in ('""', "") or "max-age=0" in header.lower():
                self.cookies.pop(name, None)
            else:
                self.cookies[name] = value
        connection.close()
        return answer.status, answer.headers, text

    def sign_in(self, console: Console, token: str, *, origin: str | None = None) -> tuple[int, str, str]:
        """Fetch the form, send it with ``token``: (status, the answer, the Set-Cookie header)."""
        status, _, form = self.send(console.port, "GET", "/login?next=/api/overview")
        assert status == 200
        nonce = re.search(r'name="nonce" value="([^"]+)"', form).group(1)
        return self.post_form(console, {"token": token, "next": "/api/overview", "nonce": nonce}, origin=origin)

    def post_form(self, console: Console, fields: dict, *, origin: str | None = None) -> tuple[int, str, str]:
        headers = {"Content-Type": "application/x-www-form-urlencoded", "Origin": origin or console.origin}
        status, answered, text = self.send(
            console.port, "POST", "/login", body=urlencode(fields).encode(), headers=headers
        )
        key = re.search(r'data-key="([^"]+)"', text)
        if key:
            self.key_by_origin[console.origin] = key.group(1)
        return status, text, answered.get("set-cookie", "")

    def act(self, console: Console, *, key: str | None = None, origin: str | None = None, **headers: str):
        """The console page's own action request, or a variation of it."""
        sent = {
            "Content-Type": "application/json",
            "Origin": origin or console.origin,
            "Sec-Fetch-Site": "same-origin",
            "X-Console-Key": self.key_by_origin.get(console.origin, "") if key is None else key,
            **{name.replace("_", "-"): value for name, value in headers.items()},
        }
        return self.send(console.port, "POST", "/api/query/q/savepoint", body=b'{"confirm": "q"}', headers=sent)


@pytest.fixture
def setup(tmp_path):
    bucket = LocalBucket(tmp_path)
    clock = Clock()
    consoles = [Console(bucket, clock), Console(bucket, clock)]
    try:
        yield bucket, clock, consoles
    finally:
        for console in consoles:
            console.server.stop()


def error_of(text: str) -> str:
    return json.loads(text)["error"]


def test_a_sign_in_keeps_the_token_out_of_the_browser_and_only_the_consoles_own_page_can_act(setup):
    bucket, _, (console, _) = setup
    token = issue_token(bucket, "operator")
    browser = Browser()
    status, page, set_cookie = browser.sign_in(console, token)
    assert status == 200 and token not in page and token not in set_cookie
    name = cookie_name(console.port)
    assert set_cookie.startswith(f"{name}=") and "HttpOnly" in set_cookie and "SameSite=strict" in set_cookie
    assert "Path=/" in set_cookie and "Secure" not in set_cookie  # plain HTTP on loopback: no Secure
    assert browser.cookies[name] != token
    status, _, text = browser.send(console.port, "GET", "/api/overview")
    assert status == 200 and json.loads(text)["who"] == "operator"

    status, _, text = browser.act(console)  # the page's own request
    assert status == 200 and console.done == [("operator", {"confirm": "q"})]

    other_port = f"http://127.0.0.1:{console.port + 1}"
    forged = (
        # (what, request as another page would make it the browser send, status)
        ("a text/plain form from another port", {"Content-Type": "text/plain", "Origin": other_port}, 403),
        (
            "an urlencoded form from another port",
            {"Content-Type": "application/x-www-form-urlencoded", "Origin": other_port},
            403,
        ),
        (
            "a fetch from another port",
            {"Content-Type": "text/plain", "Origin": other_port, "Sec-Fetch-Site": "same-site"},
            403,
        ),
        ("a text/plain form without an Origin", {"Content-Type": "text/plain"}, 403),
    )
    for what, headers, code in forged:
        body = b'{"confirm":"q","x":"="}'
        status, _, text = browser.send(console.port, "POST", "/api/query/q/savepoint", body=body, headers=headers)
        assert status == code and text.count("\n") == 0 and error_of(text).startswith("refused"), what
    checks = (
        ("no anti-forgery key", {"key": ""}, "anti-forgery key"),
        ("the key but another origin", {"origin": other_port}, f"not from this console ({console.origin})"),
        ("the key but made by another page", {"Sec_Fetch_Site": "same-site"}, "another origin (same-site)"),
        ("the key but from another site", {"Sec_Fetch_Site": "cross-site"}, "another origin (cross-site)"),
    )
    for what, variation, said in checks:
        status, _, text = browser.act(console, **variation)
        assert status == 403 and said in error_of(text), what
    status, _, text = browser.act(console, Content_Type="text/plain")  # every check passed but the body's type
    assert status == 415 and "application/json" in error_of(text)
    assert len(console.done) == 1  # none of them reached the action

    # a page of another origin can read nothing either: an embedded request is refused, a link is followed
    status, _, _ = browser.send(
        console.port, "GET", "/api/overview", headers={"Sec-Fetch-Site": "same-site", "Sec-Fetch-Mode": "no-cors"}
    )
    assert status == 403
    navigate = {"Sec-Fetch-Site": "same-site", "Sec-Fetch-Mode": "navigate"}
    assert browser.send(console.port, "GET", "/api/overview", headers=navigate)[0] == 200


def test_another_service_on_the_host_receives_no_usable_credential_and_sign_outs_are_per_console(setup):
    bucket, _, (first, second) = setup
    token = issue_token(bucket, "operator")
    browser = Browser()
    assert browser.sign_in(first, token)[0] == 200
    assert browser.sign_in(second, token)[0] == 200
    assert {cookie_name(first.port), cookie_name(second.port)} == set(browser.cookies)  # two sign-ins, kept apart

    # what a browser sends any other service on 127.0.0.1: every cookie of the host
    received = dict(browser.cookies)
    assert token not in received.values()
    for value in received.values():
        for console in (first, second):
            status, _, _ = Browser().send(
                console.port, "GET", "/api/overview", headers={"Authorization": f"Bearer {value}"}
            )
            assert status == 401  # a sign-in is no token
    thief = Browser()
    thief.cookies = received
    for console in (first, second):  # the cookie without the key the console's script holds cannot act
        status, _, text = thief.act(console, key="")
        assert status == 403 and "anti-forgery key" in error_of(text)
    assert first.done == [] and second.done == []

    status, _, _ = browser.send(
        first.port,
        "POST",
        "/logout",
        headers={"Origin": first.origin, "X-Console-Key": browser.key_by_origin[first.origin]},
    )
    assert status == 303 and cookie_name(first.port) not in browser.cookies
    assert browser.send(second.port, "GET", "/api/overview")[0] == 200  # still signed in to the other console
    assert browser.act(second)[0] == 200
    status, _, text = thief.send(first.port, "GET", "/api/overview")  # the signed-out cookie opens nothing
    assert status == 401 and "not signed in" in error_of(text)
    assert thief.send(second.port, "GET", "/api/overview")[0] == 200  # the one still signed in: until it ends

    # bearer clients (scripts, Prometheus) need no sign-in, key or Origin
    status, _, _ = Browser().send(
        first.port,
        "POST",
        "/api/query/q/savepoint",
        body=b'{"confirm": "q"}',
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    assert status == 200 and first.done == [("operator", {"confirm": "q"})]


def test_a_key_from_another_sign_in_an_expired_or_revoked_sign_in_and_a_replayed_sign_in_are_refused(setup):
    bucket, clock, (console, _) = setup
    token = issue_token(bucket, "operator")
    alice, bob = Browser(), Browser()
    assert alice.sign_in(console, token)[0] == 200 and bob.sign_in(console, token)[0] == 200
    status, _, text = alice.act(console, key=bob.key_by_origin[console.origin])
    assert status == 403 and "anti-forgery key" in error_of(text)
    assert console.done == []

    # a sign-in request sent again (its nonce used), or one of an old form
    status, _, form = alice.send(console.port, "GET", "/login")
    nonce = re.search(r'name="nonce" value="([^"]+)"', form).group(1)
    fields = {"token": token, "next": "/", "nonce": nonce}
    assert alice.post_form(console, fields)[0] == 200
    status, page, set_cookie = alice.post_form(console, fields)
    assert status == 403 and "sent already" in page and set_cookie == ""
    status, _, form = alice.send(console.port, "GET", "/login")
    stale = {"token": token, "next": "/", "nonce": re.search(r'name="nonce" value="([^"]+)"', form).group(1)}
    clock.now += NONCE_LIFETIME + 1
    assert alice.post_form(console, stale)[0] == 403
    for fields in ({"token": token, "next": "/"}, {"token": token, "next": "/", "nonce": "made-up"}):
        assert alice.post_form(console, fields)[0] == 403
    status, page, _ = alice.sign_in(console, token, origin="http://127.0.0.1:1")  # from another origin's page
    assert status == 403 and "not from this console" in page
    for wrong in ("not-the-token", SESSION_TOKEN):  # the session's token is for its CLI, not for signing in
        status, page, set_cookie = alice.sign_in(console, wrong)
        assert status == 401 and "not one of this console" in page and set_cookie == ""
    assert (
        Browser().send(console.port, "GET", "/api/overview", headers={"Authorization": f"Bearer {SESSION_TOKEN}"})[0]
        == 200
    )

    # an idle sign-in expires; a lasting one expires at its lifetime, however active
    carol = Browser()
    assert carol.sign_in(console, token)[0] == 200
    clock.now += 601
    status, _, text = carol.send(console.port, "GET", "/api/overview")
    assert status == 401 and "expired" in error_of(text)
    assert carol.sign_in(console, token)[0] == 200
    for _ in range(7):
        clock.now += 500
        assert carol.send(console.port, "GET", "/api/overview")[0] == 200
    clock.now += 200  # 3700 s after signing in
    status, _, text = carol.send(console.port, "GET", "/api/overview", headers={"Accept": "text/html"})
    assert status == 401 and "expired" in text and 'name="nonce"' in text  # a browser gets the form, and why

    # a token made anew ends the sign-ins made with the one it replaces
    assert bob.send(console.port, "GET", "/api/overview")[0] == 401  # idle past its time too: sign in again
    assert bob.sign_in(console, token)[0] == 200
    issue_token(bucket, "operator")
    status, _, text = bob.send(console.port, "GET", "/api/overview")
    assert status == 401 and "replaced or removed" in error_of(text)
    assert console.done == []
