"""SQL text the runner builds for its own expressions (metadata columns, malformed-record
checks): any name or text survives exactly, whatever the parser settings. Inputs tried:
quotes, backslashes, a quote after a backslash, backticks, a SQL injection attempt, a line
break, non-ASCII text, the empty string; with ``escapedStringLiterals`` off and on."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from jobs import sqltext
from jobs.connectors import open_source, read_table
from jobs.metadata import with_metadata
from jobs.sources import ERROR, RAW
from runner.authoring.ddl import parse_ddl
from runner.core.manifest import Manifest, Meta

pytestmark = pytest.mark.spark

AWKWARD = [
    "",
    "plain text",
    "it's",
    "back\\slash",
    "\\'",
    "'''",
    "\\\\",
    "'; DROP TABLE t; --",
    "`tick` and ``two``",
    "line\nbreak\ttab",
    "ünïcødé ✓ 東京",
]


@pytest.fixture(params=["false", "true"], ids=["escapes-processed", "escapedStringLiterals"])
def session(spark, request):
    session = spark.newSession()
    session.conf.set("spark.sql.parser.escapedStringLiterals", request.param)
    return session


def test_a_string_literal_holds_exactly_its_text(session):
    row = session.range(1).selectExpr(*[f"{sqltext.string(t)} AS `v{n}`" for n, t in enumerate(AWKWARD)]).first()
    assert [row[f"v{n}"] for n in range(len(AWKWARD))] == AWKWARD


def test_an_identifier_names_exactly_its_column(session):
    names = ["it's", "a`b", "dot.ted", "sp ace", "back\\slash"]
    frame = session.createDataFrame([tuple(range(len(names)))], [*names])
    row = frame.selectExpr(*[f"{sqltext.identifier(n)} + 100 AS `c{i}`" for i, n in enumerate(names)]).first()
    assert [row[f"c{i}"] for i in range(len(names))] == [100 + i for i in range(len(names))]


def test_metadata_columns_hold_the_manifest_values_exactly(session):
    session.conf.set("spark.sql.session.timeZone", "America/Los_Angeles")  # the instant must not move
    created = datetime(2026, 3, 4, 5, 6, 7, 123456, tzinfo=UTC)
    description = "Alice's \\ \"quoted\" query'; DROP TABLE x; --\nsecond line"
    manifest = Manifest.model_validate(
        {"name": "awkward-meta", "description": description, "target-table": "t", "sql": "SELECT 1"}
    ).model_copy(update={"meta": Meta(query_id="id-'1'", query_version=7, query_create_timestamp=created)})
    frame = with_metadata(session.range(1), manifest)
    assert frame.columns == [
        "id",
        "__create_timestamp",
        "__query_name",
        "__query_description",
        "__query_id",
        "__query_version",
        "__query_create_timestamp",
    ]
    row = frame.selectExpr("*", "unix_micros(__query_create_timestamp) AS created_micros").first()
    assert (row["__query_name"], row["__query_description"], row["__query_id"], row["__query_version"]) == (
        "awkward-meta",
        description,
        "id-'1'",
        7,
    )
    assert row["created_micros"] == (created - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
    assert row["__create_timestamp"] is not None
    assert dict(frame.dtypes)["__query_version"] == "int"


def test_malformed_records_of_awkwardly_named_columns_get_exact_reasons(spark, tmp_path: Path):
    folder = tmp_path / "in"
    folder.mkdir()
    (table,) = parse_ddl(
        "CREATE TABLE `t` (`it's` STRING NOT NULL, `a\\b` INT, `x``y` DOUBLE) "
        f"WITH ('connector' = 'filesystem', 'path' = '{folder}', 'format' = 'json')"
    )
    lines = [
        json.dumps({"it's": "good", "a\\b": 1, "x`y": 1.5}),
        json.dumps({"a\\b": 2}, separators=(",", ":")),  # as Spark writes the record back for the dead letter
        json.dumps({"it's": "bad", "a\\b": "two", "x`y": "much"}),
        "not json",
    ]
    (folder / "part.json").write_text("\n".join(lines) + "\n")

    def collected(frame, name: str) -> list:
        query = (
            frame.writeStream.format("memory")
            .queryName(name)
            .trigger(availableNow=True)
            .option("checkpointLocation", str(tmp_path / name))
            .start()
        )
        query.awaitTermination()
        return spark.table(name).collect()

    rows = {r[RAW]: r[ERROR] for r in collected(read_table(spark, table, {}), "awkward_columns")}
    assert rows == {
        None: None,
        lines[1]: "field 'it's' is missing (declared NOT NULL)",
        lines[2]: "field 'a\\b': two is not a valid INT; field 'x`y': much is not a valid DOUBLE",
        "not json": "malformed JSON: not a JSON object",
    }
    # A job's query reads the records that got no reason, by the cheap check alone.
    source = open_source(spark, table, {})
    assert [r.asDict() for r in collected(source.good(source.rows), "awkward_columns_good")] == [
        {"it's": "good", "a\\b": 1, "x`y": 1.5}
    ]
