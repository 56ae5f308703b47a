"""Manifest loading: template merge, field validation and its error codes."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from runner.authoring.manifest_file import load_template, parse_manifest
from runner.cli.main import cli
from runner.core.errors import UserError
from runner.core.manifest import deep_merge

VALID = """
name: high-value
description: big ones
target-table: "`kafka`.`out`"
sql: SELECT a FROM `kafka`.`in`
"""


def codes(text: str, template: dict | None = None) -> list[str]:
    with pytest.raises(UserError) as caught:
        parse_manifest(text, template, file="manifests/x.yaml")
    for problem in caught.value.problems:
        assert problem.file == "manifests/x.yaml"
    return caught.value.codes


def test_valid_manifest_gets_template_defaults():
    manifest = parse_manifest(VALID, {"trigger-interval": "3 seconds", "sparkProperties": {"a": "1"}})
    assert manifest.name == "high-value"
    assert manifest.trigger_interval == "3 seconds"
    assert manifest.trigger_seconds == 3.0
    assert manifest.spark_properties == {"a": "1"}
    assert manifest.sql == "SELECT a FROM `kafka`.`in`"


def test_nested_maps_merge_key_by_key():
    template = {"sparkProperties": {"spark.sql.shuffle.partitions": "4", "spark.x": "t"}, "trigger-interval": "1 s"}
    manifest = parse_manifest(VALID + "sparkProperties:\n  spark.sql.shuffle.partitions: 8\n", template)
    assert manifest.spark_properties == {"spark.sql.shuffle.partitions": "8", "spark.x": "t"}
    assert deep_merge({"a": {"b": 1, "c": 2}, "d": 1}, {"a": {"b": 3}}) == {"a": {"b": 3, "c": 2}, "d": 1}


def test_trailing_semicolon_is_accepted():
    assert parse_manifest(VALID.replace("`in`", "`in`;")).sql == "SELECT a FROM `kafka`.`in`"


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("name: [unclosed\n", "MANIFEST_INVALID_YAML"),
        ("name: a\nname: b\n", "MANIFEST_INVALID_YAML"),
        ("- just\n- a list\n", "MANIFEST_NOT_A_MAPPING"),
        ("", "MANIFEST_EMPTY"),
        (VALID + "colour: blue\n", "MANIFEST_UNKNOWN_FIELD"),
        (VALID.replace("name: high-value\n", ""), "MANIFEST_MISSING_REQUIRED_FIELD"),
        (VALID.replace('target-table: "`kafka`.`out`"\n', ""), "MANIFEST_MISSING_REQUIRED_FIELD"),
        (VALID.replace("high-value", "High_Value"), "MANIFEST_INVALID_NAME"),
        (VALID.replace("high-value", "-starts-with-dash"), "MANIFEST_INVALID_NAME"),
        (VALID.replace("high-value", "a" * 64), "MANIFEST_INVALID_NAME"),
        (VALID + "code: execution_output = 1\n", "MANIFEST_SQL_AND_CODE"),
        (VALID.replace("sql: SELECT a FROM `kafka`.`in`\n", ""), "MANIFEST_MISSING_QUERY"),
        (VALID.replace("SELECT a FROM `kafka`.`in`", "'  -- only a comment'"), "MANIFEST_EMPTY_SQL"),
        (VALID.replace("SELECT a FROM `kafka`.`in`", "SELECT 1; SELECT 2"), "MANIFEST_MULTIPLE_STATEMENTS"),
        (VALID + "trigger-interval: often\n", "MANIFEST_INVALID_INTERVAL"),
        (VALID + "sparkProperties: [1, 2]\n", "MANIFEST_INVALID_FIELD_TYPE"),
        (VALID + "sparkProperties:\n  spark.sqlrunner.changelog.engine: fast\n", "MANIFEST_INVALID_CHANGELOG_ENGINE"),
        (VALID + "sparkProperties:\n  a: {nested: 1}\n", "MANIFEST_INVALID_FIELD_TYPE"),
        (VALID.replace("description: big ones", "description: [1]"), "MANIFEST_INVALID_FIELD_TYPE"),
        (VALID + "meta:\n  query-id: x\n", "MANIFEST_RESERVED_FIELD"),
    ],
)
def test_bad_manifests_are_rejected_with_a_stable_code(text: str, code: str):
    assert code in codes(text)


def test_code_snippet_checks():
    base = VALID.replace("sql: SELECT a FROM `kafka`.`in`\n", "")
    assert "MANIFEST_CODE_SYNTAX_ERROR" in codes(base + "code: 'execution_output = ('\n")
    assert "MANIFEST_CODE_NO_OUTPUT" in codes(base + "code: 'x = 1'\n")
    assert parse_manifest(base + "code: 'execution_output = table(\"x\")'\n").code


def test_unknown_field_names_line_and_suggests_the_right_one():
    with pytest.raises(UserError) as caught:
        parse_manifest(VALID + "sparkProperties: {}\ntrigger-intervall: 5 seconds\n", file="m.yaml")
    problem = caught.value.problems[0]
    assert problem.line == 7  # VALID starts with a blank line
    assert problem.field == "trigger-intervall"
    assert "did you mean 'trigger-interval'" in (problem.hint or "")
    assert problem.render().startswith("m.yaml:7: field 'trigger-intervall': MANIFEST_UNKNOWN_FIELD")


def test_template_may_not_hold_per_query_fields(tmp_path):
    path = tmp_path / "job-template.yaml"
    path.write_text("sql: SELECT 1\nsparkProperties: {a: 1}\n")
    with pytest.raises(UserError) as caught:
        load_template(path)
    assert caught.value.codes == ["TEMPLATE_PER_QUERY_FIELD"]
    path.write_text("trigger-interval: sometimes\n")
    with pytest.raises(UserError) as caught:
        load_template(path)
    assert caught.value.codes == ["TEMPLATE_INVALID_INTERVAL"]


def test_schema_command_prints_a_json_schema_for_editors():
    result = CliRunner().invoke(cli, ["schema"])
    assert result.exit_code == 0
    schema = json.loads(result.stdout)
    assert schema["additionalProperties"] is False
    assert set(schema["required"]) == {"name", "target-table"}
    assert {"sql", "code", "sparkProperties", "trigger-interval"} <= set(schema["properties"])
    assert "meta" not in schema["properties"]
    assert schema["properties"]["name"]["maxLength"] == 63
