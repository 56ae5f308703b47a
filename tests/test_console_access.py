"""The console's HTTP stack, tokens and stall rule, without Spark or a browser (tests/test_console.py has both;
tests/test_console_signin.py signs in).

Over a real server on loopback: a token is required (a bearer token; a cookie is no token), a body over the
limit is refused before it is read, signing in never sends a browser to another site, every answer carries
the security headers, and the state store keeps the tokens' digests only. Bad inputs tried: no token, an
empty token, a token with spaces, a wrong token, the token as a cookie, a 2 MiB body, sign-in redirects to
other sites, token names with capitals, slashes, spaces or 65 characters, --print-token with
--revoke-token.
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

from runner.console.http import MAX_BODY, Access, Server, application, holder_of, local_path
from runner.console.overview import Stall, console_state
from runner.console.signin import cookie_name
from runner.core import layout
from runner.core.bucket import LocalBucket
from runner.core.identity import JobIdentity
from runner.core.manifest import Manifest
from runner.core.protocol.console import digest, issue_token, read_access, revoke_token, scrub
from runner.core.protocol.deployed import DeploymentRecord
from runner.core.protocol.status import BatchProgress, JobState, JobStatus
from runner.deploy.status import JobView
from runner.targets.base import RunningJob


@pytest.fixture
def server():
    async def echo(request):
        return JSONResponse({"who": holder_of(request), "bytes": len(await request.body())})

    tokens = {"s3cret-token": "alice"}
    app = application([Route("/echo", echo, methods=["GET", "POST"])], Access(tokens.get))
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
    cookie = {"Cookie": f"{cookie_name(server.port)}=s3cret-token"}  # no sign-ins here: a cookie opens nothing
    for headers in ({}, {"Authorization": "Bearer "}, {"Authorization": "Bearer wrong"}, cookie):
        status, answered, body = ask(url, headers=headers)
        assert status == 401 and "token is required" in body, headers
        assert answered["x-frame-options"] == "DENY" and "default-src 'self'" in answered["content-security-policy"]
    status, _, body = ask(url, headers={"Accept": "text/html"})
    assert status == 401 and "<form" not in body  # no sign-in form where there are no sign-ins
    status, answered, body = ask(url, headers={"Authorization": "Bearer s3cret-token"})
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


def test_console_tokens_are_shown_once_and_kept_as_digests(tmp_path):
    bucket = LocalBucket(tmp_path)
    first = issue_token(bucket, "operator")
    other = issue_token(bucket, "alice@example.com")
    kept = (tmp_path / layout.CONSOLE_ACCESS).read_text()
    assert first not in kept and other not in kept and digest(first) in kept  # whoever reads the bucket learns none
    access = read_access(bucket)
    assert access.holder(first) == "operator" and access.holder(other) == "alice@example.com"
    assert access.holder(first[:-1]) is None and access.holder("") is None and access.holder(digest(first)) is None
    again = issue_token(bucket, "operator")  # made anew: replaces the earlier one of that name
    access = read_access(bucket)
    assert again != first and access.holder(again) == "operator" and access.holder(first) is None
    for bad in ("Operator", "a/b", "two words", "x" * 65, ""):
        with pytest.raises(ValueError, match="token name"):
            issue_token(bucket, bad)
    assert [t.name for t in read_access(bucket).tokens] == ["alice@example.com", "operator"]  # nothing added
    assert revoke_token(bucket, "alice@example.com") and not revoke_token(bucket, "alice@example.com")
    assert read_access(bucket).holder(other) is None


def test_an_earlier_releases_access_file_still_opens_and_is_scrubbed_of_its_tokens(tmp_path):
    bucket = LocalBucket(tmp_path)
    earlier = {"tokens": [{"name": "operator", "token": "kept-in-the-clear", "created-at": "2026-10-01T00:00:00Z"}]}
    (tmp_path / "console").mkdir()
    (tmp_path / layout.CONSOLE_ACCESS).write_text(json.dumps(earlier))
    assert read_access(bucket).holder("kept-in-the-clear") == "operator"
    assert scrub(bucket) and not scrub(bucket)
    kept = (tmp_path / layout.CONSOLE_ACCESS).read_text()
    assert "kept-in-the-clear" not in kept and digest("kept-in-the-clear") in kept
    assert read_access(bucket).holder("kept-in-the-clear") == "operator"  # the same token still opens it


def view(*, trigger: str, last_batch_ago: float | None, state: str = "running", started_ago: float = 600) -> JobView:
    now = datetime.now(UTC)
    manifest = Manifest.model_validate(
        {"name": "q", "target-table": "`t`.`x`", "sql": "SELECT 1", "trigger-interval": trigger}
    )
    record = DeploymentRecord(
        manifest=manifest, run_id="run-1", target="session", deployed_at=now - timedelta(seconds=started_ago)
    )
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
    job = RunningJob(JobIdentity(team="local", name="q", version=1, run_id="run-1"), "session", "q@s")
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
