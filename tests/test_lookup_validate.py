"""What ``validate`` and the plan say of lookup tables: one clear line per refusal, exit 2, nothing changed;
and how a change to a lookup table is judged.

Bad inputs tried: 'lookup.cache' = 'NONE', a reload interval that is not a duration, a staleness limit
shorter than the interval, a retry count that is not a number, a lookup option on a folder without
'lookup.cache', a folder lookup table with 'changelog-mode', a WATERMARK on a lookup table, an ARRAY column
in a jdbc lookup table; a database without the table, without a column, or unreachable; FOR SYSTEM_TIME AS
OF after a stream, after no table, naming the stream's event-time column, or PROCTIME(); a query that reads
only a lookup table; a changelog query joining a lookup table.
"""

from __future__ import annotations

import uuid

import pytest
from click.testing import CliRunner

from runner.cli.main import cli
from tests.clihelpers import refused_by_validate
from tests.conftest import METADATA_DDL, ProjectDir

pytestmark = pytest.mark.spark

EVENTS = """
CREATE TABLE events (id BIGINT, user_id BIGINT, ts TIMESTAMP(3), proc_time AS PROCTIME(),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND)
WITH ('connector' = 'filesystem', 'path' = 'data/events', 'format' = 'json');
CREATE TABLE enriched (event_id BIGINT, name STRING{metadata})
WITH ('connector' = 'filesystem', 'path' = 'data/out', 'format' = 'json');
""".replace("{metadata}", METADATA_DDL)
JOIN = (
    "SELECT e.id AS event_id, u.name FROM events AS e "
    "LEFT JOIN users FOR SYSTEM_TIME AS OF e.proc_time AS u ON u.id = e.user_id"
)
FOLDER = (
    "CREATE TABLE users (id BIGINT, name STRING) WITH ('connector' = 'filesystem', 'path' = 'data/users', "
    "'format' = 'json', 'lookup.cache' = 'FULL');"
)


def users(url: str, table: str, columns: str = "id BIGINT, name STRING", extra: str = "") -> str:
    return (
        f"CREATE TABLE users ({columns}) WITH ('connector' = 'jdbc', 'url' = '{url}', 'table-name' = '{table}', "
        f"'username' = 'runner', 'password' = '${{PG_PASSWORD}}'{extra});"
    )


@pytest.fixture
def database(postgres, monkeypatch):
    """A PostgreSQL table for the users lookup table, and the password in the environment validate reads."""
    table = f"users_{uuid.uuid4().hex[:8]}"
    postgres.execute(f"CREATE TABLE {table} (id BIGINT PRIMARY KEY, name TEXT)")
    monkeypatch.setenv("PG_PASSWORD", postgres.password)
    return postgres, table


def option(extra: str):
    return lambda url, table: users(url, table, extra=extra)


CASES = [
    ("lookup.cache NONE", option(", 'lookup.cache' = 'NONE'"), JOIN, "DDL_INVALID_CONNECTOR_OPTION"),
    (
        "interval not a duration",
        option(", 'lookup.full-cache.periodic-reload.interval' = 'often'"),
        JOIN,
        "DDL_INVALID_CONNECTOR_OPTION",
    ),
    (
        "staleness below the interval",
        option(", 'lookup.full-cache.periodic-reload.interval' = '1 min', 'lookup.max-staleness' = '30 s'"),
        JOIN,
        "DDL_INVALID_CONNECTOR_OPTION",
    ),
    ("retries not a number", option(", 'lookup.max-retries' = 'many'"), JOIN, "DDL_INVALID_CONNECTOR_OPTION"),
    (
        "folder option without lookup.cache",
        lambda url, table: FOLDER.replace("'lookup.cache' = 'FULL'", "'lookup.max-retries' = '2'"),
        None,
        "DDL_INVALID_CONNECTOR_OPTION",
    ),
    (
        "folder lookup with changelog-mode",
        lambda url, table: FOLDER.replace("name STRING)", "name STRING, PRIMARY KEY (id) NOT ENFORCED)").replace(
            "'lookup.cache'", "'changelog-mode' = 'upsert', 'lookup.cache'"
        ),
        None,
        "DDL_INVALID_CONNECTOR_OPTION",
    ),
    (
        "watermark on a lookup table",
        lambda url, table: users(url, table, "id BIGINT, name STRING, at TIMESTAMP(3), WATERMARK FOR at AS at"),
        JOIN,
        "DDL_INVALID_WATERMARK",
    ),
    (
        "array column",
        lambda url, table: users(url, table, "id BIGINT, name ARRAY<STRING>"),
        "SELECT e.id AS event_id, u.name[0] AS name FROM events e JOIN users u ON u.id = e.user_id",
        "LOOKUP_COLUMN_TYPE",
    ),
    ("missing database table", lambda url, table: users(url, "nothing_here"), JOIN, "LOOKUP_TABLE_MISSING"),
    (
        "missing database column",
        lambda url, table: users(url, table, "id BIGINT, name STRING, region STRING"),
        JOIN,
        "LOOKUP_COLUMN_MISSING",
    ),
    (
        "unreachable database",
        lambda url, table: users("jdbc:postgresql://127.0.0.1:1/x", table),
        JOIN,
        "JDBC_UNREACHABLE",
    ),
    (
        "as of after a stream",
        None,
        "SELECT e.id AS event_id, u.name FROM events FOR SYSTEM_TIME AS OF proc_time AS e "
        "JOIN users u ON u.id = e.user_id",
        "LOOKUP_AS_OF_NOT_LOOKUP",
    ),
    (
        "as of after no table",
        None,
        "SELECT e.id AS event_id, u.name FROM events e JOIN users u ON u.id = e.user_id "
        "FOR SYSTEM_TIME AS OF e.proc_time",
        "LOOKUP_AS_OF_MISPLACED",
    ),
    ("as of event time", None, JOIN.replace("e.proc_time", "e.ts"), "LOOKUP_AS_OF_EVENT_TIME"),
    ("as of PROCTIME()", None, JOIN.replace("e.proc_time", "PROCTIME()"), "LOOKUP_AS_OF_SYNTAX"),
    ("only a lookup table", None, "SELECT id AS event_id, name FROM users", "LOOKUP_ONLY"),
    (
        "changelog query with a lookup table",
        lambda url, table: (
            users(url, table) + "CREATE TABLE accounts (id BIGINT, name STRING, PRIMARY KEY (id) NOT ENFORCED) WITH ("
            "'connector' = 'filesystem', 'path' = 'data/accounts', 'format' = 'debezium-json');"
        ),
        "SELECT a.id AS event_id, u.name FROM accounts a JOIN users u ON u.id = a.id",
        "CHANGELOG_LOOKUP",
    ),
]


@pytest.mark.parametrize(("case", "ddl", "sql", "code"), CASES, ids=[c[0] for c in CASES])
def test_refused_with_one_clear_line(spark, project: ProjectDir, database, case, ddl, sql, code):
    postgres, table = database
    project.ddl("tables", EVENTS + (ddl or (lambda url, t: users(url, t)))(postgres.url, table))
    project.manifest("enrich", f"name: enrich\ntarget-table: enriched\nsql: {sql or JOIN}\n")
    refused_by_validate(project, code, secret=postgres.password, case=case)


@pytest.mark.parametrize("kind", ["jdbc", "folder"])
def test_a_valid_lookup_project_passes(spark, project: ProjectDir, database, kind):
    postgres, table = database
    project.ddl("tables", EVENTS + (users(postgres.url, table) if kind == "jdbc" else FOLDER))
    project.manifest("enrich", f"name: enrich\ntarget-table: enriched\nsql: {JOIN}\n")
    result = CliRunner().invoke(cli, ["validate", "--project", str(project.root)])
    assert result.exit_code == 0, result.stderr
    assert "ok  enrich: reads `events`; looks up `users`; writes `enriched`" in result.stdout


def test_a_reload_setting_restarts_and_other_reference_data_is_judged_as_a_query_change(
    spark, project: ProjectDir, database
):
    from runner.analysis.query_diff import diff_queries
    from runner.authoring.project import load_project

    postgres, table = database
    ddl = project.ddl("tables", EVENTS + users(postgres.url, table))
    path = project.manifest("enrich", f"name: enrich\ntarget-table: enriched\nsql: {JOIN}\n")
    loaded = load_project(project.root)
    old = loaded.load_manifest(path)
    tables = list(loaded.catalog.tables)
    env = {"PG_PASSWORD": postgres.password}

    def diff(ddl_text: str, sql: str = JOIN):
        ddl.write_text(ddl_text)
        path.write_text(f"name: enrich\ntarget-table: enriched\nsql: {sql}\n")
        new = load_project(project.root)
        return diff_queries(spark, old, tables, new.load_manifest(path), new.catalog, env)

    same = diff(EVENTS + users(postgres.url, table), JOIN.replace(" AS u ", "   AS  u "))
    assert not same.changed

    reload = diff(EVENTS + users(postgres.url, table, extra=", 'lookup.full-cache.periodic-reload.interval' = '5 s'"))
    assert reload.changed and reload.state_compatible, reload.reasons
    assert [r.code for r in reload.reasons] == ["LOOKUP_OPTIONS_CHANGED"]
    assert reload.reasons[0].param["fields"] == ("lookup.full-cache.periodic-reload.interval",)
    assert "restart" in reload.reasons[0].render()

    other = f"{table}_v2"
    postgres.execute(f"CREATE TABLE {other} (id BIGINT PRIMARY KEY, name TEXT)")
    moved = diff(EVENTS + users(postgres.url, other))
    assert moved.changed and moved.state_compatible, moved.reasons  # a stateless query: its state carries over
    assert "LOOKUP_TABLE_CHANGED" in [r.code for r in moved.reasons]

    added = diff(
        EVENTS + users(postgres.url, table), "SELECT e.id AS event_id, CAST(NULL AS STRING) AS name FROM events e"
    )
    assert added.changed and "QUERY_MEANING_CHANGED" in [r.code for r in added.reasons]
    assert "SOURCES_CHANGED" not in [r.code for r in added.reasons]  # a lookup table is no stream of the checkpoint


PARTIAL = ", 'lookup.cache' = 'PARTIAL'"
PARTIAL_CASES = [
    ("partial on a folder", None, FOLDER.replace("'FULL'", "'PARTIAL'"), JOIN, "DDL_INVALID_CONNECTOR_OPTION"),
    (
        "reload interval on a partial table",
        PARTIAL + ", 'lookup.full-cache.periodic-reload.interval' = '5 s'",
        None,
        JOIN,
        "DDL_INVALID_CONNECTOR_OPTION",
    ),
    (
        "partial option on a full table",
        ", 'lookup.partial-cache.max-rows' = '10'",
        None,
        JOIN,
        "DDL_INVALID_CONNECTOR_OPTION",
    ),
    ("max-rows zero", PARTIAL + ", 'lookup.partial-cache.max-rows' = '0'", None, JOIN, "DDL_INVALID_CONNECTOR_OPTION"),
    (
        "partial right join",
        PARTIAL,
        None,
        "SELECT e.id AS event_id, u.name FROM events e RIGHT JOIN users u ON u.id = e.user_id",
        "LOOKUP_PARTIAL_JOIN",
    ),
    (
        "partial without an equality",
        PARTIAL,
        None,
        "SELECT e.id AS event_id, u.name FROM events e JOIN users u ON u.id > e.user_id",
        "LOOKUP_PARTIAL_JOIN",
    ),
    (
        "partial left join with another condition",
        PARTIAL,
        None,
        "SELECT e.id AS event_id, u.name FROM events e LEFT JOIN users u ON u.id = e.user_id AND u.name <> 'x'",
        "LOOKUP_PARTIAL_JOIN",
    ),
]


@pytest.mark.parametrize(("case", "extra", "ddl", "sql", "code"), PARTIAL_CASES, ids=[c[0] for c in PARTIAL_CASES])
def test_partial_refused_with_one_clear_line(spark, project: ProjectDir, database, case, extra, ddl, sql, code):
    postgres, table = database
    project.ddl("tables", EVENTS + (ddl or users(postgres.url, table, extra=extra)))
    project.manifest("enrich", f"name: enrich\ntarget-table: enriched\nsql: {sql}\n")
    refused_by_validate(project, code, secret=postgres.password, case=case)


def test_a_partial_inner_join_with_a_condition_on_the_table_passes(spark, project: ProjectDir, database):
    postgres, table = database
    project.ddl("tables", EVENTS + users(postgres.url, table, extra=PARTIAL))
    sql = "SELECT e.id AS event_id, u.name FROM events e JOIN users u ON u.id = e.user_id AND u.name <> 'x'"
    project.manifest("enrich", f"name: enrich\ntarget-table: enriched\nsql: {sql}\n")
    result = CliRunner().invoke(cli, ["validate", "--project", str(project.root)])
    assert result.exit_code == 0, result.stderr
