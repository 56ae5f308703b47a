"""`sql-runner validate`: every bad input gives one clear line naming the file and field
or line, exit code 2, and changes nothing. Queries are analysed on local Spark.

Bad inputs tried (one test case each): bad YAML, unknown field, missing name, invalid name,
both sql and code, SQL syntax error, unknown table, unknown column, target schema mismatch,
unknown connector, missing required connector option, unresolved ${VAR}; plus a type
error, a query reading a sink-only table, and a code snippet that fails.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from runner.cli.main import cli
from tests.conftest import HIGH_VALUE_MANIFEST, ProjectDir

pytestmark = pytest.mark.spark


def invoke(project: ProjectDir, *args: str):
    return CliRunner().invoke(cli, ["validate", "--project", str(project.root), *args])


def test_valid_project_passes(spark, demo_project: ProjectDir):
    result = invoke(demo_project)
    assert result.exit_code == 0, result.stderr
    assert "ok  high-value: reads `demo`.`card-transactions`; writes `demo`.`high-value-tx`" in result.stdout


MANIFEST = "manifests/high-value.yaml"
DDL = "manifests/tables/tables.sql"


@pytest.mark.parametrize(
    ("case", "manifest_edit", "ddl_edit", "expected"),
    [
        (
            "bad yaml",
            lambda m: m.replace('target-table: "`demo`.`high-value-tx`"', "target-table: [`demo`"),
            None,
            (MANIFEST, "MANIFEST_INVALID_YAML"),
        ),
        (
            "unknown field",
            lambda m: m + "paralelism: 4\n",
            None,
            (MANIFEST + ":8: field 'paralelism'", "MANIFEST_UNKNOWN_FIELD"),
        ),
        (
            "missing name",
            lambda m: m.replace("name: high-value\n", ""),
            None,
            (MANIFEST + ": field 'name'", "MANIFEST_MISSING_REQUIRED_FIELD"),
        ),
        (
            "invalid name",
            lambda m: m.replace("name: high-value", "name: High Value!"),
            None,
            (MANIFEST + ":1: field 'name'", "MANIFEST_INVALID_NAME"),
        ),
        (
            "sql and code",
            lambda m: m + "code: execution_output = table('x')\n",
            None,
            (MANIFEST, "MANIFEST_SQL_AND_CODE"),
        ),
        (
            "sql syntax error",
            lambda m: m.replace("WHERE amount > 500", "WHERE amount >> > 500"),
            None,
            (MANIFEST + ":4: field 'sql'", "SQL_SYNTAX_ERROR"),
        ),
        (
            "unknown table",
            lambda m: m.replace("`demo`.`card-transactions`", "`demo`.`card-transaction`"),
            None,
            (MANIFEST + ":4: field 'sql'", "UNKNOWN_TABLE"),
        ),
        (
            "unknown column",
            lambda m: m.replace("WHERE amount", "WHERE amount_eur"),
            None,
            (MANIFEST + ":4: field 'sql'", "UNKNOWN_COLUMN"),
        ),
        (
            "type error",
            lambda m: m.replace("WHERE amount > 500", "WHERE amount > array(1)"),
            None,
            (MANIFEST + ":4: field 'sql'", "SQL_TYPE_ERROR"),
        ),
        (
            "target schema mismatch",
            lambda m: m.replace("amount, ts", "CAST(amount AS STRING) AS amount, ts"),
            None,
            (MANIFEST + ": field 'target-table'", "TARGET_SCHEMA_MISMATCH"),
        ),
        (
            "unknown connector",
            None,
            lambda d: d.replace(
                "'connector' = 'filesystem', 'path' = 'data/out'", "'connector' = 'filesytem', 'path' = 'data/out'"
            ),
            (DDL + ":10", "DDL_UNKNOWN_CONNECTOR"),
        ),
        (
            "missing connector option",
            None,
            lambda d: d.replace(", 'path' = 'data/in'", ""),
            (DDL + ":1", "DDL_MISSING_CONNECTOR_OPTION"),
        ),
        (
            "unresolved variable",
            None,
            lambda d: d.replace("'path' = 'data/in'", "'path' = '${NO_SUCH_DIR}/in'"),
            (DDL + ":8", "UNRESOLVED_PLACEHOLDER"),
        ),
        (
            "reading a sink-only table",
            lambda m: m.replace("`demo`.`card-transactions`", "`demo`.`nowhere`"),
            lambda d: (
                d + "\nCREATE TABLE `demo`.`nowhere` (transaction_id STRING, account_id STRING, amount DOUBLE, "
                "ts TIMESTAMP) WITH ('connector' = 'blackhole');"
            ),
            (DDL, "CONNECTOR_NOT_A_SOURCE"),
        ),
        (
            "failing code",
            lambda m: m.split("sql: |")[0] + "code: |\n  x = 1 / 0\n  execution_output = x\n",
            None,
            (MANIFEST + ":4: field 'code'", "CODE_ERROR"),
        ),
    ],
)
def test_bad_input_is_one_clear_line_and_exit_2(
    spark, demo_project: ProjectDir, monkeypatch, case, manifest_edit, ddl_edit, expected
):
    monkeypatch.delenv("NO_SUCH_DIR", raising=False)
    manifest_path = demo_project.root / MANIFEST
    ddl_path = demo_project.root / DDL
    if manifest_edit:
        manifest_path.write_text(manifest_edit(HIGH_VALUE_MANIFEST.lstrip()))
    if ddl_edit:
        ddl_path.write_text(ddl_edit(ddl_path.read_text()))
    before = sorted(p.relative_to(demo_project.root) for p in demo_project.root.rglob("*"))
    result = invoke(demo_project)
    assert result.exit_code == 2, (case, result.stdout, result.stderr)
    where, code = expected
    lines = [line for line in result.stderr.splitlines() if code in line]
    assert len(lines) == 1, (case, result.stderr)
    assert lines[0].startswith(where), (case, lines[0])
    assert "hint" in lines[0] or code in (
        "SQL_SYNTAX_ERROR",
        "UNKNOWN_COLUMN",
        "SQL_TYPE_ERROR",
        "MANIFEST_INVALID_YAML",
        "CODE_ERROR",
    )
    assert "Traceback" not in result.stderr
    after = sorted(p.relative_to(demo_project.root) for p in demo_project.root.rglob("*"))
    assert after == before, "validate must not create state or data"


def test_target_mismatch_lists_every_column(spark, demo_project: ProjectDir):
    (demo_project.root / MANIFEST).write_text(
        HIGH_VALUE_MANIFEST.replace(
            "SELECT transaction_id, account_id, amount, ts",
            "SELECT transaction_id, payee, CAST(amount AS INT) AS amount",
        )
    )
    result = invoke(demo_project)
    assert result.exit_code == 2
    mismatches = [line for line in result.stderr.splitlines() if "TARGET_SCHEMA_MISMATCH" in line]
    text = "\n".join(mismatches)
    assert "query column 'payee' (STRING) is not declared" in text
    assert "target column 'account_id' (STRING) is not produced" in text
    assert "target column 'ts' (TIMESTAMP) is not produced" in text
    assert len(mismatches) == 3
    # INT -> DOUBLE widens safely, so amount is not a mismatch
    assert "'amount'" not in text


def test_missing_metadata_columns_are_reported(spark, project: ProjectDir):
    project.ddl(
        "t",
        """
        CREATE TABLE src (a INT) WITH ('connector' = 'datagen');
        CREATE TABLE dst (a INT) WITH ('connector' = 'blackhole');
    """,
    )
    project.manifest("m", "name: m\ntarget-table: dst\nsql: SELECT a FROM src\n")
    result = invoke(project)
    assert result.exit_code == 2
    assert result.stderr.count("does not declare metadata column") == 6


def test_validate_given_paths_only(spark, demo_project: ProjectDir, tmp_path):
    other = tmp_path / "extra.sql"
    other.write_text("CREATE TABLE extra (a INT) WITH ('connector' = 'datagen', 'rows-per-second' = 'x');")
    result = invoke(demo_project, str(other))
    assert result.exit_code == 2
    assert "DDL_INVALID_CONNECTOR_OPTION" in result.stderr
    result = invoke(demo_project, str(demo_project.root / MANIFEST))
    assert result.exit_code == 0, result.stderr


def test_unknown_table_in_a_subquery_and_ctes_are_not_tables(spark, demo_project: ProjectDir):
    (demo_project.root / MANIFEST).write_text(
        HIGH_VALUE_MANIFEST.replace(
            "FROM `demo`.`card-transactions`\n  WHERE amount > 500",
            "FROM big\n  WHERE account_id NOT IN (SELECT account_id FROM blocked)",
        ).replace(
            "sql: |\n  SELECT",
            "sql: |\n  WITH big AS (SELECT * FROM `demo`.`card-transactions` WHERE amount > 500)\n  SELECT",
        )
    )
    result = invoke(demo_project)
    assert result.exit_code == 2
    lines = [line for line in result.stderr.splitlines() if "UNKNOWN_TABLE" in line]
    assert len(lines) == 1 and "`blocked`" in lines[0] and "big" not in lines[0].split("declared tables")[0]


STREAMING_DDL = """
CREATE TABLE `demo`.`accounts-seen` (account_id STRING{meta}) WITH ('connector' = 'blackhole');
CREATE TABLE `demo`.`per-account` (account_id STRING, n BIGINT{meta}) WITH ('connector' = 'blackhole');
CREATE TABLE `demo`.`per-account-keyed` (account_id STRING, n BIGINT{meta},
  PRIMARY KEY (account_id) NOT ENFORCED) WITH ('connector' = 'blackhole');
"""
NOT_STREAMABLE = {
    "distinct": ("`demo`.`accounts-seen`", "SELECT DISTINCT account_id FROM `demo`.`card-transactions`"),
    "unwatermarked-count": (
        "`demo`.`per-account`",
        "SELECT account_id, COUNT(*) AS n FROM `demo`.`card-transactions` GROUP BY account_id",
    ),
    "sorted": (
        "`demo`.`high-value-tx`",
        "SELECT transaction_id, account_id, amount, ts FROM `demo`.`card-transactions` ORDER BY amount",
    ),
}


def test_queries_spark_cannot_run_as_streams_are_refused_before_deploy(spark, demo_project: ProjectDir):
    """Bad inputs: a streaming DISTINCT without watermark, a count without watermark into an
    append sink, a sort on a stream; each is one line naming its file, with a hint."""
    from tests.conftest import METADATA_DDL

    demo_project.ddl("more", STREAMING_DDL.format(meta=METADATA_DDL))
    for name, (target, sql) in NOT_STREAMABLE.items():
        demo_project.manifest(name, f'name: {name}\ntarget-table: "{target}"\nsql: {sql}\n')
    # the same count into a keyed table runs in update mode, which Spark accepts without a watermark
    keyed = NOT_STREAMABLE["unwatermarked-count"][1]
    target = "`demo`.`per-account-keyed`"
    demo_project.manifest("keyed-count", f'name: keyed-count\ntarget-table: "{target}"\nsql: {keyed}\n')
    result = invoke(demo_project)
    assert result.exit_code == 2, result.stdout + result.stderr
    lines = [line for line in result.stderr.splitlines() if "STREAMING_UNSUPPORTED" in line]
    assert len(lines) == 3, result.stderr
    by_file = {line.split(":", 1)[0]: line for line in lines}
    assert set(by_file) == {f"manifests/{name}.yaml" for name in NOT_STREAMABLE}
    assert "append mode" in by_file["manifests/distinct.yaml"] and "watermark" in by_file["manifests/distinct.yaml"]
    assert "hint: declare a WATERMARK" in by_file["manifests/unwatermarked-count.yaml"]
    assert "PRIMARY KEY" in by_file["manifests/unwatermarked-count.yaml"]
    assert "Sorting is not supported" in by_file["manifests/sorted.yaml"]
    assert "hint: remove the ORDER BY" in by_file["manifests/sorted.yaml"]
    assert "keyed-count" not in result.stderr

    deployed = CliRunner().invoke(cli, ["deploy", "--project", str(demo_project.root)])
    assert deployed.exit_code == 2 and deployed.stderr.count("STREAMING_UNSUPPORTED") == 3
    state = demo_project.root / ".sql-runner" / "manifests"
    assert not list(state.rglob("deployed/*")), "nothing may be deployed"
