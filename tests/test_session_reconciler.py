"""The session's reconciler without Spark: desired manifests in a project folder, state in a local
folder, and ``SessionDouble`` in place of the session's query host. ``prepare`` stands in for the
Spark analysis: it loads the manifest and calls any change of its SQL an incompatible one.

What is checked is what an operator would see: which queries the session target was asked to start
or stop, what the deployed records and the history say, which manifests are reported invalid, and
which queries a restarted session keeps stopped."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from runner.authoring.project import Project
from runner.core import layout
from runner.core.errors import UserError
from runner.core.manifest import Manifest
from runner.core.protocol.history import read_history
from runner.core.protocol.session import read_held
from runner.core.querydiff import QueryDiff
from runner.core.reasons import Reason, codes
from runner.core.starts import SourceTable
from runner.deploy.deployer import Deployer
from runner.deploy.inputs import Prepared
from runner.deploy.settings import Settings
from runner.session.reconciler import Reconciler
from runner.state import records
from runner.state.desired import Desired
from runner.state.lease import lease
from runner.state.store import open_store
from runner.targets.modes import Targets
from tests.conftest import ProjectDir
from tests.recording_target import RecordingTarget

DDL = """
CREATE TABLE `demo`.`in` (id INT) WITH ('connector' = 'filesystem', 'path' = '/in', 'format' = 'json');
CREATE TABLE `demo`.`out` (id INT) WITH ('connector' = 'blackhole');
"""


class SessionDouble(RecordingTarget):
    """Test double of the team's session as a target: records starts and stops, finds what it started."""

    kind = layout.SESSION_TARGET


def query(name: str, sql: str = "SELECT id FROM `demo`.`in`", mode: str = "session") -> str:
    return f"name: {name}\ntarget-table: '`demo`.`out`'\nmode: {mode}\nsql: {sql}\n"


def prepare_without_spark(store):
    def prepare(project: Project, path: Path) -> Prepared:
        manifest = project.load_manifest(path)
        record, _ = records.read_deployed(store.manifests, manifest.name)
        diff = None
        if record is not None:
            changed = record.manifest.sql != manifest.sql
            reasons = (Reason.of("QUERY_MEANING_CHANGED"),) if changed else ()
            diff = QueryDiff(changed=changed, state_compatible=not changed, reasons=reasons)
        sources = (SourceTable(table="`demo`.`in`", connector="filesystem"),)
        return Prepared(manifest, project.display(path), project.catalog.tables, sources, diff)

    return prepare


def no_check(manifest: Manifest, file: str) -> None:
    if "forbidden" in manifest.spark_properties:
        raise UserError.of("SESSION_PROPERTY_NOT_PER_QUERY", file=file, field="sparkProperties.forbidden", key="x")


class World:
    def __init__(self, root: Path):
        self.project = ProjectDir(root / "project")
        self.project.ddl("tables", DDL)
        self.store = open_store(root / "state")
        self.application = RecordingTarget()
        self.session = SessionDouble()
        self.deployer = Deployer(None, Settings(self.store, Targets(self.application, self.session), "team", {}))

    def reconciler(self) -> Reconciler:
        """A reconciler as a (re)started session makes it."""
        return Reconciler(
            self.deployer,
            Desired(folder=self.project.root),
            target_kind=self.session.kind,
            prepare=prepare_without_spark(self.store),
            check=no_check,
        )

    def write(self, name: str, text: str) -> None:
        path = self.project.root / "manifests" / f"{name}.yaml"
        path.write_text(text)

    def decisions(self, name: str) -> list[str]:
        return [entry.decision for entry in read_history(self.store.manifests, name)]


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path)


def test_new_session_manifests_start_in_the_session_and_others_are_left_to_deploy(world: World):
    world.write("q-a", query("q-a"))
    world.write("q-b", query("q-b"))
    world.write("app", query("app", mode="application"))
    reconciler = world.reconciler()
    reconciler.round()
    assert sorted(world.session.calls) == [("submit", "q-a"), ("submit", "q-b")]
    assert world.application.calls == [], "an application-mode manifest is deploy's, not the session's"
    assert world.decisions("q-a") == ["start"] and world.decisions("app") == []
    record, _ = records.read_deployed(world.store.manifests, "q-a")
    assert record is not None and (record.target, record.version) == (layout.SESSION_TARGET, 1)

    reconciler.round()
    assert len(world.session.calls) == 2, "nothing changed: nothing is done"
    world.write("q-a", query("q-a"))  # written again, the same content: the listing changes, the fingerprint not
    reconciler.round()
    assert len(world.session.calls) == 2 and world.decisions("q-a") == ["start"]


def test_a_changed_manifest_is_deployed_again_and_a_deleted_one_is_removed_with_its_state_kept(world: World):
    world.write("q-a", query("q-a"))
    world.write("q-b", query("q-b"))
    reconciler = world.reconciler()
    reconciler.round()
    world.write("q-a", query("q-a", "SELECT id FROM `demo`.`in` WHERE id > 1"))
    (world.project.root / "manifests" / "q-b.yaml").unlink()
    reconciler.round()
    assert world.decisions("q-a") == ["start", "start"]
    (changed,) = read_history(world.store.manifests, "q-a")[1:]
    assert changed.version == 2 and codes(changed.reasons)[0] == "QUERY_MEANING_CHANGED"
    assert ("stop-gracefully", "q-a") in world.session.calls and world.session.calls[-1] != ("submit", "q-b")
    removed, _ = records.read_deployed(world.store.manifests, "q-b")
    assert removed is not None and removed.removed and world.decisions("q-b") == ["start", "remove"]
    assert world.store.savepoints.keys(layout.version_savepoints("q-b", 1)), "its state is kept in a savepoint"


def test_an_invalid_manifest_is_reported_and_changes_nothing_while_the_others_deploy(world: World):
    world.write("q-ok", query("q-ok"))
    world.write("q-bad", "name: q-bad\ntarget-table: '`demo`.`out`'\nmode: session\nsql: SELECT 1\nbogus: 1\n")
    world.write("q-prop", query("q-prop") + "sparkProperties:\n  forbidden: 'yes'\n")
    reconciler = world.reconciler()
    reconciler.round()
    assert world.session.calls == [("submit", "q-ok")]
    invalid = reconciler.invalid_now()
    assert sorted(invalid) == ["q-bad", "q-prop"]
    assert "MANIFEST_UNKNOWN_FIELD" in invalid["q-bad"] and "SESSION_PROPERTY_NOT_PER_QUERY" in invalid["q-prop"]
    report = json.loads(world.store.manifests.read(layout.deploy_error("q-prop")).text)
    assert report["name"] == "q-prop" and "SESSION_PROPERTY_NOT_PER_QUERY" in report["problems"][0]
    assert records.read_deployed(world.store.manifests, "q-prop")[0] is None

    world.write("q-prop", query("q-prop"))  # fixed
    reconciler.round()
    assert ("submit", "q-prop") in world.session.calls and "q-prop" not in reconciler.invalid_now()
    assert world.store.manifests.read(layout.deploy_error("q-prop")) is None, "the report goes once it deploys"


def test_a_held_query_stays_stopped_across_a_restart_of_the_session_until_its_manifest_changes(world: World, caplog):
    world.write("q-a", query("q-a"))
    first = world.reconciler()
    first.round()
    job = world.session.find("team", "q-a")
    assert job is not None
    world.session.stop(job, force=True)  # stopped from outside, as `sql-runner stop` would
    first.hold("q-a")
    assert list(read_held(world.store.manifests).queries) == ["q-a"]

    restarted = world.reconciler()  # a new session run reads session/held.json
    with caplog.at_level(logging.INFO, logger="runner.session.reconciler"):
        restarted.round()
    assert world.session.calls.count(("submit", "q-a")) == 1, "held: not started again"
    (held,) = [r for r in caplog.records if "held stopped until its manifest changes" in r.getMessage()]
    assert held.label == "q-a", "the line says which query"

    world.write("q-a", query("q-a", "SELECT id + 1 AS id FROM `demo`.`in`"))
    restarted.round()
    assert world.session.calls.count(("submit", "q-a")) == 2
    assert read_held(world.store.manifests).queries == {}, "released once its manifest changed"


def test_held_queries_written_by_the_previous_release_are_read(world: World):
    old = {"q-a": {"fingerprint": "0123", "tables": ["`demo`.`in`"]}}  # session/held.json had no envelope
    world.store.manifests.write(layout.SESSION_HELD, json.dumps(old).encode())
    reconciler = world.reconciler()
    assert reconciler.held == {"q-a": "0123"} and reconciler.used_tables == {"q-a": ["`demo`.`in`"]}


def test_a_manifest_whose_lease_is_busy_is_tried_again_next_round(world: World):
    world.write("q-a", query("q-a"))
    reconciler = world.reconciler()
    with lease(world.store.manifests, "q-a", purpose="deploy", holder="another-runner"):
        reconciler.round()
        assert world.session.calls == [] and reconciler.retry == {"q-a"}
    reconciler.round()  # the listing is unchanged; the retry alone brings it back
    assert world.session.calls == [("submit", "q-a")] and reconciler.retry == set()


def test_a_project_that_does_not_load_is_reported_and_nothing_is_touched(world: World):
    world.write("q-a", query("q-a"))
    reconciler = world.reconciler()
    reconciler.round()
    world.project.ddl("tables", "CREATE TABLE oops (")
    reconciler.round()
    assert list(reconciler.invalid_now()) == ["(project)"]
    assert world.session.calls == [("submit", "q-a")], "a broken project removes nothing"
