"""The console's HTTP stack, tokens and stall rule, without Spark or a browser (tests/test_console.py has both).

Over a real server on loopback: a token is required (bearer or the sign-in cookie, which is HttpOnly and
SameSite=Strict), a body over the limit is refused before it is read, signing in never sends a browser
to another site, and every answer carries the security headers. Bad inputs tried: no token, an empty
token, a token with spaces, a wrong token, a 2 MiB body, sign-in redirects to other sites, token names
with capitals, slashes, spaces or 65 characters.
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.request
from datetime import UTC, datetime, timedelta

import pytest
from starlette.responses import JSONResponse
from starlette.routing import Route

from runner.console.app import local_path
from runner.console.http import COOKIE, MAX_BODY, Server, application, holder_of
from runner.console.overview import Stall, console_state
from runner.core.bucket import LocalBucket
from runner.core.manifest import Manifest
from runner.core.protocol.console import ensure_token, read_access
from runner.core.protocol.deployed import DeploymentRecord
from runner.core.protocol.status import BatchProgress, JobState, JobStatus
from runner.deploy.status import JobView
from runner.targets.base import JobIdentity, RunningJob


@pytest.fixture
def server():
    async def echo(request):
        return JSONResponse({"who": holder_of(request), "bytes": len(await request.body())})

    tokens = {"s3cret-token": "alice"}
    app = application(
        [Route("/echo", echo, methods=["GET", "POST"])], tokens.get, lambda target: f"<form>{target}</form>"
    )
    served = Server(app, address="127.0.0.1", port=0, name="test-http")
    served.start()
    yield served
    served.stop()


def ask(url: str, *, headers: dict | None = None, data: bytes | None = None) -> tuple[int, dict, str]:
    request = urllib.request.Request(url, data=data, headers=headers or {}, method="POST" if data else "GET")
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, dict(answer.headers), answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read().decode()


def test_every_request_needs_a_token_and_every_answer_is_locked_down(server):
    url = f"{server.url}/echo"
    for headers in ({}, {"Authorization": "Bearer "}, {"Authorization": "Bearer wrong"}, {"Cookie": f"{COOKIE}=x"}):
        status, answered, body = ask(url, headers=headers)
        assert status == 401 and "token is required" in body, headers
        assert answered["x-frame-options"] == "DENY" and "default-src 'self'" in answered["content-security-policy"]
    status, _, body = ask(url, headers={"Accept": "text/html"})
    assert status == 401 and body == "<form>/echo</form>"  # a browser gets the sign-in form, nothing else
    for headers in ({"Authorization": "Bearer s3cret-token"}, {"Cookie": f"{COOKIE}=s3cret-token"}):
        status, answered, body = ask(url, headers=headers)
        assert status == 200 and json.loads(body)["who"] == "alice"
        assert answered["cache-control"] == "no-store" and answered["x-content-type-options"] == "nosniff"


def test_a_body_over_the_limit_is_refused_before_it_is_read(server):
    token = {"Authorization": "Bearer s3cret-token"}
    # the length said is over the limit: refused on the headers alone, nothing of the body read
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    connection.putrequest("POST", "/echo")
    for header, value in {**token, "Content-Length": str(2 * MAX_BODY)}.items():
        connection.putheader(header, value)
    connection.endheaders(b"x" * 100)
    answer = connection.getresponse()
    assert answer.status == 413 and "at most" in answer.read().decode()
    connection.close()
    status, _, body = ask(f"{server.url}/echo", headers=token, data=b"x" * 100)
    assert status == 200 and json.loads(body)["bytes"] == 100


@pytest.mark.parametrize("target", ["//evil.example/x", "https://evil.example/", "/\\evil.example", "evil", ""])
def test_signing_in_never_sends_the_browser_elsewhere(target):
    assert local_path(target) == "/"
    assert local_path("/query/q-a?x=1") == "/query/q-a?x=1"


def test_console_tokens_are_named_kept_and_matched_whole(tmp_path):
    bucket = LocalBucket(tmp_path)
    first = ensure_token(bucket, "operator")
    assert ensure_token(bucket, "operator") == first  # kept, not made again
    other = ensure_token(bucket, "alice@example.com")
    access = read_access(bucket)
    assert access.holder(first.token) == "operator" and access.holder(other.token) == "alice@example.com"
    assert access.holder(first.token[:-1]) is None and access.holder("") is None
    for bad in ("Operator", "a/b", "two words", "x" * 65, ""):
        with pytest.raises(ValueError, match="token name"):
            ensure_token(bucket, bad)
    assert [t.name for t in read_access(bucket).tokens] == ["operator", "alice@example.com"]  # nothing added


def view(*, trigger: str, last_batch_ago: float | None, state: str = "running", started_ago: float = 600) -> JobView:
    now = datetime.now(UTC)
    manifest = Manifest.model_validate(
        {"name": "q", "target-table": "`t`.`x`", "sql": "SELECT 1", "trigger-interval": trigger}
    )
    record = DeploymentRecord(manifest, (), (), "run-1", "session", now - timedelta(seconds=started_ago))
    progress = None
    if last_batch_ago is not None:
        began = now - timedelta(seconds=last_batch_ago + 0.5)
        progress = BatchProgress(batch=3, timestamp=began.isoformat(), batch_duration_ms=500)
    status = JobStatus(
        name="q",
        version=1,
        state=JobState.RUNNING,
        started_at=(now - timedelta(seconds=started_ago)).isoformat(),
        updated_at=now.isoformat(),
        progress=progress,
    )
    job = RunningJob(JobIdentity("local", "q", 1, "run-1"), "session", "q@s")
    return JobView(record, job, status, state, None)


def test_a_running_query_is_stalled_after_its_trigger_intervals_without_a_batch_and_never_sooner_than_the_floor():
    stall, now = Stall(batches=10, at_least=60), datetime.now(UTC).timestamp()
    assert console_state(view(trigger="10 seconds", last_batch_ago=90), stall, now)[0] == "running"  # < 100 s
    state, why = console_state(view(trigger="10 seconds", last_batch_ago=110), stall, now)
    assert state == "stalled" and "no micro-batch committed for 11" in why and "100s allowed" in why
    assert console_state(view(trigger="1 second", last_batch_ago=30), stall, now)[0] == "running"  # the floor
    assert console_state(view(trigger="1 second", last_batch_ago=61), stall, now)[0] == "stalled"
    never = console_state(view(trigger="1 second", last_batch_ago=None, started_ago=120), stall, now)
    assert never[0] == "stalled" and "since it started" in never[1]
    assert console_state(view(trigger="1 second", last_batch_ago=None, started_ago=5), stall, now)[0] == "running"
    assert console_state(view(trigger="1 second", last_batch_ago=500, state="degraded"), stall, now)[0] == "stalled"
    parked = view(trigger="1 second", last_batch_ago=500, state="failed (parked)")
    assert console_state(parked, stall, now)[0] == "parked"  # not running: never stalled
