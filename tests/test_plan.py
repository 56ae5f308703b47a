"""Every branch of the deploy decision, over plain data (no Spark, no files)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from runner.core.engine_record import incremental_layout, layout_refusal
from runner.core.manifest import Manifest, Meta
from runner.core.querydiff import QueryDiff
from runner.core.reasons import Reason, codes
from runner.core.starts import SourceTable
from runner.core.stateref import StateRef
from runner.deploy.plan import Deployed, DesiredQuery, Observed, plan, plan_one

T0 = datetime(2026, 1, 1, tzinfo=UTC)
KAFKA = SourceTable(table="`kafka`.`tx`", connector="kafka")
FILES = SourceTable(table="`demo`.`tx`", connector="filesystem")
GEN = SourceTable(table="`demo`.`gen`", connector="datagen")


def manifest(**changes) -> Manifest:
    data = {"name": "job", "target-table": "`demo`.`out`", "sql": "SELECT a FROM t", **changes}
    return Manifest.model_validate(data)


def deployed(version: int = 1, removed: bool = False, sources=(KAFKA,), **changes) -> Deployed:
    meta = Meta(query_id="q", query_version=version, query_create_timestamp=T0)
    return Deployed(manifest(**changes).model_copy(update={"meta": meta}), tuple(sources), removed)


def desired(diff: QueryDiff | None = None, sources=(KAFKA,), **changes) -> DesiredQuery:
    return DesiredQuery(manifest(**changes), tuple(sources), diff)


SAME = QueryDiff(changed=False, state_compatible=True)
COMPATIBLE = QueryDiff(changed=True, state_compatible=True, reasons=(Reason.of("QUERY_MEANING_CHANGED"),))
CHANGED_AGGREGATION = Reason.of(
    "STATEFUL_OPERATOR_CHANGED", kind="aggregation", position=1, before="a", after="b", differ=["grouping keys"]
)
INCOMPATIBLE = QueryDiff(changed=True, state_compatible=False, reasons=(CHANGED_AGGREGATION,))
RUNNING = Observed(running=True, running_version=1, ever_ran=True)
SAVEPOINT = StateRef(
    kind="savepoint",
    version=1,
    key="savepoints/job/1/savepoint-20260101T000500Z-aaaaaa/",
    created=datetime(2026, 1, 1, 0, 5, tzinfo=UTC),
)
CHECKPOINT = StateRef(kind="checkpoint", version=1, key="checkpoints/job/1/run-20260101T000000Z-bbbbbb/", created=T0)


def test_new_job_starts_clean_at_version_1():
    action = plan_one("job", desired(), None, Observed())
    assert (action.kind, action.version, action.stop) == ("start", 1, False)
    assert action.sources[0].how == "startup-position"


def test_running_and_unchanged_does_nothing():
    action = plan_one("job", desired(SAME), deployed(), RUNNING)
    assert action.kind == "nothing" and codes(action.reasons) == ["RUNNING_UNCHANGED"]


def test_layout_only_edit_is_no_change_and_says_why():
    action = plan_one("job", desired(SAME, sql="select a\n  from T -- same"), deployed(), RUNNING)
    assert action.kind == "nothing"
    assert codes(action.reasons) == ["LAYOUT_ONLY"]


def test_running_config_change_stops_with_savepoint_and_restores_it():
    action = plan_one("job", desired(SAME, description="new words"), deployed(), RUNNING)
    assert (action.kind, action.stop, action.version) == ("restore", True, 1)
    assert action.restore_from == StateRef(kind="stop-savepoint", version=1)
    assert Reason.of("CONFIG_CHANGED", fields=["description"]) in action.reasons


def test_running_compatible_query_change_keeps_version_and_state():
    action = plan_one("job", desired(COMPATIBLE, sql="SELECT a FROM t WHERE a > 1"), deployed(), RUNNING)
    assert (action.kind, action.stop, action.version) == ("restore", True, 1)
    assert codes(action.reasons) == ["QUERY_MEANING_CHANGED", "STATE_CARRIES_OVER"]


def test_running_incompatible_change_starts_next_version_continuing_each_source():
    sources = (KAFKA, FILES, GEN)
    action = plan_one("job", desired(INCOMPATIBLE, sources=sources), deployed(sources=sources), RUNNING)
    assert (action.kind, action.stop, action.version) == ("start", True, 2)
    assert action.continue_from == StateRef(kind="stop-savepoint", version=1)
    hows = {s.table: s.how for s in action.sources}
    assert hows == {KAFKA.table: "continue", FILES.table: "continue", GEN.table: "generated"}
    details = {s.table: s.detail for s in action.sources}
    assert "Kafka offsets" in details[KAFKA.table] and "skips them" in details[FILES.table]


def test_continuing_after_a_stateful_query_says_that_rows_held_in_its_state_are_dropped():
    held = QueryDiff(changed=True, state_compatible=False, reasons=(CHANGED_AGGREGATION,), held_state=True)
    action = plan_one("job", desired(held), deployed(), RUNNING)
    assert Reason.of("HELD_ROWS_LOST", version=1) in action.reasons
    assert "HELD_ROWS_LOST" not in codes(plan_one("job", desired(INCOMPATIBLE), deployed(), RUNNING).reasons), (
        "a stateless query held nothing"
    )
    reprocess = plan_one(
        "job", desired(held, **{"on-query-change": "reprocess"}), deployed(**{"on-query-change": "reprocess"}), RUNNING
    )
    assert "HELD_ROWS_LOST" not in codes(reprocess.reasons), "reprocessing recomputes them"


def test_reprocess_policy_reads_from_the_startup_position():
    action = plan_one(
        "job",
        desired(INCOMPATIBLE, **{"on-query-change": "reprocess"}),
        deployed(**{"on-query-change": "reprocess"}),
        RUNNING,
    )
    assert action.kind == "start" and action.version == 2 and action.continue_from is None
    assert [s.how for s in action.sources] == ["startup-position"]
    assert "reprocess" in action.sources[0].detail


def test_a_changed_changelog_query_reads_its_tables_again_rather_than_continue():
    changelog = (SourceTable(table="`users`", connector="kafka", changelog=True),)
    rebuilt = QueryDiff(changed=True, state_compatible=False, reasons=(Reason.of("CHANGELOG_QUERY_CHANGED"),))
    action = plan_one("job", desired(rebuilt, sources=changelog), deployed(sources=changelog), RUNNING)
    assert action.kind == "start" and action.version == 2 and action.continue_from is None
    assert [s.how for s in action.sources] == ["startup-position"]
    assert Reason.of("CHANGELOG_REREAD", version=1) in action.reasons
    assert "CHANGELOG_REREAD" not in codes(plan_one("job", desired(INCOMPATIBLE), deployed(), RUNNING).reasons)


def test_a_source_new_in_this_version_starts_at_its_startup_position():
    action = plan_one("job", desired(INCOMPATIBLE, sources=(KAFKA, FILES)), deployed(sources=(KAFKA,)), RUNNING)
    hows = {s.table: (s.how, s.detail) for s in action.sources}
    assert hows[KAFKA.table][0] == "continue"
    assert hows[FILES.table] == ("startup-position", "from its startup position (new source)")


def test_not_running_incompatible_change_continues_from_the_latest_state():
    observed = Observed(savepoints=(SAVEPOINT,), checkpoints=(CHECKPOINT,), ever_ran=True)
    action = plan_one("job", desired(INCOMPATIBLE), deployed(), observed)
    assert (action.kind, action.stop, action.version) == ("start", False, 2)
    assert action.continue_from == SAVEPOINT  # newer than the checkpoint run


def test_not_running_config_change_restores_the_latest_state():
    newer_run = StateRef(
        kind="checkpoint",
        version=1,
        key="checkpoints/job/1/run-20260101T001000Z-cccccc/",
        created=datetime(2026, 1, 1, 0, 10, tzinfo=UTC),
    )
    observed = Observed(savepoints=(SAVEPOINT,), checkpoints=(CHECKPOINT, newer_run), ever_ran=True)
    action = plan_one("job", desired(SAME, **{"trigger-interval": "1 minute"}), deployed(), observed)
    assert (action.kind, action.stop, action.restore_from) == ("restore", False, newer_run)


def test_not_running_unchanged_restores_the_newest_of_savepoints_and_checkpoints():
    observed = Observed(savepoints=(SAVEPOINT,), checkpoints=(CHECKPOINT,), ever_ran=True)
    action = plan_one("job", desired(SAME), deployed(), observed)
    assert (action.kind, action.restore_from) == ("restore", SAVEPOINT)


def test_a_restore_after_its_application_ended_says_how_it_ended():
    how = "application_1_0002 FAILED (FAILED) after 2 attempts: AM Container exited with exitCode: 137"
    observed = Observed(checkpoints=(CHECKPOINT,), ever_ran=True, ended=how)
    action = plan_one("job", desired(SAME), deployed(), observed)
    assert (action.kind, action.restore_from) == ("restore", CHECKPOINT)
    assert Reason.of("APPLICATION_ENDED", how=how) in action.reasons
    assert "APPLICATION_ENDED" not in codes(plan_one("job", desired(SAME), deployed(), RUNNING).reasons)


def test_not_running_without_any_state_after_running_is_an_error():
    action = plan_one("job", desired(SAME), deployed(), Observed(ever_ran=True))
    assert action.kind == "error"
    assert action.reasons[-1] == Reason.of("NO_STATE_FOUND", version=1)


def test_a_version_that_never_started_is_started_as_planned():
    previous = StateRef(kind="savepoint", version=1, key="savepoints/job/1/savepoint-x/")
    record = Deployed(deployed(version=2).manifest, (KAFKA,), continued_from=previous)
    action = plan_one("job", desired(SAME), record, Observed(ever_ran=False))
    assert (action.kind, action.version, action.continue_from) == ("start", 2, previous)


def test_deleted_manifest_of_a_running_job_stops_with_savepoint_and_is_marked_removed():
    action = plan_one("job", None, deployed(), RUNNING)
    assert (action.kind, action.stop) == ("remove", True)


def test_deleted_manifest_of_a_stopped_job_is_marked_removed_without_stopping():
    action = plan_one("job", None, deployed(), Observed())
    assert (action.kind, action.stop) == ("remove", False)


def test_removed_job_stays_removed():
    assert plan_one("job", None, deployed(removed=True), Observed()).kind == "nothing"


def test_redeploying_a_removed_job_restores_its_state():
    observed = Observed(savepoints=(SAVEPOINT,), ever_ran=True)
    action = plan_one("job", desired(SAME), deployed(removed=True), observed)
    assert (action.kind, action.restore_from) == ("restore", SAVEPOINT)
    assert "REDEPLOY_REMOVED" in codes(action.reasons)


def test_a_job_of_another_version_running_is_stopped_first():
    observed = Observed(running=True, running_version=3, ever_ran=True)
    action = plan_one("job", desired(SAME, description="x"), deployed(version=4), observed)
    assert action.stop and Reason.of("OTHER_VERSION_RUNNING", running=3, deployed=4) in action.reasons


def test_plan_covers_desired_and_deployed_names_in_order():
    actions = plan(
        {"b": desired(), "a": desired(SAME)}, {"a": deployed(), "c": deployed()}, {"a": RUNNING, "c": RUNNING}
    )
    assert [(a.name, a.kind) for a in actions] == [("a", "nothing"), ("b", "start"), ("c", "remove")]


# One edit per manifest field, applied to a running job: (field, edited value, the diff Spark would report).
FIELD_EDITS = {
    "name": None,  # another name is another job: covered by the new-job and removed-job cases
    "description": ("new words", SAME),
    "target-table": ("`demo`.`other`", SAME),  # a new version by its declaration alone
    "sql": ("SELECT a FROM t WHERE a > 1", COMPATIBLE),
    "code": ("execution_output = table('t').where('a > 1')", COMPATIBLE),  # replaces the sql
    "sparkProperties": ({"spark.sql.shuffle.partitions": "4"}, SAME),
    "trigger-interval": ("1 minute", SAME),
    "on-query-change": ("reprocess", SAME),
    "retention": ({"savepoints": 5, "runs": 2}, SAME),
    "mode": ("session", SAME),  # moves the job: stop with a savepoint in one mode, restore in the other
    "restart-strategy": ({"attempts": 3, "delay": "1 second"}, SAME),  # the driver reads it when it starts
    "meta": None,  # written by the runner, never part of a desired manifest
}
EXPECTED = {
    "none": ("update", False, 1),
    "restart": ("restore", True, 1),
    "judged": ("restore", True, 1),  # compatible here; an incompatible diff starts a new version
    "new-version": ("start", True, 2),
}


def test_every_manifest_field_declares_how_its_change_is_handled():
    from runner.core.manifest import on_change

    declared = on_change()
    assert set(declared) == set(FIELD_EDITS), "a new manifest field needs an x-on-change and a case here"
    assert declared["retention"] == declared["on-query-change"] == "none"
    assert declared["name"] == "identity" and declared["meta"] == "runner"


@pytest.mark.parametrize("field", [f for f, edit in FIELD_EDITS.items() if edit is not None])
def test_a_change_to_each_field_is_carried_out_as_declared(field):
    from runner.core.manifest import on_change

    value, diff = FIELD_EDITS[field]
    edited = {field: value, **({"sql": None} if field == "code" else {})}
    action = plan_one("job", desired(diff, **edited), deployed(), RUNNING)
    assert (action.kind, action.stop, action.version) == EXPECTED[on_change()[field]], action
    if on_change()[field] == "none":
        assert action.summary == "record the change; the running job keeps running (no restart needed)"
        assert action.reasons == (Reason.of("CHANGED_WITHOUT_RESTART", fields=[field]),)
    if on_change()[field] == "restart":
        assert Reason.of("CONFIG_CHANGED", fields=[field]) in action.reasons


def test_a_none_field_changed_with_a_restart_field_restarts_once_and_records_both():
    action = plan_one(
        "job", desired(SAME, retention={"savepoints": 5, "runs": 2}, description="x"), deployed(), RUNNING
    )
    assert (action.kind, action.stop) == ("restore", True)
    assert Reason.of("CONFIG_CHANGED", fields=["description"]) in action.reasons
    assert Reason.of("CHANGED_WITHOUT_RESTART", fields=["retention"]) in action.reasons


def test_a_none_field_changed_while_not_running_restores_as_usual():
    stopped = Observed(savepoints=(SAVEPOINT,), ever_ran=True)
    action = plan_one("job", desired(SAME, **{"on-query-change": "reprocess"}), deployed(), stopped)
    assert (action.kind, action.restore_from) == ("restore", SAVEPOINT)


def test_a_refused_restore_starts_the_next_version_instead_of_restoring_again():
    refused = Observed(checkpoints=(CHECKPOINT,), ever_ran=True, refused="[STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE] ...")
    action = plan_one("job", desired(SAME), deployed(), refused)
    assert (action.kind, action.version, action.stop) == ("start", 2, False)
    assert action.summary == "start v2 with clean state (restore refused)"
    assert action.continue_from == CHECKPOINT
    refusal = next(r for r in action.reasons if r.code == "RESTORE_REFUSED")
    assert refusal.param["version"] == 1 and str(refusal.param["refusal"]).startswith("[STATE_STORE_KEY_SCHEMA")
    # the refusal of an older run does not matter once a job of the version runs again
    assert plan_one("job", desired(SAME), deployed(), RUNNING).kind == "nothing"


def test_a_source_whose_connector_cannot_continue_starts_at_its_startup_position():
    """A connector that declares no way to continue (runner/core/connectors/: ``continue_by``) is read from its
    startup position by a new version that continues the others, and the plan says so."""
    keyed = SourceTable(table="`kafka`.`users`", connector="upsert-kafka")
    sources = (KAFKA, keyed)
    action = plan_one("job", desired(INCOMPATIBLE, sources=sources), deployed(sources=sources), RUNNING)
    hows = {s.table: (s.how, s.detail) for s in action.sources}
    assert hows[KAFKA.table][0] == "continue"
    assert hows[keyed.table] == ("startup-position", "from its startup position (it cannot continue)")


@pytest.mark.parametrize(
    ("recorded", "layout", "refused"),
    [
        (None, None, None),  # a new checkpoint
        ("recompute", None, None),
        ("incremental", 1, None),  # the releases that recorded no layout
        ("incremental 2", 2, None),
        ("incremental 3", 3, None),
        ("incremental 4", 4, None),
        ("incremental 5", 5, None),
        ("incremental 6", 6, None),
        (
            "incremental 7",
            7,
            "as a later release keeps it (layout 7; this release keeps layout 6 and reads 1, 2, 3, 4, 5, 6)",
        ),
        ("incremental x", 0, "in a layout this release cannot read: incremental x"),
        ("incremental 2 3", 0, "cannot read"),
        ("incremental \u00b2", 0, "cannot read"),  # a digit to str.isdigit, not to int()
        ("incremental -1", 0, "cannot read"),
    ],
)
def test_a_checkpoints_record_of_its_state_layout_is_read_or_refused_with_what_it_says(recorded, layout, refused):
    assert incremental_layout(recorded) == layout
    said = layout_refusal(recorded)
    assert (said is None) == (refused is None) and (refused is None or refused in said), said


LATER_LAYOUT = layout_refusal("incremental 7")


def test_state_this_release_cannot_read_is_not_restored_and_the_next_version_starts_at_once():
    """The state a restore would start from records a layout this release's job refuses (a later release's,
    after a rollback): the plan starts the next version rather than a restore the job would refuse."""
    stopped = Observed(checkpoints=(CHECKPOINT,), ever_ran=True, unreadable=LATER_LAYOUT)
    action = plan_one("job", desired(SAME), deployed(), stopped)
    assert (action.kind, action.version, action.stop) == ("start", 2, False)
    assert action.summary == "start v2 with clean state (state unreadable)"
    said = next(r for r in action.reasons if r.code == "STATE_UNREADABLE")
    assert said.param["version"] == 1 and "as a later release keeps it (layout 7;" in str(said.param["why"])
    assert "this release cannot restore the state of v1: the checkpoint holds" in said.text
    # a change that restarts a running job would restore it from a savepoint of that state: the same
    running = Observed(running=True, running_version=1, ever_ran=True, unreadable=LATER_LAYOUT)
    restarted = plan_one("job", desired(COMPATIBLE), deployed(), running)
    assert (restarted.kind, restarted.version, restarted.stop) == ("start", 2, True)
    assert "STATE_UNREADABLE" in codes(restarted.reasons) and "STATE_CARRIES_OVER" not in codes(restarted.reasons)
    # a job left as it is runs on: nothing restarts it, and a field it does not use is only recorded
    assert plan_one("job", desired(SAME), deployed(), running).kind == "nothing"
    assert plan_one("job", desired(SAME, retention={"savepoints": 5, "runs": 2}), deployed(), running).kind == "update"
    # an incompatible change starts the next version anyway, and says so for that reason alone
    changed = plan_one("job", desired(INCOMPATIBLE), deployed(), stopped)
    assert (changed.kind, changed.version) == ("start", 2) and "STATE_UNREADABLE" not in codes(changed.reasons)
    assert changed.summary == "start v2 with clean state (query changed)"
