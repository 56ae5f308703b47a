"""A malformed record is set aside in every query over its table, whatever columns the query reads.

Spark's JSON and CSV readers parse only the columns they are asked for, and Spark asks only for those a query
reads; the runner asks for every declared column (``jobs/sources.py``, ``Source.tapped``), so a record is good
exactly when it is good against the whole declared schema. Each table here is read by four queries, each
reading other columns: one only ``id``, one filtering on another column, one ``SELECT *``, one windowed
aggregate. Every query sets aside the same records, each with a reason naming its field, and keeps the others.

Bad inputs tried, each a good record with one field replaced. JSON:
- INT: a number as a string ("12"), a word, 2^31, a fraction (1.5), 1e2, an object, an array, a boolean;
  BIGINT: 2^63, a fraction, a number as a string; SMALLINT: 32768, -32769, a fraction; TINYINT: -129, 256, 1e2;
- DOUBLE: a number as a string, a word, an object, an array, a boolean; FLOAT: a word, an object;
- DECIMAL(5,2): 1234.5 and 12345 (over its precision), a word, a boolean, an object;
- BOOLEAN: "true" as a string, 1, "yes", an array;
- DATE: month 13, 30 February, a word, 20260101 as a number, 2026/01/01, an object;
- TIMESTAMP(3): a word, hour 25, a fraction, an object;
- ARRAY<INT>: a number, a word, an array of words, an array of fractions, an object, an array of arrays;
- MAP<STRING, INT>: a number, an array, a word, a word as a value, an object as a value;
- ROW<a INT, b STRING>: a number, a word, an array, a word for its INT field.
What Spark's JSON reader accepts instead, asserted as the value it reads: TINYINT 128 to 255, wrapped to a
negative number (128 reads as -128: its parser takes a byte as unsigned); "NaN" and "Infinity" as strings,
1e400 (infinity) for DOUBLE, 1e40 (infinity) for FLOAT; DECIMAL(5,2) 123.456 (rounded to 123.46), "1.5" as a
string and 1e2; a DATE with a time or anything after it ("2026-01-01T10:00:00", "2026-01-01 junk") or without
leading zeros ("2026-1-1"); a TIMESTAMP that is a date alone, epoch seconds as a number, or with nanoseconds
(cut to microseconds); any JSON value for STRING (its text); [null] for ARRAY; an unknown field of a ROW
(ignored) and a number for its STRING field; null for any column.

CSV (the scalar types; CSV has no nested ones): a word, 2^31, a fraction, 1e2 and a leading space for INT;
2^63 and a fraction for BIGINT; 32768 for SMALLINT; 128, 255 and -129 for TINYINT; a word and "inf" for
DOUBLE and FLOAT; 1234.5 and a word for DECIMAL(5,2); 1 and "yes" for BOOLEAN; month 13, 30 February, a word,
20260101 and 2026/01/01 for DATE; a word, hour 25 and epoch seconds for TIMESTAMP(3); a line with too few
fields and one with too many. Spark's CSV reader accepts a quoted number for INT, "NaN", "Infinity" and 1e400
for DOUBLE, 123.456 (rounded) and 1e2 for DECIMAL(5,2), TRUE for BOOLEAN, the same DATE shapes as JSON, a
date alone and nanoseconds for TIMESTAMP(3), and an empty field (NULL) for any column.
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

from jobs.jvm import scala_list
from jobs.records import RAW
from tests.conftest import METADATA_DDL, ProjectDir
from tests.test_job import output_rows, run_once

TEMPLATE_AT = "2026-01-01T00:30:00Z"
CLOSER_AT = "2026-01-02T00:00:00Z"  # the newest event time: the watermark closes every window before it


def micros(text: str) -> int:
    return int(datetime.fromisoformat(text).timestamp() * 1_000_000)


# column -> (declared type, the type as reasons spell it, its value in a good record, as JSON text)
JSON_COLUMNS = {
    "c_int": ("INT", "INT", "1"),
    "c_bigint": ("BIGINT", "BIGINT", "2"),
    "c_smallint": ("SMALLINT", "SMALLINT", "3"),
    "c_tinyint": ("TINYINT", "TINYINT", "4"),
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
CSV_COLUMNS = {  # the scalar columns, their values as CSV text
    name: (declared, spelt, good.strip('"'))
    for name, (declared, spelt, good) in JSON_COLUMNS.items()
    if name not in ("c_array", "c_map", "c_row")
}

JSON_REJECTED = {
    "c_int": ['"12"', '"x"', "2147483648", "1.5", "1e2", "{}", "[1]", "true"],
    "c_bigint": ["9223372036854775808", "1.5", '"12"'],
    "c_smallint": ["32768", "-32769", "1.5"],
    "c_tinyint": ["-129", "256", "1e2"],
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


def accepted(zone: ZoneInfo, fmt: str) -> list[tuple[str, str, object]]:
    """(column, text, the value Spark reads) of the shapes its reader accepts; ``zone``: the session's."""
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
    if fmt == "csv":
        return [
            *common,
            ("c_int", '"12"', 12),
            ("c_boolean", "TRUE", True),
            ("c_int", "", None),
            ("c_string", "", None),
        ]
    quoted = {"NaN", "Infinity"} | {text for column, text, _ in common if column in ("c_date", "c_timestamp")}
    return [
        *((column, json.dumps(text) if text in quoted else text, value) for column, text, value in common),
        ("c_tinyint", "128", -128),
        ("c_tinyint", "255", -1),
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

    def __init__(self, fmt: str, zone: ZoneInfo):
        self.fmt = fmt
        self.columns = JSON_COLUMNS if fmt == "json" else CSV_COLUMNS
        self.lines: list[str] = []
        self.rejected: dict[str, str] = {}  # line -> the column it is malformed in ("": a CSV line's field count)
        self.accepted: dict[str, tuple[str, object]] = {}  # id -> (column, the value read)
        self.at: dict[str, int | None] = {}  # id of each good record -> its event time (µs)
        for n in range(3):
            self.good(f"clean-{n}")
        self.good("clean-low", {"c_bigint": "1"})  # the filtering query drops it
        self.good("closer", {"c_timestamp": self.text(CLOSER_AT)}, micros(CLOSER_AT))
        for column, texts in (JSON_REJECTED if fmt == "json" else CSV_REJECTED).items():
            for n, text in enumerate(texts):
                self.rejected[self.add(f"bad-{column}-{n}", {column: text})] = column
        for n, (column, text, value) in enumerate(accepted(zone, fmt)):
            record_id = f"coerced-{column}-{n}"
            self.good(record_id, {column: text}, value if column == "c_timestamp" else None)  # type: ignore[arg-type]
            self.accepted[record_id] = (column, value)
        if fmt == "csv":
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

    def reason_of(self, line: str) -> tuple[str, str] | str:
        """What the reason of a rejected line says: (its start, its end) naming the field, or all of it."""
        column = self.rejected[line]
        if not column:
            return f"CSV line does not hold the {len(self.columns) + 1} declared fields"
        return f"field '{column}': ", f" is not a valid {self.columns[column][1]}"


def project_for(project: ProjectDir, fmt: str) -> None:
    """The table and the four queries over it, each into a Parquet table of its own."""
    declared = JSON_COLUMNS if fmt == "json" else CSV_COLUMNS
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


@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_every_malformed_shape_is_set_aside_in_every_query_whatever_columns_it_reads(
    spark, project: ProjectDir, tmp_path: Path, fmt: str
):
    zone = ZoneInfo(spark.conf.get("spark.sql.session.timeZone"))
    records = Records(fmt, zone)
    project_for(project, fmt)
    folder = project.root / "data" / "typed"
    folder.mkdir(parents=True)
    (folder / f"records.{fmt}").write_text("\n".join(records.lines) + "\n")
    good_ids = set(records.at)

    dead_by_query = {}
    for name in ("only-id", "filtered", "everything", "per-hour"):
        prepared, queries = run_once(spark, project, name, tmp_path / "state")
        dead = output_rows(spark, prepared.dead_letter / "demo-typed")
        dead_by_query[name] = {r.raw: r.reason for r in dead}
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
