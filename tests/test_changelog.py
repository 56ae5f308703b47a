"""Changelog tables end to end: debezium-json and upsert sources, a query over their current rows, and the
difference written to PostgreSQL (real Spark, a real PostgreSQL server)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from demo.kafka_broker import Message
from jobs import runtime
from jobs.changelog.engine import changelog_of
from jobs.changelog.incremental import checkpoint_engine
from runner.core.engine_record import LAYOUT, READS
from tests.conftest import METADATA_DDL, ProjectDir
from tests.jobhelpers import join_states, operator_states, run_changelog, start_query
from tests.tablehelpers import PG_METADATA, TARGET_KINDS, Target, compacted

pytestmark = pytest.mark.spark


def debezium(folder: Path, name: str, records: list[dict]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.json").write_text("".join(json.dumps(r) + "\n" for r in records))


def user(uid: str, account: str, full_name: str = "x") -> dict:
    return {"uid": uid, "accountId": account, "id": uid.split("-")[1], "fullName": full_name}


def user_count_project(project: ProjectDir, target: Target) -> None:
    """The users table (debezium-json files) and the user count per account into ``target``."""
    project.ddl(
        "tables",
        f"""
        CREATE TABLE users (
          uid STRING, accountId STRING, id STRING, fullName STRING,
          PRIMARY KEY (uid) NOT ENFORCED
        ) WITH ('connector' = 'filesystem', 'path' = '{project.root}/data/users', 'format' = 'debezium-json');
        """
        + target.ddl("user_count_by_account", [("accountId", "STRING"), ("userCount", "BIGINT")], "accountId"),
    )
    project.manifest(
        "user-count",
        """
        name: user-count
        target-table: user_count_by_account
        sql: SELECT accountId, COUNT(1) AS userCount FROM users GROUP BY accountId
        """,
    )


@pytest.mark.parametrize("sink", TARGET_KINDS)
def test_count_by_account_follows_updates_and_deletes(spark, project: ProjectDir, sink, request, tmp_path):
    target = Target(sink, request)
    user_count_project(project, target)
    users = project.root / "data" / "users"
    state = tmp_path / "state"
    debezium(
        users,
        "001",
        [{"op": "c", "after": user(u, u.split("-")[0])} for u in ("100-1", "100-2", "101-1", "101-2")]
        + [{"op": "u", "before": user("100-1", "100"), "after": user("100-1", "100", "renamed")}],
    )
    run_changelog(spark, project, "user-count", state, target.env)
    assert target.read() == [("100", 2), ("101", 2)]  # the update replaces 100-1's row: not a third user
    debezium(users, "002", [{"op": "d", "before": user("101-2", "101")}])
    run_changelog(spark, project, "user-count", state, target.env)
    assert target.read() == [("100", 2), ("101", 1)]


@pytest.mark.postgres
def test_a_checkpoint_stays_on_the_engine_that_made_it_and_one_of_the_incremental_engine_is_never_recomputed(
    spark, project: ProjectDir, request, tmp_path
):
    """Restoring a checkpoint on the other engine would lose the target's rows (the recomputing engine would
    start from empty tables and replace the target with one micro-batch's changes): the incremental engine's
    checkpoint is refused, as Spark refuses state it cannot serve (the next deploy starts a new version), and a
    recomputing engine's checkpoint (one made before the engine was recorded, too) stays on it."""
    from jobs.changelog import incremental
    from jobs.control import refused_restore

    target = Target("jdbc", request)
    user_count_project(project, target)
    users = project.root / "data" / "users"
    manifest = project.root / "manifests" / "user-count.yaml"
    recompute = "sparkProperties:\n  spark.sqlrunner.changelog.engine: recompute\n"
    debezium(users, "001", [{"op": "c", "after": user("100-1", "100")}])

    incremental_state = tmp_path / "incremental"
    run_changelog(spark, project, "user-count", incremental_state, target.env)
    checkpoint = str(incremental_state / "checkpoint")
    # an account's count comes out of its group with its old value: the counts go to the target with no copy of its
    # rows in state (layout 4), two operators: the users' rows by key, the counts by account
    assert incremental.checkpoint_engine(spark, checkpoint) == "incremental 4"
    assert len(operator_states(incremental_state / "checkpoint")) == 2
    incremental_manifest = manifest.read_text()
    manifest.write_text(incremental_manifest + recompute)
    debezium(users, "002", [{"op": "c", "after": user("101-1", "101")}])
    with pytest.raises(RuntimeError, match="CHANGELOG_ENGINE_OF_CHECKPOINT") as refused:
        run_changelog(spark, project, "user-count", incremental_state, target.env)
    assert "the checkpoint holds the incremental engine's state" in refused_restore(refused.value)
    assert target.read() == [("100", 1)], "the target is left as the incremental engine left it"
    # the incremental engine's state as a later release keeps it (a rollback): refused, nothing written
    manifest.write_text(incremental_manifest)
    recorded = incremental_state / "checkpoint" / incremental.ENGINE_FILE
    later = f"incremental {LAYOUT + 1}\n"
    recorded.write_text(later)
    with pytest.raises(RuntimeError, match="CHANGELOG_ENGINE_OF_CHECKPOINT") as refused:
        run_changelog(spark, project, "user-count", incremental_state, target.env)
    said = refused_restore(refused.value)
    assert "the incremental engine's state as a later release keeps it" in said, said
    assert f"(layout {LAYOUT + 1}; this release keeps layout {LAYOUT} and reads {', '.join(map(str, READS))})" in said
    assert target.read() == [("100", 1)], "nothing written"
    # back as this release recorded it: its operators go on from their state
    recorded.write_text("incremental 4\n")
    run_changelog(spark, project, "user-count", incremental_state, target.env)
    assert target.read() == [("100", 1), ("101", 1)], "002's user counted from the restored state"
    # another job (a database's batch fence is per job) made by the recomputing engine
    recounted = project.root / "manifests" / "recounted.yaml"
    recounted.write_text((incremental_manifest + recompute).replace("name: user-count", "name: recounted"))
    recomputed_state = tmp_path / "recomputed"
    run_changelog(spark, project, "recounted", recomputed_state, target.env)
    assert incremental.checkpoint_engine(spark, str(recomputed_state / "checkpoint")) == "recompute"
    assert target.read() == [("100", 1), ("101", 1)], "a new checkpoint's first micro-batch replaces the target"
    recounted.write_text(recounted.read_text().replace(recompute, ""))  # incremental asked again, same version
    (recomputed_state / "checkpoint" / incremental.ENGINE_FILE).unlink()  # as a checkpoint made before it was said
    debezium(users, "003", [{"op": "d", "before": user("100-1", "100")}])
    run_changelog(spark, project, "recounted", recomputed_state, target.env)
    assert target.read() == [("101", 1)], "the recomputing engine went on from its own state"


def upserts(folder: Path, name: str, rows: list[dict]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.json").write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.mark.parametrize("sink", TARGET_KINDS)
def test_three_table_left_join_follows_updates_and_deletes(spark, project: ProjectDir, sink, request, tmp_path):
    target = Target(sink, request)
    data = project.root / "data"
    project.ddl(
        "tables",
        f"""
        CREATE TABLE users (
          uid STRING, accountId STRING, id STRING, fullName STRING,
          PRIMARY KEY (uid) NOT ENFORCED
        ) WITH ('connector' = 'filesystem', 'path' = '{data}/users', 'format' = 'debezium-json');

        CREATE TABLE user_favorite_color (userUid STRING, favoriteColor STRING, PRIMARY KEY (userUid) NOT ENFORCED)
        WITH ('connector' = 'filesystem', 'path' = '{data}/color', 'format' = 'json', 'changelog-mode' = 'upsert');

        CREATE TABLE user_favorite_cheese (userUid STRING, favoriteCheese STRING, PRIMARY KEY (userUid) NOT ENFORCED)
        WITH ('connector' = 'filesystem', 'path' = '{data}/cheese', 'format' = 'json', 'changelog-mode' = 'upsert');
        """
        + target.ddl(
            "user_favorite_color_and_cheese",
            [("accountId", "STRING"), ("uid", "STRING"), ("favoriteColor", "STRING"), ("favoriteCheese", "STRING")],
            "uid",
        ),
    )
    project.manifest(
        "color-and-cheese",
        """
        name: color-and-cheese
        target-table: user_favorite_color_and_cheese
        sql: |
          SELECT u.accountId, u.uid, c.favoriteColor, ch.favoriteCheese
          FROM users u
          LEFT JOIN user_favorite_color c ON u.uid = c.userUid
          LEFT JOIN user_favorite_cheese ch ON u.uid = ch.userUid
        """,
    )
    state = tmp_path / "state"
    debezium(
        data / "users", "001", [{"op": "c", "after": user("103-1", "103")}, {"op": "c", "after": user("104-1", "104")}]
    )
    upserts(data / "color", "001", [{"userUid": "103-1", "favoriteColor": "blue"}])
    upserts(data / "cheese", "001", [{"userUid": "103-1", "favoriteCheese": "cheddar"}])
    queries = start_query(spark, project, "color-and-cheese", state, target.env, once=True)
    runtime.wait(spark, queries, once=True)
    assert target.read() == [("103", "103-1", "blue", "cheddar"), ("104", "104-1", None, None)]
    # the tables' rows are in the joins' state, counted by Spark with the other side's: no keys held figure for them
    assert changelog_of(queries[0]).last.keys == {}
    assert "; keys:" not in changelog_of(queries[0]).last.summary()
    first = target.stamps()
    assert {(name, version) for name, version, _at in first.values()} == {("color-and-cheese", 1)}, first
    assert all(at is not None for _name, _version, at in first.values()), first
    # every join side has one row per join key (the tables' keys are the join keys), each kept as that row; each
    # table's side is joined by its PRIMARY KEY and takes the table's changes itself: no operator keeps the tables'
    # rows by key but the joins, and none a copy of the target's rows
    checkpoint = state / "checkpoint"
    assert checkpoint_engine(spark, str(checkpoint)) == f"incremental {LAYOUT}"
    assert join_states(checkpoint) == [{"leftRow", "rightSource"}, {"leftSource", "rightSource"}]  # the last first
    assert len(operator_states(checkpoint)) == 2
    # each source's input read once: the progress counts each record once, as Spark's would for a plain query
    read = [(p.numInputRows, [s.numInputRows for s in p.sources]) for p in queries[0].recentProgress]
    assert read == [(4, [2, 1, 1])], read
    upserts(data / "cheese", "002", [{"userUid": "103-1", "favoriteCheese": "brie"}])
    run_changelog(spark, project, "color-and-cheese", state, target.env)
    assert target.read() == [("103", "103-1", "blue", "brie"), ("104", "104-1", None, None)]
    # the metadata a micro-batch writes is in the rows it changes; the row it leaves keeps its own
    now = target.stamps()
    assert now["104-1"] == first["104-1"] and now["103-1"][:2] == first["103-1"][:2], (first, now)
    assert now["103-1"][2] > first["103-1"][2], (first, now)
    debezium(data / "users", "002", [{"op": "d", "before": user("103-1", "103")}])
    run_changelog(spark, project, "color-and-cheese", state, target.env)
    assert target.read() == [("104", "104-1", None, None)]  # 103-1's joined row removed


@pytest.mark.postgres
def test_a_group_with_a_null_key_in_a_unique_column_is_updated_and_deleted_like_any_other(
    spark, project: ProjectDir, postgres, tmp_path
):
    """A PostgreSQL target keyed by a UNIQUE column (which, unlike a primary key, takes NULL): the group of users
    without an account is a row with a NULL key, counted, then removed when its last user goes, beside a
    group with a key removed the same way."""
    table = f"t_null_{tmp_path.name[-8:].lower().replace('-', '_')}"
    postgres.execute(f"CREATE TABLE {table} (accountid TEXT UNIQUE, usercount BIGINT{PG_METADATA})")
    project.ddl(
        "tables",
        f"""
        CREATE TABLE users (
          uid STRING, accountId STRING, id STRING, fullName STRING, PRIMARY KEY (uid) NOT ENFORCED
        ) WITH ('connector' = 'filesystem', 'path' = '{project.root}/data/users', 'format' = 'debezium-json');
        CREATE TABLE user_count_by_account (accountId STRING, userCount BIGINT{METADATA_DDL},
          PRIMARY KEY (accountId) NOT ENFORCED)
        WITH ('connector' = 'jdbc', 'url' = '{postgres.url}', 'table-name' = '{table}', 'username' = 'runner',
              'password' = '${{PG_PASSWORD}}');
        """,
    )
    project.manifest(
        "user-count",
        """
        name: user-count
        target-table: user_count_by_account
        sql: SELECT accountId, COUNT(1) AS userCount FROM users GROUP BY accountId
        """,
    )
    env, users, state = {"PG_PASSWORD": postgres.password}, project.root / "data" / "users", tmp_path / "state"

    def read() -> list:
        return postgres.execute(f"SELECT accountid, usercount FROM {table} ORDER BY accountid NULLS FIRST")

    nobody = {"uid": "9-1", "accountId": None, "id": "1", "fullName": "x"}
    debezium(users, "001", [{"op": "c", "after": nobody}, {"op": "c", "after": user("100-1", "100")}])
    debezium(users, "002", [{"op": "c", "after": {**nobody, "uid": "9-2"}}, {"op": "c", "after": user("101-1", "101")}])
    run_changelog(spark, project, "user-count", state, env)
    assert read() == [(None, 2), ("100", 1), ("101", 1)]
    debezium(users, "003", [{"op": "d", "before": nobody}, {"op": "d", "before": user("100-1", "100")}])
    run_changelog(spark, project, "user-count", state, env)
    assert read() == [(None, 1), ("101", 1)]  # the NULL group updated in place, not a second row
    debezium(users, "004", [{"op": "d", "before": {**nobody, "uid": "9-2"}}])
    run_changelog(spark, project, "user-count", state, env)
    assert read() == [("101", 1)]


@pytest.mark.postgres
def test_malformed_changes_are_set_aside_and_unknown_keys_upserted(spark, project: ProjectDir, request, tmp_path):
    """Bad inputs tried: a debezium record without op, one with an unknown op, a delete without its before
    row, a line that is not JSON; an update for a key never inserted (it becomes the key's row, as an
    upsert), a delete of a key never inserted (nothing to remove). Spark's progress counts each of the seven
    lines once, though the malformed ones are read again to be set aside."""
    target = Target("jdbc", request)
    user_count_project(project, target)
    data = project.root / "data"
    (data / "users").mkdir(parents=True)
    (data / "users" / "001.json").write_text(
        "\n".join(
            [
                json.dumps({"after": user("100-1", "100")}),
                json.dumps({"op": "x", "after": user("100-2", "100")}),
                json.dumps({"op": "d"}),
                "not json",
                json.dumps({"op": "u", "before": user("200-1", "200"), "after": user("200-1", "200")}),
                json.dumps({"op": "d", "before": user("300-1", "300")}),
                json.dumps({"op": "c", "after": user("100-3", "100")}),
            ]
        )
        + "\n"
    )
    state = tmp_path / "state"
    queries = start_query(spark, project, "user-count", state, target.env, once=True)
    runtime.wait(spark, queries, once=True)
    assert target.read() == [("100", 1), ("200", 1)]
    assert [(p.numInputRows, [s.numInputRows for s in p.sources]) for p in queries[0].recentProgress] == [(7, [7])]
    dead = spark.read.json(str(state / "dead-letter" / "users")).collect()
    reasons = sorted(r["reason"] for r in dead)
    assert reasons == [
        "debezium op d has no before row",
        "debezium record has an unknown op: x",
        "debezium record has no op (c, r, u or d)",
        "malformed JSON: not a JSON object",
    ]


def test_upsert_kafka_tables_in_and_out(spark, project: ProjectDir, kafka, topic, tmp_path):
    users, colors, out = topic("users", partitions=2), topic("colors"), topic("out")
    bootstrap = kafka.bootstrap
    project.ddl(
        "tables",
        f"""
        CREATE TABLE users (
          uid STRING, accountId STRING, id STRING, fullName STRING,
          PRIMARY KEY (uid) NOT ENFORCED
        ) WITH ('connector' = 'upsert-kafka', 'topic' = '{users}', 'properties.bootstrap.servers' = '{bootstrap}',
                'key.format' = 'json', 'value.format' = 'json');

        CREATE TABLE user_favorite_color (k_userUid STRING, favoriteColor STRING, PRIMARY KEY (k_userUid) NOT ENFORCED)
        WITH ('connector' = 'upsert-kafka', 'topic' = '{colors}', 'properties.bootstrap.servers' = '{bootstrap}',
              'key.format' = 'json', 'value.format' = 'json', 'key.fields-prefix' = 'k_',
              'value.fields-include' = 'EXCEPT_KEY');

        CREATE TABLE account_colors (
          accountId STRING, users BIGINT, blue BIGINT{METADATA_DDL},
          PRIMARY KEY (accountId) NOT ENFORCED
        ) WITH ('connector' = 'upsert-kafka', 'topic' = '{out}', 'properties.bootstrap.servers' = '{bootstrap}',
                'key.format' = 'json', 'value.format' = 'json');
        """,
    )
    project.manifest(
        "account-colors",
        """
        name: account-colors
        target-table: account_colors
        sql: |
          SELECT u.accountId, COUNT(*) AS users, COUNT_IF(c.favoriteColor = 'blue') AS blue
          FROM users u LEFT JOIN user_favorite_color c ON u.uid = c.k_userUid
          GROUP BY u.accountId
        """,
    )

    def key(uid: str) -> str:
        return json.dumps({"uid": uid})

    def row(uid: str) -> str:
        return json.dumps(user(uid, uid.split("-")[0]))

    kafka.produce(
        users,
        [Message(row(u), key=key(u), partition=i % 2) for i, u in enumerate(("100-1", "100-2", "101-1", "101-2"))],
    )
    kafka.produce(colors, [Message(json.dumps({"favoriteColor": "blue"}), key=json.dumps({"userUid": "100-1"}))])
    state = tmp_path / "state"
    run_changelog(spark, project, "account-colors", state, {})
    view = compacted(kafka, out)
    assert {k: (v["users"], v["blue"]) for k, v in view.items()} == {
        json.dumps({"accountId": "100"}, separators=(",", ":")): (2, 1),
        json.dumps({"accountId": "101"}, separators=(",", ":")): (2, 0),
    }
    # 101-2 deleted (tombstone), 100-2 turns blue, all of 101 goes: its key is a tombstone in the output
    kafka.produce(users, [Message(None, key=key("101-2"), partition=1), Message(None, key=key("101-1"), partition=0)])
    kafka.produce(colors, [Message(json.dumps({"favoriteColor": "blue"}), key=json.dumps({"userUid": "100-2"}))])
    run_changelog(spark, project, "account-colors", state, {})
    view = compacted(kafka, out)
    assert {k: (v["users"], v["blue"]) for k, v in view.items()} == {
        json.dumps({"accountId": "100"}, separators=(",", ":")): (2, 2),
    }
    assert all(v["__query_name"] == "account-colors" for v in view.values())


@pytest.mark.parametrize("engine", ["incremental", "recompute"])
def test_every_aggregate_equals_the_batch_answer_over_random_changes(
    spark, project: ProjectDir, kafka, topic, postgres, pg_table, tmp_path, engine
):
    """1,000 seeded random inserts, updates, re-reads and deletes over 100 keys, as debezium-json records on a
    3-partition topic, read 250 offsets a micro-batch; after each of two rounds the PostgreSQL table equals COUNT,
    SUM, AVG, MIN, MAX and COUNT(DISTINCT) computed over the rows the changes leave. On either engine: the
    incremental operators (the default), and the query recomputed over every row held, kept to compare."""
    import random

    items = topic("items", partitions=3)
    table = pg_table(
        "grp TEXT, n BIGINT, total BIGINT, mean DOUBLE PRECISION, lo BIGINT, hi BIGINT, tags BIGINT", "grp"
    )
    project.ddl(
        "tables",
        f"""
        CREATE TABLE items (id BIGINT, grp STRING, amount BIGINT, tag STRING, PRIMARY KEY (id) NOT ENFORCED)
        WITH ('connector' = 'kafka', 'topic' = '{items}', 'properties.bootstrap.servers' = '{kafka.bootstrap}',
              'format' = 'debezium-json', 'scan.max-offsets-per-trigger' = '250');

        CREATE TABLE per_group (
          grp STRING, n BIGINT, total BIGINT, mean DOUBLE, lo BIGINT, hi BIGINT, tags BIGINT{METADATA_DDL},
          PRIMARY KEY (grp) NOT ENFORCED
        ) WITH ('connector' = 'jdbc', 'url' = '{postgres.url}', 'table-name' = '{table}',
                'username' = 'runner', 'password' = '${{PG_PASSWORD}}');
        """,
    )
    project.manifest(
        "per-group",
        """
        name: per-group
        target-table: per_group
        sparkProperties:
          spark.sqlrunner.changelog.engine: ENGINE
        sql: |
          SELECT grp, COUNT(*) AS n, SUM(amount) AS total, AVG(amount) AS mean, MIN(amount) AS lo,
                 MAX(amount) AS hi, COUNT(DISTINCT tag) AS tags
          FROM items GROUP BY grp
        """.replace("ENGINE", engine),
    )
    rng = random.Random(42)
    rows: dict[int, dict] = {}

    def change() -> tuple[int, dict]:
        key = rng.randrange(100)
        new = {
            "id": key,
            "grp": f"g{rng.randrange(8)}",
            "amount": rng.randrange(-50, 1000),
            "tag": f"t{rng.randrange(5)}",
        }
        if key not in rows:
            rows[key] = new
            return key, {"op": rng.choice("cr"), "after": new}
        old = rows[key]
        roll = rng.random()
        if roll < 0.3:
            del rows[key]
            return key, {"op": "d", "before": old}
        rows[key] = new
        return key, {"op": "u", "before": old, "after": new}

    def answer() -> list[tuple]:
        groups: dict[str, list[dict]] = {}
        for row in rows.values():
            groups.setdefault(row["grp"], []).append(row)
        return sorted(
            (
                grp,
                len(members),
                sum(m["amount"] for m in members),
                sum(m["amount"] for m in members) / len(members),
                min(m["amount"] for m in members),
                max(m["amount"] for m in members),
                len({m["tag"] for m in members}),
            )
            for grp, members in groups.items()
        )

    env = {"PG_PASSWORD": postgres.password}
    state = tmp_path / "state"
    for _round in range(2):
        changes = [change() for _ in range(500)]
        kafka.produce(
            items,
            [Message(json.dumps(value), key=json.dumps({"id": key}), partition=key % 3) for key, value in changes],
        )
        run_changelog(spark, project, "per-group", state, env)
        found = postgres.execute(f"SELECT grp, n, total, mean, lo, hi, tags FROM {table} ORDER BY grp")
        expected = answer()
        assert [r[:3] + r[4:] for r in found] == [r[:3] + r[4:] for r in expected]
        assert [r[3] for r in found] == pytest.approx([r[3] for r in expected], rel=1e-12)
    assert len(rows) > 30, "the changes must leave rows to aggregate"


def test_debezium_json_topics_written_by_an_append_query_and_by_a_changelog_query(
    spark, project: ProjectDir, kafka, topic, tmp_path
):
    """An append query writes debezium-json inserts; a changelog query reads them (a later row of a uid
    replaces the earlier) and writes its counts as debezium-json c, u and d records, which replayed by key
    give the batch answer."""
    changes, counts = topic("changes"), topic("counts")
    data = project.root / "data" / "moves"
    common = f"'properties.bootstrap.servers' = '{kafka.bootstrap}', 'format' = 'debezium-json'"
    project.ddl(
        "tables",
        f"""
        CREATE TABLE moves (uid STRING, accountId STRING)
        WITH ('connector' = 'filesystem', 'path' = '{data}', 'format' = 'json');
        CREATE TABLE users (uid STRING, accountId STRING{METADATA_DDL}, PRIMARY KEY (uid) NOT ENFORCED)
        WITH ('connector' = 'kafka', 'topic' = '{changes}', {common});
        CREATE TABLE per_account (accountId STRING, n BIGINT{METADATA_DDL}, PRIMARY KEY (accountId) NOT ENFORCED)
        WITH ('connector' = 'kafka', 'topic' = '{counts}', {common});
        """,
    )
    project.manifest("moves", "name: moves\ntarget-table: users\nsql: SELECT uid, accountId FROM moves\n")
    project.manifest(
        "per-account",
        "name: per-account\ntarget-table: per_account\n"
        "sql: SELECT accountId, COUNT(*) AS n FROM users GROUP BY accountId\n",
    )
    state = tmp_path / "state"

    def replayed() -> dict[str, int]:
        rows: dict[str, int] = {}
        for record in kafka.records(counts):
            change = json.loads(record.value)
            key = json.loads(record.key)["accountId"]
            assert change["op"] in ("c", "u", "d") and key == (change["after"] or change["before"])["accountId"]
            if change["op"] == "d":
                del rows[key]
            else:
                rows[key] = change["after"]["n"]
        return rows

    upserts(data, "001", [{"uid": "u1", "accountId": "a"}, {"uid": "u2", "accountId": "a"}])
    run_changelog(spark, project, "moves", state / "moves", {})
    run_changelog(spark, project, "per-account", state / "counts", {})
    assert replayed() == {"a": 2}
    upserts(data, "002", [{"uid": "u2", "accountId": "b"}, {"uid": "u1", "accountId": "b"}])
    run_changelog(spark, project, "moves", state / "moves", {})
    run_changelog(spark, project, "per-account", state / "counts", {})
    assert replayed() == {"b": 2}
    ops = [json.loads(r.value)["op"] for r in kafka.records(counts)]
    assert ops == ["c", "d", "c"] or ops == ["c", "c", "d"], ops
    assert all(json.loads(r.value)["op"] == "c" for r in kafka.records(changes))
