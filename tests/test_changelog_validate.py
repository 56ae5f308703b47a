"""What ``validate`` refuses in changelog queries and jdbc targets: one clear line each, exit 2, nothing changed.

Bad inputs tried: a changelog table without PRIMARY KEY (upsert-kafka, debezium-json, 'changelog-mode'),
'changelog-mode' = 'upsert' with debezium-json, a literal password, a non-PostgreSQL URL; a query mixing a
changelog table with one that only grows, calling rand() or current_timestamp(), written as code; a
changelog query into a file table, a plain kafka table and a jdbc table without key; a jdbc target whose
database table is missing, lacks a column, has another key, or whose database cannot be reached.
"""

from __future__ import annotations

import uuid

import pytest
from click.testing import CliRunner

from runner.cli.main import cli
from tests.clihelpers import refused_by_validate
from tests.conftest import METADATA_DDL, ProjectDir
from tests.tablehelpers import PG_METADATA

pytestmark = pytest.mark.spark

USERS = """
CREATE TABLE users (uid STRING, accountId STRING, PRIMARY KEY (uid) NOT ENFORCED)
WITH ('connector' = 'filesystem', 'path' = 'data/users', 'format' = 'debezium-json');
"""
GROWING = """
CREATE TABLE events (uid STRING, kind STRING) WITH ('connector' = 'filesystem', 'path' = 'data/e', 'format' = 'json');
"""
COUNT = "SELECT accountId, COUNT(*) AS n FROM users GROUP BY accountId"


def jdbc_target(url: str, table: str, key: str = ", PRIMARY KEY (accountId) NOT ENFORCED") -> str:
    return f"""
CREATE TABLE counts (accountId STRING, n BIGINT{METADATA_DDL}{key})
WITH ('connector' = 'jdbc', 'url' = '{url}', 'table-name' = '{table}', 'username' = 'runner',
      'password' = '${{PG_PASSWORD}}');
"""


OTHER_TARGETS = {
    "file": "WITH ('connector' = 'filesystem', 'path' = 'data/out', 'format' = 'json')",
    "kafka": "WITH ('connector' = 'kafka', 'topic' = 'out', 'properties.bootstrap.servers' = '127.0.0.1:1', "
    "'format' = 'json')",
}


def other_target(kind: str) -> str:
    return f"CREATE TABLE counts (accountId STRING, n BIGINT{METADATA_DDL}) {OTHER_TARGETS[kind]};"


@pytest.fixture
def database(postgres, monkeypatch):
    """A PostgreSQL table for the ``counts`` target, and the password in the environment validate reads."""
    table = f"counts_{uuid.uuid4().hex[:8]}"
    postgres.execute(f"CREATE TABLE {table} (accountid TEXT PRIMARY KEY, n BIGINT{PG_METADATA})")
    monkeypatch.setenv("PG_PASSWORD", postgres.password)
    return postgres, table


CASES = [
    (
        "debezium-json without key",
        lambda d: d.replace(", PRIMARY KEY (uid) NOT ENFORCED", ""),
        None,
        "DDL_CHANGELOG_WITHOUT_KEY",
    ),
    (
        "upsert-kafka without key",
        lambda d: (
            d + "CREATE TABLE uk (a STRING) WITH ('connector' = 'upsert-kafka', 'topic' = 't', "
            "'properties.bootstrap.servers' = '127.0.0.1:1', 'key.format' = 'json', 'value.format' = 'json');"
        ),
        None,
        "DDL_CHANGELOG_WITHOUT_KEY",
    ),
    (
        "changelog-mode and debezium-json",
        lambda d: d.replace("'format' = 'debezium-json'", "'format' = 'debezium-json', 'changelog-mode' = 'upsert'"),
        None,
        "DDL_INVALID_CONNECTOR_OPTION",
    ),
    (
        "literal password",
        lambda d: d.replace("'${PG_PASSWORD}'", "'hunter2'"),
        None,
        "DDL_INVALID_CONNECTOR_OPTION",
    ),
    (
        "not a PostgreSQL url",
        lambda d: d.replace("jdbc:postgresql://", "jdbc:mysql://"),
        None,
        "DDL_INVALID_CONNECTOR_OPTION",
    ),
    (
        "mixed with a growing table",
        lambda d: d + GROWING,
        "SELECT u.accountId, COUNT(*) AS n FROM users u JOIN events e ON u.uid = e.uid GROUP BY u.accountId",
        "CHANGELOG_MIXED",
    ),
    ("rand()", None, "SELECT accountId, CAST(rand() * 10 AS BIGINT) AS n FROM users", "CHANGELOG_NONDETERMINISTIC"),
    (
        "current_timestamp()",
        None,
        "SELECT accountId, COUNT(*) AS n FROM users WHERE current_timestamp() > TIMESTAMP '2020-01-01' "
        "GROUP BY accountId",
        "CHANGELOG_NONDETERMINISTIC",
    ),
    ("code", None, "CODE", "CHANGELOG_QUERY_NOT_SQL"),
    ("file target", lambda d: USERS + other_target("file"), None, "CHANGELOG_TARGET_APPEND_ONLY"),
    ("plain kafka target", lambda d: USERS + other_target("kafka"), None, "CHANGELOG_TARGET_APPEND_ONLY"),
    (
        "jdbc target without key",
        lambda d: d.replace(", PRIMARY KEY (accountId) NOT ENFORCED", ""),
        None,
        "CHANGELOG_TARGET_APPEND_ONLY",
    ),
    (
        "missing database table",
        lambda d: d.replace("'table-name' = 'counts_", "'table-name' = 'nothing_"),
        None,
        "JDBC_TABLE_MISSING",
    ),
    ("missing database column", "DROP COLUMN n", None, "JDBC_COLUMN_MISSING"),
    ("another database key", "DROP CONSTRAINT {table}_pkey", None, "JDBC_KEY_MISMATCH"),
    ("unreachable database", "UNREACHABLE", None, "JDBC_UNREACHABLE"),
]


@pytest.mark.parametrize(("case", "ddl_edit", "sql", "code"), CASES, ids=[c[0] for c in CASES])
def test_refused_with_one_clear_line(spark, project: ProjectDir, database, case, ddl_edit, sql, code):
    postgres, table = database
    ddl = USERS + jdbc_target(postgres.url, table)
    if isinstance(ddl_edit, str) and ddl_edit == "UNREACHABLE":
        ddl = ddl.replace(f"127.0.0.1:{postgres.port}", "127.0.0.1:1")
    elif isinstance(ddl_edit, str):
        postgres.execute(f"ALTER TABLE {table} {ddl_edit.format(table=table)}")
    elif ddl_edit is not None:
        ddl = ddl_edit(ddl)
    project.ddl("tables", ddl)
    if sql == "CODE":
        body = "code: |\n  execution_output = table('users').groupBy('accountId').count()\n"
    else:
        body = f"sql: {sql or COUNT}\n"
    project.manifest("counts", f"name: counts\ntarget-table: counts\n{body}")
    refused_by_validate(project, code, secret=postgres.password, case=case)


def test_a_valid_changelog_project_passes(spark, project: ProjectDir, database):
    postgres, table = database
    project.ddl("tables", USERS + jdbc_target(postgres.url, table))
    project.manifest("counts", f"name: counts\ntarget-table: counts\nsql: {COUNT}\n")
    result = CliRunner().invoke(cli, ["validate", "--project", str(project.root)])
    assert result.exit_code == 0, result.stderr
    assert "ok  counts: reads `users`; writes `counts`; incremental" in result.stdout
    # a shape the incremental operators do not cover yet runs recomputed, and validate says why
    ranked = "SELECT accountId, COUNT(*) AS n FROM users GROUP BY accountId ORDER BY n LIMIT 5"
    project.manifest("counts", f"name: counts\ntarget-table: counts\nsql: {ranked}\n")
    result = CliRunner().invoke(cli, ["validate", "--project", str(project.root)])
    assert result.exit_code == 0, result.stderr
    assert (
        "ok  counts: reads `users`; writes `counts`; recomputed every micro-batch: the incremental operators do not "
        "cover LIMIT or OFFSET yet"
    ) in result.stdout, result.stdout


def test_a_changed_changelog_query_is_rebuilt_and_a_reformatted_one_is_unchanged(spark, project: ProjectDir, database):
    from runner.analysis.query_diff import diff_queries
    from runner.authoring.project import load_project
    from runner.core.querydiff import same_query

    postgres, table = database
    project.ddl("tables", USERS + jdbc_target(postgres.url, table))
    path = project.manifest("counts", f"name: counts\ntarget-table: counts\nsql: {COUNT}\n")
    loaded = load_project(project.root)
    old = loaded.load_manifest(path)
    tables = list(loaded.catalog.tables)
    env = {"PG_PASSWORD": postgres.password}

    def diff(sql: str, *properties: str):
        path.write_text(f"name: counts\ntarget-table: counts\nsql: {sql}\n" + "".join(properties))
        new = load_project(project.root)
        return diff_queries(spark, old, tables, new.load_manifest(path), new.catalog, env)

    same = diff("select accountId,   count(*) AS n from users group by accountId")
    assert not same.changed
    changed = diff("SELECT accountId, COUNT(DISTINCT uid) AS n FROM users GROUP BY accountId")
    assert changed.changed and not changed.state_compatible
    assert "CHANGELOG_QUERY_CHANGED" in [r.code for r in changed.reasons]
    # the same query on the other engine: the state the incremental operators keep is not the recomputing one's
    engine = "sparkProperties:\n  spark.sqlrunner.changelog.engine: recompute\n"
    switched = diff(COUNT, engine)
    assert switched.changed and not switched.state_compatible
    assert [r.code for r in switched.reasons] == ["CHANGELOG_ENGINE_CHANGED"]
    assert "incremental -> recompute" in switched.reasons[0].text
    # and the plan does not take it for the same query whose text it need not compare
    assert not same_query(old, load_project(project.root).load_manifest(path))
