"""Whether a deployed query's state can serve an edited one, for every kind of edit.

Each case analyses v1 and the edited v2 as the streaming plans their jobs would run
(real Spark) and checks the verdict: a new version where the state cannot serve the new
query, a restore where it can.
"""

from __future__ import annotations

import pytest

from runner.analysis.query_diff import diff_queries
from runner.authoring.project import load_project
from runner.core.manifest import Manifest
from runner.core.querydiff import QueryDiff
from runner.core.reasons import Reason
from tests.conftest import METADATA_DDL, ProjectDir

pytestmark = pytest.mark.spark

DDL = (
    """
CREATE TABLE `demo`.`events` (
  id STRING, account STRING, tags STRING, info ROW<a STRING, b STRING>, amount DOUBLE, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = 'data/events', 'format' = 'json');
CREATE TABLE `demo`.`clicks` (
  id STRING, page STRING, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = 'data/clicks', 'format' = 'json');
CREATE TABLE `demo`.`counts` (k STRING, w TIMESTAMP(3), n BIGINT"""
    + METADATA_DDL
    + """) WITH ('connector' = 'blackhole');
CREATE TABLE `demo`.`joined` (id STRING, amount DOUBLE, page STRING"""
    + METADATA_DDL
    + """) WITH ('connector' = 'blackhole');
"""
)

SLIDING = (
    "SELECT account AS k, window.start AS w, COUNT(*) AS n FROM `demo`.`events` "
    "GROUP BY window(ts, '10 minutes', '5 minutes'), account"
)
STRUCT_KEY = (
    "SELECT info.a AS k, window.start AS w, COUNT(*) AS n FROM `demo`.`events` GROUP BY window(ts, '1 minute'), info.a"
)
GENERATED = (
    "SELECT tag AS k, window.start AS w, COUNT(*) AS n FROM "
    "(SELECT explode(split(tags, ',')) AS tag, ts FROM `demo`.`events`) GROUP BY window(ts, '1 minute'), tag"
)
FORMATTED = (
    "SELECT date_format(ts, 'yyyy-MM-dd HH') AS k, window.start AS w, COUNT(*) AS n FROM `demo`.`events` "
    "GROUP BY window(ts, '1 minute'), date_format(ts, 'yyyy-MM-dd HH')"
)
JOINED = (
    "SELECT e.id, e.amount, c.page FROM `demo`.`events` e JOIN `demo`.`clicks` c "
    "ON e.id = c.id AND c.ts BETWEEN e.ts AND e.ts + INTERVAL 10 MINUTES"
)
UDF_KEYED = """
from pyspark.sql.functions import udf
label = udf(lambda account: account.upper(), "string")
events = table("`demo`.`events`")
execution_output = (
    events.groupBy(F.window("ts", "1 minute"), label("account").alias("k"))
    .count()
    .select("k", F.col("window.start").alias("w"), F.col("count").alias("n"))
)
"""


@pytest.fixture(scope="module")
def catalog(tmp_path_factory):
    project = ProjectDir(tmp_path_factory.mktemp("state") / "project")
    project.ddl("tables", DDL)
    return load_project(project.root).catalog


def query(text: str, target: str) -> Manifest:
    field = "code" if "execution_output" in text else "sql"
    return Manifest.model_validate({"name": "job", "target-table": target, field: text})


def verdict(spark, catalog, old: str, new: str, target: str = "`demo`.`counts`"):
    return diff_queries(spark, query(old, target), list(catalog.tables), query(new, target), catalog, {})


def operator_change(result: QueryDiff, kind: str) -> Reason:
    """The one reason that names the first stateful operator of ``kind`` as changed."""
    (found,) = [
        r
        for r in result.reasons
        if r.code.startswith("STATEFUL_OPERATOR_") and (r.param["kind"], r.param["position"]) == (kind, 1)
    ]
    return found


@pytest.mark.parametrize(
    ("old", "new", "why"),
    [
        pytest.param(SLIDING, SLIDING.replace("'10 minutes'", "'20 minutes'"), "grouping keys", id="window-size"),
        pytest.param(SLIDING, SLIDING.replace("'5 minutes'", "'2 minutes'"), "grouping keys", id="window-slide"),
        pytest.param(STRUCT_KEY, STRUCT_KEY.replace("info.a", "info.b"), "grouping keys", id="struct-field"),
        pytest.param(GENERATED, GENERATED.replace("','", "';'"), "grouping keys", id="generator-argument"),
        pytest.param(FORMATTED, FORMATTED.replace("HH'", "'"), "grouping keys", id="format-string"),
        pytest.param(UDF_KEYED, UDF_KEYED.replace("upper", "lower"), "grouping keys", id="python-udf"),
        pytest.param(
            SLIDING, SLIDING.replace("COUNT(*)", "CAST(SUM(amount) AS BIGINT)"), "aggregate functions", id="function"
        ),
    ],
)
def test_keys_or_functions_computed_differently_start_a_new_version(spark, catalog, old, new, why):
    result = verdict(spark, catalog, old, new)
    assert result.changed and not result.state_compatible, result.reasons
    assert why in operator_change(result, "aggregation").param["differ"], result.reasons


@pytest.mark.parametrize(
    ("new", "why"),
    [
        pytest.param(
            JOINED.replace("e.amount,", "e.amount + size(split(e.tags, ',')) AS amount,"),
            "left side keeps",
            id="side-columns",
        ),
        pytest.param(JOINED.replace(" JOIN ", " LEFT OUTER JOIN "), "join type", id="join-type"),
        pytest.param(JOINED.replace("10 MINUTES", "20 MINUTES"), "condition", id="condition"),
    ],
)
def test_a_stream_stream_join_keeps_its_state_only_if_both_sides_keep_the_same_rows(spark, catalog, new, why):
    result = verdict(spark, catalog, JOINED, new, "`demo`.`joined`")
    assert result.changed and not result.state_compatible, result.reasons
    assert why in operator_change(result, "join").param["differ"], result.reasons


@pytest.mark.parametrize(
    ("old", "new", "target"),
    [
        pytest.param(SLIDING, SLIDING.replace("GROUP BY", "WHERE amount > 10 GROUP BY"), None, id="filter-before"),
        pytest.param(SLIDING, SLIDING + " HAVING COUNT(*) > 1", None, id="filter-after"),
        pytest.param(SLIDING, SLIDING.replace("account AS k", "upper(account) AS k"), None, id="projection-after"),
        pytest.param(
            JOINED, JOINED.replace("c.page", "upper(c.page) AS page"), "`demo`.`joined`", id="projection-after-join"
        ),
        pytest.param(JOINED, JOINED + " WHERE c.page <> 'home'", "`demo`.`joined`", id="filter-on-a-join-side"),
        pytest.param(UDF_KEYED, UDF_KEYED.replace(".count()", '.count().where("count > 0")'), None, id="code-filter"),
    ],
)
def test_edits_the_state_can_serve_keep_it(spark, catalog, old, new, target):
    result = verdict(spark, catalog, old, new, target or "`demo`.`counts`")
    assert result.changed and result.state_compatible, result.reasons


def test_a_reformatted_query_is_no_change(spark, catalog):
    reformatted = SLIDING.lower().replace("`demo`.`events`", "`demo`.`events`  -- the events\n").replace(", ", ",\n  ")
    result = verdict(spark, catalog, SLIDING, reformatted)
    assert not result.changed and result.state_compatible


def test_what_the_describer_cannot_judge_makes_the_change_incompatible_and_is_named(spark, catalog):
    static = UDF_KEYED.replace(
        'events = table("`demo`.`events`")',
        'events = table("`demo`.`events`").join(spark.createDataFrame([("x", 1)], "account string, rank int"), '
        '"account", "left")',
    )
    result = verdict(spark, catalog, static, static.replace(".count()", '.count().where("count > 0")'))
    assert result.changed and not result.state_compatible
    unsure = [r for r in result.reasons if r.code == "STATE_UNSURE"]
    assert len(unsure) == 1 and "not one of the declared tables" in str(unsure[0].param["what"]), result.reasons


DEDUPLICATED = """
events = table("`demo`.`events`").dropDuplicates(["id", "ts"])
execution_output = events.groupBy(F.window("ts", "1 minute"), F.col("account").alias("k")).count().select(
    "k", F.col("window.start").alias("w"), F.col("count").alias("n")
)
"""


def test_deduplication_keys_are_part_of_the_state(spark, catalog):
    result = verdict(spark, catalog, DEDUPLICATED, DEDUPLICATED.replace('["id", "ts"]', '["account", "ts"]'))
    assert not result.state_compatible
    expected = Reason.of(
        "STATEFUL_OPERATOR_CHANGED",
        kind="deduplication",
        position=1,
        before="deduplication on id, ts",
        after="deduplication on account, ts",
        differ=["deduplication keys"],
    )
    assert expected in result.reasons, result.reasons
    filtered = DEDUPLICATED.replace(".dropDuplicates", '.where("amount > 0").dropDuplicates')
    assert verdict(spark, catalog, DEDUPLICATED, filtered).state_compatible
