"""Query changes judged by Spark: meaning, output columns, and whether the state carries over."""

from __future__ import annotations

import pytest

from runner.analysis.query_diff import diff_queries
from runner.authoring.project import load_project
from runner.core.manifest import Manifest
from runner.core.reasons import Reason, codes
from tests.conftest import METADATA_DDL, TRANSACTIONS_DDL, ProjectDir

pytestmark = pytest.mark.spark

COUNTS_DDL = (
    """
CREATE TABLE `demo`.`counts` (k STRING, w TIMESTAMP(3), n BIGINT, total DOUBLE"""
    + METADATA_DDL
    + """
) WITH ('connector' = 'blackhole');
CREATE TABLE `demo`.`refunds` (transaction_id STRING, account_id STRING, amount DOUBLE, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = 'data/refunds', 'format' = 'json');
"""
)

FILTER = "SELECT transaction_id, account_id, amount, ts FROM `demo`.`card-transactions` WHERE amount > 500"
GROUPED = (
    "SELECT account_id AS k, window.start AS w, COUNT(*) AS n, SUM(amount) AS total "
    "FROM `demo`.`card-transactions` GROUP BY window(ts, '1 minute'), account_id"
)


@pytest.fixture
def catalog(project: ProjectDir):
    project.ddl("tables", TRANSACTIONS_DDL + COUNTS_DDL)
    return load_project(project.root).catalog


def manifest(sql: str, target: str = "`demo`.`high-value-tx`") -> Manifest:
    return Manifest.model_validate({"name": "job", "target-table": target, "sql": sql})


def diff(spark, catalog, old: str, new: str, target: str = "`demo`.`high-value-tx`", old_tables=None):
    tables = list(old_tables if old_tables is not None else catalog.tables)
    return diff_queries(spark, manifest(old, target), tables, manifest(new, target), catalog, {})


@pytest.mark.parametrize(
    "edit",
    [
        "select transaction_id,account_id , amount,ts\n from `demo`.`card-transactions`  where amount>500",
        "SELECT transaction_id, account_id, amount, ts -- the rows we want\nFROM `demo`.`card-transactions`\n"
        "/* only big ones */ WHERE amount > 500;",
    ],
)
def test_layout_comments_and_case_are_not_changes(spark, catalog, edit):
    result = diff(spark, catalog, FILTER, edit)
    assert not result.changed and result.state_compatible and result.reasons == ()


def test_an_added_filter_in_a_stateless_query_is_a_compatible_change(spark, catalog):
    result = diff(spark, catalog, FILTER, FILTER + " AND payee <> 'casino'")
    assert result.changed and result.state_compatible
    assert result.reasons == (Reason.of("QUERY_MEANING_CHANGED"),)


def test_a_retyped_column_changes_the_output(spark, catalog):
    retyped = FILTER.replace("amount, ts", "CAST(amount AS FLOAT) AS amount, ts")
    result = diff(spark, catalog, FILTER, retyped)
    assert result.changed
    columns = next(r for r in result.reasons if r.code == "OUTPUT_COLUMNS_CHANGED")
    assert "amount double" in columns.param["before"] and "amount float" in columns.param["after"], columns


def test_a_filter_before_an_aggregation_keeps_its_state(spark, catalog):
    result = diff(spark, catalog, GROUPED, GROUPED.replace("GROUP BY", "WHERE amount > 1 GROUP BY"), "`demo`.`counts`")
    assert result.changed and result.state_compatible


@pytest.mark.parametrize(
    ("new", "code", "differ"),
    [
        (
            GROUPED.replace("account_id AS k", "payee AS k").replace(", account_id", ", payee"),
            "STATEFUL_OPERATOR_CHANGED",
            "grouping keys",
        ),
        (GROUPED.replace("'1 minute'", "'2 minutes'"), "STATEFUL_OPERATOR_COMPUTED_DIFFERENTLY", "grouping keys"),
        (GROUPED.replace("SUM(amount)", "MAX(amount)"), "STATEFUL_OPERATOR_CHANGED", "aggregate functions"),
        (GROUPED.replace("COUNT(*) AS n", "COUNT(DISTINCT payee) AS n"), "STATEFUL_OPERATOR_CHANGED", None),
    ],
)
def test_changed_grouping_window_or_aggregates_discard_state(spark, catalog, new, code, differ):
    result = diff(spark, catalog, GROUPED, new, "`demo`.`counts`")
    assert result.changed and not result.state_compatible
    changed = next(r for r in result.reasons if r.code.startswith("STATEFUL_OPERATOR"))
    assert changed.code == code and (changed.param["kind"], changed.param["position"]) == ("aggregation", 1), changed
    if differ is not None:
        assert differ in changed.param["differ"], changed
    operator = changed.param.get("operator") or changed.param["before"]
    assert str(operator).startswith("aggregation by window, account_id of"), changed
    if "MAX(amount)" in new:
        assert "sum(amount)" in str(changed.param["before"]) and "max(amount)" in str(changed.param["after"]), changed


def test_adding_a_stateful_operator_or_a_source_is_incompatible(spark, catalog):
    distinct = FILTER.replace("SELECT ", "SELECT DISTINCT ")
    result = diff(spark, catalog, FILTER, distinct)
    assert not result.state_compatible
    expected = Reason.of(
        "STATEFUL_OPERATORS_CHANGED", before="none", after="DISTINCT over transaction_id, account_id, amount, ts"
    )
    assert expected in result.reasons, result.reasons
    union = FILTER + " UNION ALL SELECT transaction_id, account_id, amount, ts FROM `demo`.`refunds`"
    result = diff(spark, catalog, FILTER, union)
    assert not result.state_compatible and "SOURCES_CHANGED" in codes(result.reasons)


def test_a_changed_source_definition_is_a_change(spark, catalog):
    old_tables = [t for t in catalog.tables]
    source = next(t for t in old_tables if t.name == "`demo`.`card-transactions`")
    moved = type(source)(**{**source.__dict__, "options": {**source.options, "path": "/elsewhere"}})
    result = diff(spark, catalog, FILTER, FILTER, old_tables=[moved if t is source else t for t in old_tables])
    assert result.changed and not result.state_compatible
    assert Reason.of("SOURCE_DEFINITION_CHANGED", tables=["`demo`.`card-transactions`"]) in result.reasons
