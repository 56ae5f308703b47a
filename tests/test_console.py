"""The web console in a real browser (Debian's Chromium through Playwright), over a running session.

One session hosts three queries while events keep arriving: ``q-a`` (a filter; its description holds a
``<script>``), ``q-b`` (deduplication, so it has state) and ``q-quiet``, whose source got one file and
then nothing (so it stalls). ``sql-runner console`` runs as its own process over the same state store,
reading the desired manifests from an author's working copy (so the session does not deploy the edit
the test makes there).

What a user sees is checked: no page or figure without the token (401), the sign-in's cookie is
HttpOnly, SameSite=Strict and not the token, the overview's rows/s and batches change as the queries
run, the stalled query shows as stalled, ``/metrics`` parses with Prometheus' own parser, the query
page shows the edited manifest's diff and the plan's verdict, a preview's rows arrive in the page from
the session, an action needs the query's name typed again and is recorded in history under the token's
name, the session's own console is read-only. Bad inputs tried: no token, a wrong token, a wrong
scheme, a wrong sign-in, a GET on an action, a wrong confirmation, an action on the read-only console,
a manifest naming a missing column, a description with a script.
"""

from __future__ import annotations

import json
import re
import shutil
import threading
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout
from prometheus_client.parser import text_string_to_metric_families

from runner.core.bucket import LocalBucket
from runner.core.protocol.history import read_history
from tests.browser import browser, screenshot
from tests.clihelpers import cli, wait_for
from tests.conftest import METADATA_DDL, ProjectDir
from tests.consolehelpers import ConsoleProcess, call

pytestmark = [pytest.mark.spark, pytest.mark.e2e, pytest.mark.browser]


def ddl(data: Path) -> str:
    """The tables, at absolute paths: the author's working copy declares the very same tables."""
    return "".join(
        f"""
CREATE TABLE `demo`.`{name}` (id STRING, amount DOUBLE)
WITH ('connector' = 'filesystem', 'path' = '{data / name}', 'format' = 'json');
"""
        for name in ("events", "quiet")
    ) + "".join(
        f"""
CREATE TABLE `demo`.`{name}` (id STRING, amount DOUBLE{METADATA_DDL})
WITH ('connector' = 'filesystem', 'path' = '{data / name}', 'format' = 'json');
"""
        for name in ("out-a", "out-b", "out-q")
    )


TEMPLATE = """
mode: session
trigger-interval: 1 second
sparkProperties: {spark.sql.shuffle.partitions: "2"}
"""
SCRIPT = "<script>window.pwned = 1</script>"
Q_A = f"""
name: q-a
description: "{SCRIPT} large amounts"
target-table: "`demo`.`out-a`"
sql: "SELECT id, amount FROM `demo`.`events` WHERE amount >= 5"
"""
Q_B = """
name: q-b
description: first event per id
target-table: "`demo`.`out-b`"
code: |
  execution_output = table("`demo`.`events`").dropDuplicates(["id"]).select("id", "amount")
"""
Q_QUIET = """
name: q-quiet
description: its source stopped
target-table: "`demo`.`out-q`"
sql: "SELECT id, amount FROM `demo`.`quiet`"
"""
SIZES = (2, 9, 5, 14, 3)  # events per file, in turn, so that rates vary
VIEWER_ZONE = "Asia/Kathmandu"  # UTC+05:45: a time shown in the viewer's zone cannot pass for UTC


class Feeder(threading.Thread):
    def __init__(self, folder: Path):
        super().__init__(daemon=True)
        self.folder, self.files, self.halt = folder, 0, threading.Event()

    def write(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        size = SIZES[self.files % len(SIZES)]
        lines = [json.dumps({"id": f"e{self.files:04d}-{n}", "amount": float(n)}) for n in range(size)]
        tmp = self.folder / f".f{self.files:05d}.tmp"
        tmp.write_text("\n".join(lines) + "\n")
        tmp.rename(self.folder / f"f{self.files:05d}.json")
        self.files += 1

    def run(self) -> None:
        while not self.halt.wait(0.7):
            self.write()


def row(page, name: str):
    return page.locator(f'#queries tbody tr[data-name="{name}"]')


def cells(page, name: str) -> list[str]:
    return row(page, name).locator("td").all_inner_texts()


@pytest.fixture
def setup(project: ProjectDir, tmp_path: Path):
    project.ddl("tables", ddl(project.root / "data"))
    project.template(TEMPLATE)
    project.manifest("q-a", Q_A)
    project.manifest("q-b", Q_B)
    project.manifest("q-quiet", Q_QUIET)
    author = tmp_path / "author"  # an author's working copy of the same project
    shutil.copytree(project.root / "manifests", author / "manifests")
    (project.root / "data" / "quiet").mkdir(parents=True)
    (project.root / "data" / "quiet" / "only.json").write_text('{"id": "q1", "amount": 1.0}\n')
    feeder = Feeder(project.root / "data" / "events")
    feeder.write()
    feeder.start()
    cli(project, "session", "start")
    state = project.root / ".sql-runner"
    status = state / "manifests" / "status"

    def ran(name: str) -> bool:
        path = status / f"{name}.json"
        return path.exists() and json.loads(path.read_text()).get("progress") is not None

    wait_for(lambda: all(ran(n) for n in ("q-a", "q-b", "q-quiet")), "the three queries' first micro-batches")
    console = ConsoleProcess(author, state, "--allow-actions", "--stalled-after", "3", "--stalled-min-seconds", "6")
    token = cli(project, "console", "--print-token").stdout.strip()
    try:
        yield project, author, console, token
    finally:
        console.stop()
        feeder.halt.set()
        cli(project, "session", "stop", check=False)


def test_the_console_shows_each_query_its_verdict_and_live_rows_only_to_a_token_holder(setup):
    project, author, console, token = setup
    url = console.url
    refused_without_a_token(url, token)
    with browser() as chromium:
        # The test's own waits evaluate script, which the console's policy forbids; without the policy a
        # script left unescaped would run, so the escaping is checked on its own.
        context = chromium.new_context(
            viewport={"width": 1500, "height": 900}, bypass_csp=True, timezone_id=VIEWER_ZONE, locale="en-GB"
        )
        page = context.new_page()
        sign_in(page, url, token)
        port = int(url.rsplit(":", 1)[1])
        cookie = next(c for c in context.cookies() if c["name"] == f"sql_runner_console_{port}")
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["value"] != token
        overview_changes_and_shows_the_stalled_query(page, url)
        metrics_parse(url, token)
        a_savepoint_keeps_the_last_batchs_figures(page, url, token, project)
        edited_manifest_shows_its_diff_and_verdict(page, url, author)
        what_an_on_call_engineer_reads(page, url, project)
        preview_rows_arrive(page, url)
        an_action_is_confirmed_and_recorded(page, url, project)
    the_sessions_console_is_read_only(project, token)
    status, _, text = call(f"{url}/query/q-a/log", token)
    assert status == 200 and "q-a" in text  # the session's log, its lines about q-a


def refused_without_a_token(url: str, token: str) -> None:
    pages = ("/", "/api/overview", "/metrics", "/query/q-a", "/api/query/q-a", "/preview", "/api/query/q-a/verdict")
    for path in pages:
        for given, scheme in ((None, "Bearer"), ("not-the-token", "Bearer"), (token, "Basic")):
            status, _, text = call(url + path, given, scheme=scheme)
            assert status == 401, (path, given, scheme)
            assert "q-a" not in text and "q-quiet" not in text, path  # no page leaks state
    status, _, text = call(f"{url}/api/query/q-b/savepoint", method="POST", body={"confirm": "q-b"})
    assert status == 401
    status, _, _ = call(f"{url}/api/query/q-b/savepoint", token)  # no state-changing GET
    assert status == 405
    status, headers, _ = call(f"{url}/api/overview", token)
    assert status == 200 and "script-src 'self'" in headers["content-security-policy"]


def sign_in(page, url: str, token: str) -> None:
    answer = page.goto(url + "/")
    assert answer.status == 401 and page.locator("#token").is_visible()
    assert "q-a" not in page.content()
    screenshot(page, "sign-in")
    page.fill("#token", "not-the-token")
    page.click("#sign-in")
    assert page.locator("#login-error").is_visible()
    page.fill("#token", token)
    page.click("#sign-in")
    page.wait_for_selector('#queries tbody tr[data-name="q-a"]')


def overview_changes_and_shows_the_stalled_query(page, url: str) -> None:
    for name in ("q-a", "q-b", "q-quiet"):
        page.wait_for_selector(f'#queries tbody tr[data-name="{name}"]')
    description = row(page, "q-a").locator("td").first.inner_text()
    assert SCRIPT in description  # shown as text
    assert page.evaluate("typeof window.pwned") == "undefined"  # and never run
    rates: dict[str, set[str]] = {"q-a": set(), "q-b": set()}
    batches: dict[str, set[str]] = {"q-a": set(), "q-b": set()}

    def changed() -> bool:  # each figure seen with two values, as the page refreshes itself
        for name in rates:
            shown = cells(page, name)
            rates[name].add(shown[4].splitlines()[0])
            batches[name].add(shown[10].split(",")[0])
        return all(len(rates[n]) >= 2 and len(batches[n]) >= 2 for n in rates)

    wait_for(changed, "the overview's rates and batches to change", 60, explain=lambda: (rates, batches))
    for name in rates:
        assert row(page, name).get_attribute("data-state") == "running"
        assert row(page, name).locator("svg.spark polyline").count() == 2  # rows/s and batch ms over time
    page.wait_for_selector('#queries tbody tr[data-name="q-quiet"][data-state="stalled"]', timeout=60_000)
    assert "no micro-batch committed" in cells(page, "q-quiet")[3]
    assert row(page, "q-a").get_attribute("data-state") == "running"  # the others keep running
    page.fill("#filter", "stalled")
    assert page.locator("#queries tbody tr").count() == 1
    page.fill("#filter", "")
    page.click('#queries th[data-key="rows_per_second"]')
    screenshot(page, "overview")


def metrics_parse(url: str, token: str) -> None:
    status, headers, text = call(f"{url}/metrics", token)
    assert status == 200 and headers["content-type"].startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append(sample)

    def value(name: str, **labels: str) -> float:
        found = [s.value for s in samples[name] if all(s.labels.get(k) == v for k, v in labels.items())]
        assert len(found) == 1, (name, labels, found)
        return found[0]

    assert value("sql_runner_query_state", query="q-quiet", state="stalled", team="local", version="1") == 1
    assert value("sql_runner_query_state", query="q-quiet", state="running") == 0
    assert value("sql_runner_query_state", query="q-a", state="running", mode="session") == 1
    assert value("sql_runner_query_input_rows_per_second", query="q-a") >= 0
    assert value("sql_runner_query_last_batch_age_seconds", query="q-quiet") >= 6
    assert value("sql_runner_queries_deployed", team="local") == 3
    assert value("sql_runner_session_up", team="local") == 1
    assert value("sql_runner_session_queries", state="running") == 3


def a_savepoint_keeps_the_last_batchs_figures(page, url: str, token: str, project: ProjectDir) -> None:
    """q-quiet's source has nothing new: after a savepoint its new run has no micro-batch of its own, and the
    overview and its page show the one the run continues from, not dashes or "no micro-batch yet"."""
    path = project.root / ".sql-runner" / "manifests" / "status" / "q-quiet.json"
    before = json.loads(path.read_text())
    status, _, text = call(f"{url}/api/query/q-quiet/savepoint", token, method="POST", body={"confirm": "q-quiet"})
    assert status == 200 and json.loads(text)["result"] == "ok", text

    def restarted() -> dict | None:
        now = json.loads(path.read_text())
        return now if now.get("run-id") != before["run-id"] or now.get("started-at") != before["started-at"] else None

    after = wait_for(restarted, "q-quiet's run after the savepoint")
    assert after.get("progress") is None and after["previous-progress"]["batch"] == before["progress"]["batch"]

    def continued() -> bool:  # the console reads the store afresh at most every second: within a moment
        rows = json.loads(call(f"{url}/api/overview", token)[2])["rows"]
        return "before the restart" in next(r for r in rows if r["name"] == "q-quiet")["shown"]["last_batch"]

    wait_for(continued, "the console's overview to show q-quiet's new run continuing", 30)
    page.goto(url + "/")
    page.wait_for_selector('#queries tbody tr[data-name="q-quiet"]')
    shown = cells(page, "q-quiet")
    assert shown[10].startswith(f"#{before['progress']['batch']}, ") and "before the restart" in shown[10], shown
    assert shown[4].splitlines()[0] != "–" and shown[5].splitlines()[0] != "–", shown  # rows/s, batch duration
    page.goto(f"{url}/query/q-quiet")
    assert page.locator("#graph .source").count() == 1 and "before the restart" in page.inner_text("#graph-batch")


def edited_manifest_shows_its_diff_and_verdict(page, url: str, author: Path) -> None:
    manifest = author / "manifests" / "q-a.yaml"
    manifest.write_text(manifest.read_text().replace("amount >= 5", "amount >= 7"))
    page.goto(f"{url}/query/q-a")
    assert SCRIPT in page.inner_text("#description")
    assert page.evaluate("typeof window.pwned") == "undefined"
    removed = page.locator("#diff .del").all_inner_texts()
    added = page.locator("#diff .add").all_inner_texts()
    assert any("amount >= 5" in line for line in removed) and any("amount >= 7" in line for line in added)
    page.wait_for_selector("#verdict-kind", timeout=180_000)  # the console's Spark analyses the query
    reasons = page.locator("#verdict .reasons li").all_inner_texts()
    assert page.inner_text("#verdict-kind") == "restore", reasons
    assert any("compatible" in reason for reason in reasons), reasons
    assert page.locator("#graph .source").count() == 1 and page.locator("#graph .sink").count() == 1
    assert page.locator("#history li").count() >= 1
    screenshot(page, "query")
    page.goto(f"{url}/query/q-b")
    page.wait_for_selector("#verdict-kind", timeout=180_000)
    assert page.inner_text("#verdict-kind") == "nothing"  # its desired manifest is the deployed one
    assert page.locator("#diff-none").is_visible()
    assert "dedupe" in page.inner_text("#graph").lower()  # its stateful operator, with its state


def what_an_on_call_engineer_reads(page, url: str, project: ProjectDir) -> None:
    """On q-b's page: the manifest as its author wrote it, times in the viewer's zone, whole words."""
    page.goto(f"{url}/query/q-b")
    deployed = page.locator("#deployed").text_content()
    assert "code: |" in deployed and '  execution_output = table("`demo`.`events`")' in deployed, deployed
    assert "\\n" not in deployed and "''" not in deployed
    history = read_history(LocalBucket(project.root / ".sql-runner" / "manifests"), "q-b")
    first = datetime.fromisoformat(history[0].at).astimezone(ZoneInfo(VIEWER_ZONE))
    shown = page.locator("#history time").last.inner_text()  # newest first: the last is the first decision
    assert first.strftime("%H:%M:%S") in shown, (shown, first)  # to the second, in the viewer's zone
    text = page.inner_text("main")
    # "1 row" (but "9.1 rows/s" is a rate), no "(s)", figures rounded
    assert not re.search(r"(?<![\d.])1 rows\b|\(s\)|\d\.\d{4,}", text), text
    missing = page.goto(f"{url}/query/no-such-query")
    assert missing.status == 404 and "no query named no-such-query" in page.inner_text("#missing")
    assert page.goto(f"{url}/nothing/here").status == 404 and page.locator("#missing").is_visible()


def preview_rows_arrive(page, url: str) -> None:
    page.goto(f"{url}/preview")
    page.fill("#editor", "SELECT id, amount FROM `demo`.`events` WHERE amount > 1")
    page.fill("#limit", "40")
    page.fill("#timeout", "90")  # it ends at 40 rows; a loaded machine may take long to start it
    page.click("#run")
    try:
        page.wait_for_function("document.querySelectorAll('#rows tbody tr').length > 0", timeout=100_000)
    except PlaywrightTimeout:
        raise AssertionError(f"no preview rows: {page.inner_text('#preview-state')}") from None
    assert re.search(r"\d+ rows? (so far|in)", page.inner_text("#preview-state"))
    page.wait_for_function("document.querySelectorAll('#rows tbody tr').length >= 40", timeout=60_000)
    assert page.locator("#rows thead th").all_inner_texts() == ["id", "amount"]
    page.wait_for_selector("#run:enabled", timeout=60_000)
    assert "by session" in page.inner_text("#preview-state")
    screenshot(page, "preview")
    page.check('input[value="manifest"]')
    page.fill("#editor", 'name: q-new\ntarget-table: "`demo`.`out-a`"\nsql: "SELECT nope FROM `demo`.`events`"\n')
    page.click("#validate")
    page.wait_for_selector("#problems li")
    assert "nope" in page.inner_text("#problems")


def an_action_is_confirmed_and_recorded(page, url: str, project: ProjectDir) -> None:
    history = LocalBucket(project.root / ".sql-runner" / "manifests")
    before = len(read_history(history, "q-b"))
    page.goto(f"{url}/query/q-b")
    answers = iter(["not-q-b", "q-b"])
    page.on("dialog", lambda dialog: dialog.accept(next(answers)))
    page.click('[data-action="savepoint"]')
    page.wait_for_function("document.querySelector('#action-result').textContent.includes('refused')")
    assert "confirm" in page.inner_text("#action-result")
    assert len(read_history(history, "q-b")) == before  # nothing done
    page.click('[data-action="savepoint"]')
    page.wait_for_function("document.querySelector('#action-result').textContent.includes('(ok)')", timeout=180_000)
    entry = read_history(history, "q-b")[-1]
    assert entry.requested_by == "console:operator" and entry.outcome.savepoint is not None
    page.wait_for_selector("#savepoints tbody tr")
    assert "asked by console:operator" in page.inner_text("#history")


def the_sessions_console_is_read_only(project: ProjectDir, token: str) -> None:
    control = json.loads((project.root / ".sql-runner" / "manifests" / "session" / "control.json").read_text())
    status, _, text = call(f"{control['url']}/api/overview", token)
    assert status == 200 and {row["name"] for row in json.loads(text)["rows"]} == {"q-a", "q-b", "q-quiet"}
    status, _, text = call(f"{control['url']}/api/query/q-b/stop", token, method="POST", body={"confirm": "q-b"})
    assert status == 403 and "read-only" in text
    status, _, _ = call(f"{control['url']}/api/overview")
    assert status == 401
