"""Changelog tables end to end: debezium-json and upsert sources, a query over their current rows, and the
difference written to PostgreSQL (real Spark, a real PostgreSQL server)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from jobs import runtime
from jobs.build import build_job
from runner.authoring.project import load_project
from runner.core.manifest import Meta
from runner.core.protocol.jobspec import JobSpec
from tests.clihelpers import START
from tests.conftest import METADATA_DDL, ProjectDir

PG_METADATA = """,
  __create_timestamp TIMESTAMP, __query_name TEXT, __query_description TEXT, __query_id TEXT,
  __query_version INTEGER, __query_create_timestamp TIMESTAMP"""


def run_changelog(spark, project: ProjectDir, name: str, state: Path, env: dict[str, str]) -> None:
    """Run a manifest once, in this process, at version 1 on one checkpoint (reruns resume it)."""
    proj = load_project(project.root)
    manifest = proj.load_manifest(project.root / "manifests" / f"{name}.yaml")
    meta = Meta(query_id=str(uuid.uuid5(uuid.NAMESPACE_URL, name)), query_version=1, query_create_timestamp=START)
    manifest = manifest.model_copy(update={"meta": meta})
    spec = JobSpec(manifest, proj.catalog, str(state / "checkpoint"), str(state / "dead-letter"), True)
    built = build_job(spark, manifest, proj.catalog, env, live=True)
    queries = runtime.start(spark, built, spec, env)
    runtime.wait(spark, queries, once=True)


def debezium(folder: Path, name: str, records: list[dict]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.json").write_text("".join(json.dumps(r) + "\n" for r in records))


def user(uid: str, account: str, full_name: str = "x") -> dict:
    return {"uid": uid, "accountId": account, "id": uid.split("-")[1], "fullName": full_name}


@pytest.fixture
def pg_table(postgres):
    """A function making a table unique to the test; returns its name."""

    def make(columns: str, key: str) -> str:
        name = f"t_{uuid.uuid4().hex[:10]}"
        postgres.execute(f"CREATE TABLE {name} ({columns}{PG_METADATA}, PRIMARY KEY ({key}))")
        return name

    return make


def test_count_by_account_follows_updates_and_deletes(spark, project: ProjectDir, postgres, pg_table, tmp_path):
    table = pg_table("accountid TEXT, usercount BIGINT", "accountid")
    project.ddl(
        "tables",
        f"""
        CREATE TABLE users (
          uid STRING, accountId STRING, id STRING, fullName STRING,
          PRIMARY KEY (uid) NOT ENFORCED
        ) WITH ('connector' = 'filesystem', 'path' = '{project.root}/data/users', 'format' = 'debezium-json');

        CREATE TABLE user_count_by_account (
          accountId STRING, userCount BIGINT{METADATA_DDL},
          PRIMARY KEY (accountId) NOT ENFORCED
        ) WITH ('connector' = 'jdbc', 'url' = '{postgres.url}', 'table-name' = '{table}',
                'username' = 'runner', 'password' = '${{PG_PASSWORD}}');
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
    env = {"PG_PASSWORD": postgres.password}
    users = project.root / "data" / "users"
    debezium(
        users,
        "001",
        [{"op": "c", "after": user(u, u.split("-")[0])} for u in ("100-1", "100-2", "101-1", "101-2")]
        + [{"op": "u", "before": user("100-1", "100"), "after": user("100-1", "100", "renamed")}],
    )
    run_changelog(spark, project, "user-count", tmp_path / "state", env)
    rows = postgres.execute(f"SELECT accountid, usercount FROM {table} ORDER BY accountid")
    assert rows == [("100", 2), ("101", 2)]
    debezium(users, "002", [{"op": "d", "before": user("101-2", "101")}])
    run_changelog(spark, project, "user-count", tmp_path / "state", env)
    assert postgres.execute(f"SELECT accountid, usercount FROM {table} ORDER BY accountid") == [
        ("100", 2),
        ("101", 1),
    ]
    debezium(users, "003", [{"op": "d", "before": user("101-1", "101")}])
    run_changelog(spark, project, "user-count", tmp_path / "state", env)
    assert postgres.execute(f"SELECT accountid, usercount FROM {table} ORDER BY accountid") == [("100", 2)]
    names = postgres.execute(f"SELECT DISTINCT __query_name FROM {table}")
    assert names == [("user-count",)]


def upserts(folder: Path, name: str, rows: list[dict]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.json").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_three_table_left_join_follows_updates_and_deletes(spark, project: ProjectDir, postgres, pg_table, tmp_path):
    table = pg_table("accountid TEXT, uid TEXT, favoritecolor TEXT, favoritecheese TEXT", "uid")
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

        CREATE TABLE user_favorite_color_and_cheese (
          accountId STRING, uid STRING, favoriteColor STRING, favoriteCheese STRING{METADATA_DDL},
          PRIMARY KEY (uid) NOT ENFORCED
        ) WITH ('connector' = 'jdbc', 'url' = '{postgres.url}', 'table-name' = '{table}',
                'username' = 'runner', 'password' = '${{PG_PASSWORD}}');
        """,
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
    env = {"PG_PASSWORD": postgres.password}
    state = tmp_path / "state"

    def rows() -> list[tuple]:
        return postgres.execute(f"SELECT accountid, uid, favoritecolor, favoritecheese FROM {table} ORDER BY uid")

    debezium(data / "users", "001", [{"op": "c", "after": user("103-1", "103")}])
    run_changelog(spark, project, "color-and-cheese", state, env)
    assert rows() == [("103", "103-1", None, None)]
    upserts(data / "color", "001", [{"userUid": "103-1", "favoriteColor": "blue"}])
    upserts(data / "cheese", "001", [{"userUid": "103-1", "favoriteCheese": "cheddar"}])
    run_changelog(spark, project, "color-and-cheese", state, env)
    assert rows() == [("103", "103-1", "blue", "cheddar")]
    upserts(data / "cheese", "002", [{"userUid": "103-1", "favoriteCheese": "brie"}])
    run_changelog(spark, project, "color-and-cheese", state, env)
    assert rows() == [("103", "103-1", "blue", "brie")]
    debezium(data / "users", "002", [{"op": "d", "before": user("103-1", "103")}])
    run_changelog(spark, project, "color-and-cheese", state, env)
    assert rows() == []


def test_malformed_changes_are_set_aside_and_unknown_keys_upserted(
    spark, project: ProjectDir, postgres, pg_table, tmp_path
):
    """Bad inputs tried: a debezium record without op, one with an unknown op, a delete without its before
    row, a line that is not JSON; an update for a key never inserted (it becomes the key's row, as an
    upsert), a delete of a key never inserted (nothing to remove)."""
    table = pg_table("accountid TEXT, usercount BIGINT", "accountid")
    data = project.root / "data"
    project.ddl(
        "tables",
        f"""
        CREATE TABLE users (
          uid STRING, accountId STRING, id STRING, fullName STRING,
          PRIMARY KEY (uid) NOT ENFORCED
        ) WITH ('connector' = 'filesystem', 'path' = '{data}/users', 'format' = 'debezium-json');

        CREATE TABLE user_count_by_account (
          accountId STRING, userCount BIGINT{METADATA_DDL},
          PRIMARY KEY (accountId) NOT ENFORCED
        ) WITH ('connector' = 'jdbc', 'url' = '{postgres.url}', 'table-name' = '{table}',
                'username' = 'runner', 'password' = '${{PG_PASSWORD}}');
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
    run_changelog(spark, project, "user-count", state, {"PG_PASSWORD": postgres.password})
    assert postgres.execute(f"SELECT accountid, usercount FROM {table} ORDER BY accountid") == [("100", 1), ("200", 1)]
    dead = spark.read.json(str(state / "dead-letter" / "users")).collect()
    reasons = sorted(r["reason"] for r in dead)
    assert reasons == [
        "debezium op d has no before row",
        "debezium record has an unknown op: x",
        "debezium record has no op (c, r, u or d)",
        "malformed JSON: not a JSON object",
    ]
