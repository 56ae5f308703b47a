"""The console without a session: previews and validation on its own local Spark, and the actions on an
application-mode job (deploy the desired manifest, take a savepoint, stop), each recorded under the
token's name.

Bad inputs tried: a query naming a missing column (preview and validate), neither or both of sql and
manifest, an action without confirmation, an action on a query that is not deployed.
"""

from __future__ import annotations

import json
import time

from demo.transactions import transactions, write_batch
from runner.core.bucket import LocalBucket
from runner.core.protocol.history import read_history
from tests.clihelpers import START, cli, status, wait_for
from tests.conftest import ProjectDir
from tests.test_console import ConsoleProcess, call


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

        path = project.root / "manifests" / "high-value.yaml"
        path.write_text(manifest.replace("amount > 500", "amount > 600"))
        wait_for(
            lambda: json.loads(call(f"{url}/api/query/high-value/verdict", token)[2]).get("kind") == "restore",
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
