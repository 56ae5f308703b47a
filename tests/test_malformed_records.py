"""A malformed record is set aside in every query over its table, whatever columns the query reads.

Spark's JSON and CSV readers parse only the columns they are asked for, and Spark asks only for those a query
reads; the runner asks for every declared column (``jobs/sources.py``, ``Source.tapped``), so a record is good
exactly when it is good against the whole declared schema. Each table here is read by four queries, each
reading other columns: one only ``id``, one filtering on another column, one ``SELECT *``, one windowed
aggregate. Every query sets aside the same records, each with a reason naming its field, and keeps the others.

Bad inputs tried, each a good record with one field replaced. JSON:
- INT: a number as a string ("12"), a word, 2^31, a fraction (1.5), 1e2, an object, an array, a boolean;
  BIGINT: 2^63, a fraction, a number as a string; SMALLINT: 32768, -32769, a fraction;
- TINYINT, in a second JSON table, the first with TINYINT columns added (Spark's reader takes -128 to 255 for
  one; the runner reads a SMALLINT and narrows it, ``jobs/narrowing.py``, and leaves the first table's plan as
  it was): 128, 255, -129, 256, 32768, 1e2, a number as a string; one out of its range in a ROW's field, an
  ARRAY's element and a MAP's value, and a fraction in a ROW's field. The reader parses a record whose value is
  only out of range and keeps no text of it: its dead letter holds the JSON of its columns as read;
- DOUBLE: a number as a string, a word, an object, an array, a boolean; FLOAT: a word, an object;
- DECIMAL(5,2): 1234.5 and 12345 (over its precision), a word, a boolean, an object;
- BOOLEAN: "true" as a string, 1, "yes", an array;
- DATE: month 13, 30 February, a word, 20260101 as a number, 2026/01/01, an object;
- TIMESTAMP(3): a word, hour 25, a fraction, an object;
- ARRAY<INT>: a number, a word, an array of words, an array of fractions, an object, an array of arrays;
- MAP<STRING, INT>: a number, an array, a word, a word as a value, an object as a value;
- ROW<a INT, b STRING>: a number, a word, an array, a word for its INT field.
What Spark's JSON reader accepts instead, asserted as the value it reads: "NaN" and "Infinity" as strings,
1e400 (infinity) for DOUBLE, 1e40 (infinity) for FLOAT; DECIMAL(5,2) 123.456 (rounded to 123.46), "1.5" as a
string and 1e2; a DATE with a time or anything after it ("2026-01-01T10:00:00", "2026-01-01 junk") or without
leading zeros ("2026-1-1"); a TIMESTAMP that is a date alone, epoch seconds as a number, or with nanoseconds
(cut to microseconds); any JSON value for STRING (its text); [null] for ARRAY; an unknown field of a ROW
(ignored) and a number for its STRING field; null for any column. A TINYINT is kept exactly from -128 to 127,
top-level and nested.

CSV (the scalar types; CSV has no nested ones): a word, 2^31, a fraction, 1e2 and a leading space for INT;
2^63 and a fraction for BIGINT; 32768 for SMALLINT; 128, 255 and -129 for TINYINT; a word and "inf" for
DOUBLE and FLOAT; 1234.5 and a word for DECIMAL(5,2); 1 and "yes" for BOOLEAN; month 13, 30 February, a word,
20260101 and 2026/01/01 for DATE; a word, hour 25 and epoch seconds for TIMESTAMP(3); a line with too few
fields and one with too many. Spark's CSV reader accepts a quoted number for INT, "NaN", "Infinity" and 1e400
for DOUBLE, 123.456 (rounded) and 1e2 for DECIMAL(5,2), TRUE for BOOLEAN, the same DATE shapes as JSON, a
date alone and nanoseconds for TIMESTAMP(3), and an empty field (NULL) for any column.

A TINYINT out of its range is set aside on the other JSON paths too: Kafka values (a real topic) and
debezium-json and upsert changelog files.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from jobs.change_records import kafka_change_checks, upsert_kafka_checks
from jobs.jvm import scala_list
from jobs.lookup.load import Loader, LoadFailed
from jobs.records import ERROR, KAFKA_ORIGIN, RAW, kafka_checks
from jobs.sources import Source
from runner.authoring.ddl import parse_ddl
from tests.conftest import METADATA_DDL, ProjectDir
from tests.jobhelpers import output_rows, run_changelog, run_once
from tests.tablehelpers import Target

pytestmark = pytest.mark.spark

TEMPLATE_AT = "2026-01-01T00:30:00Z"
CLOSER_AT = "2026-01-02T00:00:00Z"  # the newest event time: the watermark closes every window before it


def micros(text: str) -> int:
    return int(datetime.fromisoformat(text).timestamp() * 1_000_000)


# column -> (declared type, the type as reasons spell it, its value in a good record, as JSON text)
JSON_COLUMNS = {
    "c_int": ("INT", "INT", "1"),
    "c_bigint": ("BIGINT", "BIGINT", "2"),
    "c_smallint": ("SMALLINT", "SMALLINT", "3"),
    "c_double": ("DOUBLE", "DOUBLE", "1.5"),
    "c_float": ("FLOAT", "FLOAT", "2.5"),
    "c_decimal": ("DECIMAL(5,2)", "DECIMAL(5,2)", "1.25"),
    "c_boolean": ("BOOLEAN", "BOOLEAN", "true"),
    "c_date": ("DATE", "DATE", '"2026-01-01"'),
    "c_timestamp": ("TIMESTAMP(3)", "TIMESTAMP", f'"{TEMPLATE_AT}"'),
    "c_string": ("STRING", "STRING", '"text"'),
    "c_array": ("ARRAY<INT>", "ARRAY<INT>", "[1, 2]"),
    "c_map": ("MAP<STRING, INT>", "MAP<STRING, INT>", '{"k": 1}'),
    "c_row": ("ROW<a INT, b STRING>", "STRUCT<a: INT, b: STRING>", '{"a": 1, "b": "x"}'),
}
TINYINT_COLUMNS = {
    "c_tinyint": ("TINYINT", "TINYINT", "4"),
    "c_tinyints": (
        "ROW<t TINYINT, a ARRAY<TINYINT>, m MAP<STRING, TINYINT>>",
        "STRUCT<t: TINYINT, a: ARRAY<TINYINT>, m: MAP<STRING, TINYINT>>",
        '{"t": 1, "a": [2], "m": {"k": 3}}',
    ),
}
CSV_COLUMNS = {  # the scalar columns, their values as CSV text
    name: (declared, spelt, good.strip('"'))
    for name, (declared, spelt, good) in {**JSON_COLUMNS, **TINYINT_COLUMNS}.items()
    if name not in ("c_array", "c_map", "c_row", "c_tinyints")
}
# The tables tried: "json" without a TINYINT (Spark's JSON file reader), "json-tinyint" with (read as lines).
COLUMNS = {"json": JSON_COLUMNS, "json-tinyint": {**JSON_COLUMNS, **TINYINT_COLUMNS}, "csv": CSV_COLUMNS}

JSON_REJECTED = {
    "c_int": ['"12"', '"x"', "2147483648", "1.5", "1e2", "{}", "[1]", "true"],
    "c_bigint": ["9223372036854775808", "1.5", '"12"'],
    "c_smallint": ["32768", "-32769", "1.5"],
    "c_double": ['"1.5"', '"x"', "{}", "[1]", "true"],
    "c_float": ['"x"', "{}"],
    "c_decimal": ["1234.5", "12345", '"x"', "true", "{}"],
    "c_boolean": ['"true"', "1", '"yes"', "[true]"],
    "c_date": ['"2026-13-01"', '"2026-02-30"', '"x"', "20260101", '"2026/01/01"', "{}"],
    "c_timestamp": ['"x"', '"2026-01-01T25:00:00"', "1.5", "{}"],
    "c_array": ["1", '"x"', '["x"]', "[1.5]", '{"a": 1}', "[[1]]"],
    "c_map": ["1", "[1]", '"x"', '{"k": "x"}', '{"k": {"a": 1}}'],
    "c_row": ["1", '"x"', "[1]", '{"a": "x"}'],
}
TINYINT_REJECTED = {
    "c_tinyint": ["128", "255", "-129", "256", "32768", "1e2", '"12"'],
    "c_tinyints": ['{"t": 128}', '{"a": [1, 255]}', '{"m": {"k": -129}}', '{"t": 1.5}'],
}
# Those Spark's JSON reader parses (a TINYINT is read as a SMALLINT): it keeps no text of such a record, and its
# dead letter holds the JSON of its columns as read instead of its line.
TINYINT_PARSED = {"128", "255", "-129", "256", '{"t": 128}', '{"a": [1, 255]}', '{"m": {"k": -129}}'}
CSV_REJECTED = {
    "c_int": ["x", "2147483648", "1.5", "1e2", " 12"],
    "c_bigint": ["9223372036854775808", "1.5"],
    "c_smallint": ["32768"],
    "c_tinyint": ["128", "255", "-129"],
    "c_double": ["x", "inf"],
    "c_float": ["x", "inf"],
    "c_decimal": ["1234.5", "x"],
    "c_boolean": ["1", "yes"],
    "c_date": ["2026-13-01", "2026-02-30", "x", "20260101", "2026/01/01"],
    "c_timestamp": ["x", "2026-01-01T25:00:00", "1700000000"],
}
REJECTED = {"json": JSON_REJECTED, "json-tinyint": {**JSON_REJECTED, **TINYINT_REJECTED}, "csv": CSV_REJECTED}


def accepted(zone: ZoneInfo, table: str) -> list[tuple[str, str, object]]:
    """(column, text, the value read) of the shapes Spark's readers accept; ``zone``: the session's."""
    midnight = int(datetime(2026, 1, 1, tzinfo=zone).timestamp() * 1_000_000)
    nanos = micros("2026-01-01T10:00:00.123456Z")
    common: list[tuple[str, str, object]] = [
        ("c_double", "NaN", math.nan),
        ("c_double", "Infinity", math.inf),
        ("c_double", "1e400", math.inf),
        ("c_float", "1e40", math.inf),
        ("c_decimal", "123.456", Decimal("123.46")),
        ("c_decimal", "1e2", Decimal("100.00")),
        ("c_date", "2026-01-01T10:00:00", datetime(2026, 1, 1).date()),
        ("c_date", "2026-01-01 junk", datetime(2026, 1, 1).date()),
        ("c_date", "2026-1-1", datetime(2026, 1, 1).date()),
        ("c_timestamp", "2026-01-01", midnight),
        ("c_timestamp", "2026-01-01T10:00:00.123456789Z", nanos),
    ]
    if table == "csv":
        return [
            *common,
            ("c_int", '"12"', 12),
            ("c_boolean", "TRUE", True),
            ("c_int", "", None),
            ("c_string", "", None),
        ]
    quoted = {"NaN", "Infinity"} | {text for column, text, _ in common if column in ("c_date", "c_timestamp")}
    tinyints = [
        ("c_tinyint", "127", 127),
        ("c_tinyint", "-128", -128),
        (
            "c_tinyints",
            '{"t": -128, "a": [127, -128], "m": {"k": 127}}',
            {"t": -128, "a": [127, -128], "m": {"k": 127}},
        ),
    ]
    return [
        *((column, json.dumps(text) if text in quoted else text, value) for column, text, value in common),
        *(tinyints if table == "json-tinyint" else []),
        ("c_decimal", '"1.5"', Decimal("1.50")),
        ("c_timestamp", "1700000000", 1_700_000_000 * 1_000_000),
        ("c_string", "12", "12"),
        ("c_string", "true", "true"),
        ("c_string", '{"a": 1}', '{"a": 1}'),
        ("c_array", "[null]", [None]),
        ("c_row", '{"a": 1, "c": 2}', {"a": 1, "b": None}),
        ("c_row", '{"b": 1}', {"a": None, "b": "1"}),
        ("c_int", "null", None),
    ]


class Records:
    """The lines of a table's file: good records, and one record per bad or coerced shape, ``id`` naming it."""

    def __init__(self, table: str, zone: ZoneInfo):
        self.fmt = table.split("-")[0]
        self.columns = COLUMNS[table]
        self.lines: list[str] = []
        self.rejected: dict[str, str] = {}  # line -> the column it is malformed in ("": a CSV line's field count)
        self.replaced: dict[str, str] = {}  # rejected line -> the text of its malformed field
        self.parsed: dict[str, str] = {}  # id of a rejected record the reader parsed (TINYINT_PARSED) -> its line
        self.accepted: dict[str, tuple[str, object]] = {}  # id -> (column, the value read)
        self.at: dict[str, int | None] = {}  # id of each good record -> its event time (µs)
        for n in range(3):
            self.good(f"clean-{n}")
        self.good("clean-low", {"c_bigint": "1"})  # the filtering query drops it
        self.good("closer", {"c_timestamp": self.text(CLOSER_AT)}, micros(CLOSER_AT))
        for column, texts in REJECTED[table].items():
            for n, text in enumerate(texts):
                line = self.add(f"bad-{column}-{n}", {column: text})
                self.rejected[line], self.replaced[line] = column, text
                if column in TINYINT_COLUMNS and text in TINYINT_PARSED:
                    self.parsed[f"bad-{column}-{n}"] = line
        for n, (column, text, value) in enumerate(accepted(zone, table)):
            record_id = f"coerced-{column}-{n}"
            self.good(record_id, {column: text}, value if column == "c_timestamp" else None)  # type: ignore[arg-type]
            self.accepted[record_id] = (column, value)
        if self.fmt == "csv":
            fields = self.fields("count", {})
            for line in (",".join(fields[:3]), ",".join([*fields, "extra"])):
                self.lines.append(line)
                self.rejected[line] = ""

    def text(self, value: str) -> str:
        return json.dumps(value) if self.fmt == "json" else value

    def fields(self, record_id: str, replaced: dict[str, str]) -> list[str]:
        """The record's fields as text (JSON: ``"name": value``), in declaration order."""
        values = {name: replaced.get(name, good) for name, (_, _, good) in self.columns.items()}
        if self.fmt == "json":
            return [f'"id": "{record_id}"', *(f'"{name}": {value}' for name, value in values.items())]
        return [record_id, *values.values()]

    def add(self, record_id: str, replaced: dict[str, str]) -> str:
        fields = self.fields(record_id, replaced)
        line = "{" + ", ".join(fields) + "}" if self.fmt == "json" else ",".join(fields)
        self.lines.append(line)
        return line

    def good(self, record_id: str, replaced: dict[str, str] | None = None, at: int | None = None) -> None:
        """A good record; ``at``: its event time (µs), when not the good records' own."""
        self.add(record_id, replaced or {})
        self.at[record_id] = micros(TEMPLATE_AT) if at is None and "c_timestamp" not in (replaced or {}) else at

    def line_of(self, raw: str) -> str:
        """The line a dead letter's raw record stands for: the line itself, or the JSON of a parsed one's columns
        as read (its id and its malformed field as in the line)."""
        if raw in self.rejected or not self.parsed:
            return raw
        read = json.loads(raw)
        line = self.parsed[read["id"]]
        column = self.rejected[line]
        assert read[column] == json.loads(line)[column], (raw, line)
        return line

    def reason_of(self, line: str) -> tuple[str, str] | str:
        """What the reason of a rejected line says: (its start, its end) naming the field, or all of it."""
        column = self.rejected[line]
        if not column:
            return f"CSV line does not hold the {len(self.columns) + 1} declared fields"
        return f"field '{column}': ", f" is not a valid {self.columns[column][1]}"


def project_for(project: ProjectDir, table: str) -> None:
    """The table and the four queries over it, each into a Parquet table of its own."""
    declared, fmt = COLUMNS[table], table.split("-")[0]
    columns = ", ".join(f"{name} {kind}" for name, (kind, _, _) in declared.items())
    out = "'connector' = 'filesystem', 'format' = 'parquet'"
    project.ddl(
        "tables",
        f"""
        CREATE TABLE `demo`.`typed` (id STRING, {columns},
          WATERMARK FOR c_timestamp AS c_timestamp - INTERVAL '1' MINUTE
        ) WITH ('connector' = 'filesystem', 'path' = 'data/typed', 'format' = '{fmt}');
        CREATE TABLE `demo`.`ids` (id STRING{METADATA_DDL}) WITH ({out}, 'path' = 'data/only-id');
        CREATE TABLE `demo`.`big` (id STRING{METADATA_DDL}) WITH ({out}, 'path' = 'data/filtered');
        CREATE TABLE `demo`.`copy` (id STRING, {columns}{METADATA_DDL}) WITH ({out}, 'path' = 'data/everything');
        CREATE TABLE `demo`.`hours` (hour TIMESTAMP(3), n BIGINT{METADATA_DDL}) WITH ({out}, 'path' = 'data/per-hour');
        """,
    )
    queries = {
        "only-id": ("ids", "SELECT id FROM `demo`.`typed`"),
        "filtered": ("big", "SELECT id FROM `demo`.`typed` WHERE c_bigint > 1"),
        "everything": ("copy", "SELECT * FROM `demo`.`typed`"),
        "per-hour": (
            "hours",
            "SELECT window.start AS hour, COUNT(*) AS n FROM `demo`.`typed` GROUP BY window(c_timestamp, '1 hour')",
        ),
    }
    for name, (target, sql) in queries.items():
        project.manifest(name, f'name: {name}\ntarget-table: "`demo`.`{target}`"\nsql: "{sql}"\n')


def read_columns(queries) -> list[str]:
    """The columns the file scan of the query's last micro-batch read (what Spark shows as its ReadSchema)."""
    pending = [queries[0]._jsq.streamingQuery().lastExecution().executedPlan()]
    while pending:
        node = pending.pop()
        if node.getClass().getSimpleName() == "FileSourceScanExec":
            return list(node.requiredSchema().fieldNames())
        pending.extend(scala_list(node.children()))
    raise AssertionError("no file scan in the plan")


def same(value: object, expected: object) -> bool:
    if isinstance(expected, float) and math.isnan(expected):
        return isinstance(value, float) and math.isnan(value)
    if isinstance(expected, dict) and hasattr(value, "asDict"):
        return value.asDict() == expected  # type: ignore[union-attr]
    return value == expected


@pytest.mark.parametrize("table", list(COLUMNS))
def test_every_malformed_shape_is_set_aside_in_every_query_whatever_columns_it_reads(
    spark, project: ProjectDir, tmp_path: Path, table: str
):
    zone = ZoneInfo(spark.conf.get("spark.sql.session.timeZone"))
    records = Records(table, zone)
    project_for(project, table)
    folder = project.root / "data" / "typed"
    folder.mkdir(parents=True)
    (folder / f"records.{records.fmt}").write_text("\n".join(records.lines) + "\n")
    good_ids = set(records.at)

    dead_by_query = {}
    for name in ("only-id", "filtered", "everything", "per-hour"):
        prepared, queries = run_once(spark, project, name, tmp_path / "state")
        dead = output_rows(spark, prepared.dead_letter / "demo-typed")
        dead_by_query[name] = {records.line_of(r.raw): r.reason for r in dead}
        assert len(dead) == len(dead_by_query[name]), f"{name}: a record set aside twice"
        if name in ("only-id", "filtered"):  # the reader is asked for every column, whatever the query reads
            assert read_columns(queries) == ["id", *records.columns, RAW], name

    for name, dead in dead_by_query.items():
        assert set(dead) == set(records.rejected), f"{name} set aside other records"
        for line, reason in dead.items():
            said = records.reason_of(line)
            if isinstance(said, str):
                assert reason == said, (name, line, reason)
            else:
                assert reason.startswith(said[0]) and reason.endswith(said[1]) and "; " not in reason, (
                    name,
                    line,
                    reason,
                )
            if records.rejected[line] == "c_tinyint" and records.replaced[line].lstrip("-").isdigit():
                assert reason == f"field 'c_tinyint': {records.replaced[line]} is not a valid TINYINT", (name, line)

    out = project.root / "data"
    assert sorted(r.id for r in spark.read.parquet(str(out / "only-id")).collect()) == sorted(good_ids)
    assert sorted(r.id for r in spark.read.parquet(str(out / "filtered")).collect()) == sorted(good_ids - {"clean-low"})
    copied = {
        r.id: r
        for r in spark.read.parquet(str(out / "everything"))
        .selectExpr("*", "unix_micros(c_timestamp) AS at_micros")
        .collect()
    }
    assert sorted(copied) == sorted(good_ids)
    for record_id, (column, value) in records.accepted.items():
        read = copied[record_id]["at_micros" if column == "c_timestamp" else column]
        assert same(read, value), (record_id, read, value)
    hours = {
        r.hour_micros: r.n
        for r in spark.read.parquet(str(out / "per-hour")).selectExpr("unix_micros(hour) AS hour_micros", "n").collect()
    }
    watermark = micros(CLOSER_AT) - 60_000_000
    hour = 3_600_000_000
    expected = Counter(at // hour * hour for at in records.at.values() if at is not None)
    assert hours == {start: n for start, n in expected.items() if start + hour <= watermark}


# A TINYINT on the other JSON paths: a table of records whose TINYINTs, top-level and nested, are at the ends of
# its range (kept exactly) or just past them (set aside, the reason naming the field).
LEVELS = "id STRING, level TINYINT, nested ROW<t TINYINT, a ARRAY<TINYINT>, m MAP<STRING, TINYINT>>"
NESTED = "STRUCT<t: TINYINT, a: ARRAY<TINYINT>, m: MAP<STRING, TINYINT>>"


def level(record_id: str, value: int = 1, **nested: object) -> dict:
    return {"id": record_id, "level": value, "nested": {"t": 1, "a": [1], "m": {"k": 1}, **nested}}


LEVELS_KEPT = [
    level("min", -128, t=-128, a=[-128, 0, 127], m={"k": -128}),
    level("max", 127, t=127, a=[], m={"k": 127}),
]
LEVELS_SET_ASIDE = [
    level("level-128", 128),
    level("level-255", 255),
    level("level-minus-129", -129),
    level("nested-t", t=200),
    level("nested-a", a=[1, 255]),
    level("nested-m", m={"k": -129}),
]


def assert_levels_set_aside(dead: list, set_aside: list[dict]) -> None:
    """Each record of ``set_aside`` is in ``dead`` once (by the id of its raw record, or of a debezium record's
    image), with a reason naming the field out of range."""
    by_id = {}
    for r in dead:
        raw = json.loads(r.raw)
        by_id[(raw if "id" in raw else raw.get("after") or raw["before"])["id"]] = r
    assert len(by_id) == len(dead) and sorted(by_id) == sorted(r["id"] for r in set_aside)
    for record in set_aside:
        reason = by_id[record["id"]].reason
        if record["level"] != 1:
            assert reason == f"field 'level': {record['level']} is not a valid TINYINT", reason
        else:
            said, prefix, suffix = reason, "field 'nested': ", f" is not a valid {NESTED}"
            assert said.startswith(prefix) and said.endswith(suffix), said
            assert json.loads(said.removeprefix(prefix).removesuffix(suffix)) == record["nested"], said


def levels_read(rows) -> list[tuple]:
    return sorted((r["id"], r["level"], r["nested"].asDict() if r["nested"] else None) for r in rows)


def test_a_kafka_json_value_with_a_tinyint_out_of_range_is_set_aside(
    spark, project: ProjectDir, kafka, topic, tmp_path: Path
):
    source = topic("in")
    project.ddl(
        "tables",
        f"""
        CREATE TABLE `kafka`.`levels` ({LEVELS}) WITH ('connector' = 'kafka', 'topic' = '{source}',
          'format' = 'json', 'properties.bootstrap.servers' = '{kafka.bootstrap}');
        CREATE TABLE `demo`.`levels` ({LEVELS}{METADATA_DDL})
          WITH ('connector' = 'filesystem', 'format' = 'parquet', 'path' = 'data/levels');
        """,
    )
    project.manifest("levels", 'name: levels\ntarget-table: "`demo`.`levels`"\nsql: "SELECT * FROM `kafka`.`levels`"\n')
    kafka.produce(source, [json.dumps(r) for r in LEVELS_KEPT + LEVELS_SET_ASIDE])
    prepared, _ = run_once(spark, project, "levels", tmp_path / "state")
    written = spark.read.parquet(str(project.root / "data" / "levels"))
    assert levels_read(written.collect()) == sorted((r["id"], r["level"], r["nested"]) for r in LEVELS_KEPT)
    dead = output_rows(spark, prepared.dead_letter / "kafka-levels")
    assert sorted(r.raw for r in dead) == sorted(json.dumps(r) for r in LEVELS_SET_ASIDE)
    assert_levels_set_aside(dead, LEVELS_SET_ASIDE)


@pytest.mark.kafka
@pytest.mark.parametrize("fmt", ["debezium-json", "json"])
def test_a_changelog_file_record_with_a_tinyint_out_of_range_is_set_aside(
    spark, project: ProjectDir, fmt: str, request, tmp_path: Path
):
    """A debezium-json file, and a JSON file of upserts (``'changelog-mode' = 'upsert'``). A change to a kept key
    whose row holds a TINYINT out of range (an update or a delete; a later upsert) is set aside too: the key
    keeps its row."""
    target = Target("upsert-kafka", request)
    mode = ", 'changelog-mode' = 'upsert'" if fmt == "json" else ""
    project.ddl(
        "tables",
        f"""
        CREATE TABLE levels ({LEVELS}, PRIMARY KEY (id) NOT ENFORCED)
          WITH ('connector' = 'filesystem', 'path' = 'data/levels', 'format' = '{fmt}'{mode});
        """
        + target.ddl(
            "levels_out", [("id", "STRING"), ("level", "TINYINT"), ("t", "TINYINT"), ("a", "ARRAY<TINYINT>")], "id"
        ),
    )
    # Not the MAP: the changelog engine compares a key's rows with <=>, which Spark does not define over MAPs.
    sql = "SELECT id, level, nested.t AS t, nested.a AS a FROM levels"
    project.manifest("levels", f"name: levels\ntarget-table: levels_out\nsql: {sql}\n")
    set_aside = [*LEVELS_SET_ASIDE, level("max", 128)]
    if fmt == "debezium-json":
        lines = [{"op": "c", "after": r} for r in LEVELS_KEPT + LEVELS_SET_ASIDE]
        lines += [{"op": "u", "before": LEVELS_KEPT[1], "after": set_aside[-1]}]
        lines += [{"op": "d", "before": level("min", -129)}]
        set_aside.append(level("min", -129))
    else:
        lines = [*LEVELS_KEPT, *set_aside]
    folder = project.root / "data" / "levels"
    folder.mkdir(parents=True)
    (folder / "001.json").write_text("".join(json.dumps(r) + "\n" for r in lines))
    state = tmp_path / "state"
    run_changelog(spark, project, "levels", state, target.env)
    kept = [(r["id"], r["level"], r["nested"]["t"], r["nested"]["a"]) for r in LEVELS_KEPT]
    assert sorted(target.read()) == sorted(kept)
    dead = spark.read.json(str(state / "dead-letter" / "levels")).collect()
    assert_levels_set_aside(dead, set_aside)


def test_an_upsert_kafka_message_with_a_tinyint_out_of_range_in_its_key_or_value_is_set_aside(spark):
    """Decoded as a job decodes an upsert-kafka topic's messages, here from a batch of them."""
    (table,) = parse_ddl(
        "CREATE TABLE u (k TINYINT, level TINYINT, PRIMARY KEY (k) NOT ENFORCED) WITH ('connector' = 'upsert-kafka', "
        "'topic' = 't', 'properties.bootstrap.servers' = 'b:9092', 'key.format' = 'json', 'value.format' = 'json')"
    )
    messages = [
        ({"k": -128}, {"k": -128, "level": 127}),
        ({"k": 127}, None),  # a tombstone: deletes the key
        ({"k": 128}, {"k": 128, "level": 1}),
        ({"k": 1}, {"k": 1, "level": -129}),
    ]
    frame = spark.createDataFrame(
        [(json.dumps(k).encode(), v and json.dumps(v).encode(), "t", 0, n) for n, (k, v) in enumerate(messages)],
        "key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT",
    )
    source = Source(table, frame, upsert_kafka_checks(table))
    reasons = [r[ERROR] for r in source.parse(frame).orderBy(KAFKA_ORIGIN["offset"]).collect()]
    assert reasons == [
        None,
        None,
        "message key is not a JSON object holding the key (k)",
        "field 'level': -129 is not a valid TINYINT",
    ]
    good = source.good(frame)
    assert [(f.name, f.dataType.simpleString()) for f in good.schema][:2] == [("k", "tinyint"), ("level", "tinyint")]
    assert sorted((r.k, r.level) for r in good.collect()) == [(-128, 127), (127, None)]


KAFKA = "'connector' = 'kafka', 'topic' = 't', 'properties.bootstrap.servers' = 'b:9092'"


@pytest.mark.parametrize(
    ("ddl", "checks", "decoders"),
    [
        (f"CREATE TABLE j (id INT, name STRING) WITH ({KAFKA}, 'format' = 'json')", kafka_checks, 1),
        (f"CREATE TABLE a (id INT, name STRING) WITH ({KAFKA}, 'format' = 'avro')", kafka_checks, 1),
        (
            f"CREATE TABLE d (id INT, name STRING, PRIMARY KEY (id) NOT ENFORCED) WITH ({KAFKA}, "
            "'format' = 'debezium-json')",
            kafka_change_checks,
            1,
        ),
        (
            "CREATE TABLE u (id INT, name STRING, PRIMARY KEY (id) NOT ENFORCED) WITH ('connector' = 'upsert-kafka', "
            "'topic' = 't', 'properties.bootstrap.servers' = 'b:9092', 'key.format' = 'json', 'value.format' = 'json')",
            upsert_kafka_checks,
            2,  # the message's key and its value
        ),
    ],
    ids=["json", "avro", "debezium-json", "upsert-kafka"],
)
def test_a_record_is_decoded_once_for_its_checks_and_its_columns(spark, ddl: str, checks, decoders: int):
    """The checks' condition reads the decoded record's fields: the optimiser must not push it below the decoding,
    where each field it reads would decode the record again (six times over for a debezium record). Bad input
    tried: none; what is checked is how many times the plan that keeps the good records decodes each one."""
    (table,) = parse_ddl(ddl)
    message = (b'{"id": 1}', b'{"id": 1, "name": "a"}', "t", 0, 0)
    # rows of an RDD: the optimiser would compute a plan over a list of rows itself, decoding nothing at run time
    rows = spark.sparkContext.parallelize([message])
    frame = spark.createDataFrame(rows, "key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT")
    good = Source(table, frame, checks(table)).good(frame)
    plan = good._jdf.queryExecution().optimizedPlan().toString()
    assert plan.count("from_json(") + plan.count("from_avro(") == decoders, plan


def test_a_lookup_file_with_a_tinyint_out_of_range_fails_its_load(spark, tmp_path: Path):
    """A lookup table's malformed record fails its load (the query goes on with the last snapshot): so does a
    TINYINT out of range, top-level or nested, where Spark's JSON reader would read it wrapped round."""
    folder = tmp_path / "levels"
    folder.mkdir()
    (table,) = parse_ddl(
        f"CREATE TABLE levels ({LEVELS}) WITH ('connector' = 'filesystem', 'path' = '{folder}', 'format' = 'json', "
        "'lookup.cache' = 'FULL')"
    )
    (folder / "kept.json").write_text("".join(json.dumps(r) + "\n" for r in LEVELS_KEPT))
    loaded = Loader(spark, table, {}).load()
    assert levels_read(loaded.frame.collect()) == sorted((r["id"], r["level"], r["nested"]) for r in LEVELS_KEPT)
    loaded.frame.unpersist()
    for record, said in [
        (level("level-128", 128), "field 'level': 128 is not a valid TINYINT"),
        (
            level("nested-a", a=[1, 255]),
            f'field \'nested\': {{"t":1,"a":[1,255],"m":{{"k":1}}}} is not a valid {NESTED}',
        ),
    ]:
        (folder / "bad.json").write_text(json.dumps(record) + "\n")
        with pytest.raises(LoadFailed) as failed:
            Loader(spark, table, {}).load()
        assert str(failed.value) == f"{folder}: {said}"
