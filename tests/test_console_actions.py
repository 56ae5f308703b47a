"""The console without a session: previews and validation on its own local Spark, and the actions on an
application-mode job (deploy the desired manifest, take a savepoint, stop), each recorded under the
token's name; in Chromium, a signed-in browser's action forged by a page on another port of the same host.

Bad inputs tried: a query naming a missing column (preview and validate), neither or both of sql and
manifest, an action without confirmation, an action on a query that is not deployed, a body that is not
JSON; from another port's page, a ``text/plain`` form, an URL-encoded form and a ``fetch`` (plain and as
JSON) posting to an action, and an image and a script embedding the console's JSON.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from demo.transactions import transactions, write_batch
from runner.core.bucket import LocalBucket
from runner.core.protocol.history import read_history
from tests.browser import browser
from tests.clihelpers import START, cli, status, wait_for
from tests.conftest import ProjectDir
from tests.consolehelpers import ConsoleProcess, call

pytestmark = [pytest.mark.spark, pytest.mark.e2e, pytest.mark.browser]


def attack_pages(action: str, overview: str, name: str) -> dict[str, str]:
    """Pages of another site on the same host, each making a signed-in browser post to ``action``."""
    body = json.dumps({"confirm": name, "x": "="})
    field, value = body.split("=", 1)
    auto = "<script>document.forms[0].submit()</script>"
    sent = "document.title = 'sent'"
    return {
        "/text-plain.html": (
            f'<form method="post" action="{action}" enctype="text/plain">'
            f"<input type=\"hidden\" name='{field}' value='{value}'></form>{auto}"
        ),
        "/urlencoded.html": (
            f'<form method="post" action="{action}"><input type="hidden" name="confirm" value="{name}"></form>{auto}'
        ),
        "/fetch.html": (
            f"<script>fetch('{action}', {{method: 'POST', mode: 'no-cors', credentials: 'include', "
            f"headers: {{'Content-Type': 'text/plain'}}, body: '{json.dumps({'confirm': name})}'}})"
            f".finally(() => {{ {sent} }})</script>"
        ),
        "/fetch-json.html": (
            f"<script>fetch('{action}', {{method: 'POST', credentials: 'include', "
            f"headers: {{'Content-Type': 'application/json'}}, body: '{json.dumps({'confirm': name})}'}})"
            f".catch(() => null).finally(() => {{ {sent} }})</script>"
        ),
        "/embed.html": (
            f'<img src="{overview}" onerror="document.title = \'sent\'" onload="document.title = \'sent\'">'
            f'<script src="{overview}"></script>'
        ),
    }


class AttackSite:
    """A service on another port of 127.0.0.1 serving ``pages``, keeping every Cookie header it receives."""

    def __init__(self, pages: dict[str, str]):
        received: list[str] = []

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                received.append(self.headers.get("Cookie", ""))
                page = pages.get(self.path.split("?")[0], "<p>nothing here</p>").encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(page)))
                self.end_headers()
                self.wfile.write(page)

            def log_message(self, *args) -> None:
                pass

        self.received = received
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def previewed(url: str, token: str, body: dict) -> dict:
    status_code, _, text = call(f"{url}/api/preview", token, method="POST", body=body)
    assert status_code == 200, text
    run = json.loads(text)["id"]
    rows: list = []
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        _, _, text = call(f"{url}/api/preview/{run}?seen={len(rows)}", token)
        answer = json.loads(text)
        rows.extend(answer["rows"])
        if answer["done"]:
            return answer | {"rows": rows}
        time.sleep(0.3)
    raise AssertionError("the preview did not end")


def test_without_a_session_the_console_previews_on_its_own_spark_and_carries_out_actions(demo_project: ProjectDir):
    project = demo_project
    write_batch(project.root / "data" / "in", "a", transactions(40, start=START, seed=4))
    cli(project, "deploy")
    state = project.root / ".sql-runner"
    wait_for(lambda: status(project, "high-value")["last progress"], "the job's first micro-batch")
    console = ConsoleProcess(project.root, state, "--allow-actions")
    token = cli(project, "console", "--print-token").stdout.strip()
    url = console.url
    history = LocalBucket(state / "manifests")
    try:
        answer = previewed(url, token, {"sql": "SELECT transaction_id, amount FROM `demo`.`card-transactions`"})
        assert answer["answered_by"] == "local Spark" and answer["error"] is None
        assert answer["columns"] == ["transaction_id", "amount"] and len(answer["rows"]) == 20  # the default limit
        wrong = previewed(url, token, {"sql": "SELECT nope FROM `demo`.`card-transactions`"})
        assert "nope" in wrong["error"]
        for body in ({}, {"sql": "SELECT 1", "manifest": "name: x"}):
            status_code, _, text = call(f"{url}/api/preview", token, method="POST", body=body)
            assert status_code == 400 and "exactly one" in text

        manifest = (project.root / "manifests" / "high-value.yaml").read_text()
        edited = previewed(url, token, {"manifest": manifest.replace("amount > 500", "amount > 900"), "limit": 1000})
        expected = sorted(t.transaction_id for t in transactions(40, start=START, seed=4) if t.amount > 900)
        assert sorted(row[0] for row in edited["rows"]) == expected  # the edit, unsaved, over the live source
        status_code, _, text = call(f"{url}/api/validate", token, method="POST", body={"manifest": manifest})
        assert status_code == 200, text
        assert json.loads(text) == {
            "name": "high-value",
            "reads": ["`demo`.`card-transactions`"],
            "lookups": [],
            "writes": "`demo`.`high-value-tx`",
        }
        bad = manifest.replace("account_id, amount", "account_id, nope")
        status_code, _, text = call(f"{url}/api/validate", token, method="POST", body={"manifest": bad})
        assert status_code == 400 and "nope" in text

        for name, body, code in (
            ("high-value", {}, 400),
            ("high-value", {"confirm": "other"}, 400),
            ("not-deployed", {"confirm": "not-deployed"}, 404),
        ):
            status_code, _, text = call(f"{url}/api/query/{name}/savepoint", token, method="POST", body=body)
            assert status_code == code, text
        assert [e.decision for e in read_history(history, "high-value")] == ["start"]  # nothing done

        not_json = urllib.request.Request(
            f"{url}/api/query/high-value/savepoint",
            data=b'{"confirm": "high-value"}',
            headers={"Authorization": f"Bearer {token}", "Content-Type": "text/plain"},
            method="POST",
        )
        try:
            urllib.request.urlopen(not_json, timeout=30)
            raise AssertionError("a body not said to be JSON was taken")
        except urllib.error.HTTPError as error:
            assert error.code == 415 and "application/json" in error.read().decode()
        forged_in_a_browser_then_the_pages_own_button(url, token, history)

        path = project.root / "manifests" / "high-value.yaml"
        path.write_text(manifest.replace("amount > 500", "amount > 600"))
        wait_for(
            lambda: json.loads(call(f"{url}/api/query/high-value/verdict", token)[2]).get("decision") == "restore",
            "the verdict on the edited manifest",
            180,
        )
        for action, decision in (("deploy", "restore"), ("savepoint", "restore"), ("stop", "stop")):
            status_code, _, text = call(
                f"{url}/api/query/high-value/{action}", token, method="POST", body={"confirm": "high-value"}
            )
            assert status_code == 200 and json.loads(text)["result"] == "ok", (action, text)
            entry = read_history(history, "high-value")[-1]
            assert (entry.decision, entry.requested_by) == (decision, "console:operator"), action
        assert status(project, "high-value")["state"] == "stopped"
        assert "amount > 600" in (state / "manifests" / "deployed" / "high-value.yaml").read_text()
    finally:
        console.stop()


def forged_in_a_browser_then_the_pages_own_button(url: str, token: str, history: LocalBucket) -> None:
    before = len(read_history(history, "high-value"))
    action, overview = f"{url}/api/query/high-value/savepoint", f"{url}/api/overview"
    site = AttackSite(attack_pages(action, overview, "high-value"))
    try:
        with browser() as chromium:
            page = chromium.new_context().new_page()
            page.goto(url + "/")
            page.fill("#token", token)
            page.click("#sign-in")
            page.wait_for_selector('#queries tbody tr[data-name="high-value"]')
            for form in ("/text-plain.html", "/urlencoded.html"):  # the console's answer is where the form leads
                page.goto(site.url + form)
                page.wait_for_url(action)
                answer = page.inner_text("body")
                assert "refused" in answer and "another origin (same-site)" in answer, (form, answer)
            for script in ("/fetch.html", "/fetch-json.html", "/embed.html"):
                page.goto(site.url + script)
                page.wait_for_function("document.title === 'sent'")
            assert len(read_history(history, "high-value")) == before  # nothing was done

            # what the other service received: the sign-in's cookie, which is no token and cannot act
            cookies = {c.split("=", 1)[0]: c.split("=", 1)[1] for h in site.received for c in h.split("; ") if c}
            assert cookies and token not in cookies.values()
            for value in cookies.values():
                assert call(overview, value)[0] == 401
                sent = {"Cookie": "; ".join(f"{k}={v}" for k, v in cookies.items()), "Origin": url}
                forged = urllib.request.Request(
                    action,
                    data=b'{"confirm": "high-value"}',
                    headers=sent | {"Content-Type": "application/json"},
                    method="POST",
                )
                try:
                    urllib.request.urlopen(forged, timeout=30)
                    raise AssertionError("the cookie alone carried out an action")
                except urllib.error.HTTPError as error:
                    assert error.code == 403 and "anti-forgery key" in error.read().decode()
            assert len(read_history(history, "high-value")) == before

            page.goto(f"{url}/query/high-value")  # the console's own button still works
            page.on("dialog", lambda dialog: dialog.accept("high-value"))
            page.click('[data-action="savepoint"]')
            page.wait_for_selector("#action-result:has-text('(ok)')", timeout=180_000)  # the page's policy: no eval
            entry = read_history(history, "high-value")[-1]
            assert entry.requested_by == "console:operator" and len(read_history(history, "high-value")) == before + 1
            page.click("#sign-out")
            page.wait_for_url(f"{url}/login")
            assert page.goto(f"{url}/").status == 401
    finally:
        site.stop()
