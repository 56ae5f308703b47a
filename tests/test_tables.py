"""Table DDL: Flink- and Spark-style types, watermarks, keys, options and their errors."""

from __future__ import annotations

import pytest
from pyspark.sql import types as T

from jobs.schema import spark_type
from runner.authoring.ddl import parse_ddl
from runner.authoring.ddl_types import parse_type_string
from runner.core.errors import UserError

KAFKA = """
CREATE TABLE `kafka`.`transactions` (
  account_id STRING,
  amount     DOUBLE NOT NULL COMMENT 'in EUR',
  ts         TIMESTAMP(3),
  doubled AS amount * 2,
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND,
  PRIMARY KEY (account_id) NOT ENFORCED
) WITH (
  'connector' = 'kafka',
  'topic' = 'transactions',
  'format' = 'json',
  'properties.bootstrap.servers' = '${MSK_BOOTSTRAP_SERVERS}',
  'scan.startup.mode' = 'earliest-offset'
);
"""


def test_parses_the_product_example():
    (table,) = parse_ddl(KAFKA, file="t.sql")
    assert table.parts == ("kafka", "transactions")
    assert table.name == "`kafka`.`transactions`"
    assert [c.name for c in table.columns] == ["account_id", "amount", "ts", "doubled"]
    assert table.columns[1].nullable is False and table.columns[1].comment == "in EUR"
    assert table.columns[3].expression == "amount * 2"
    assert table.watermark and (table.watermark.column, table.watermark.delay) == ("ts", "5 seconds")
    assert table.primary_key == ("account_id",)
    assert table.options["properties.bootstrap.servers"] == "${MSK_BOOTSTRAP_SERVERS}"
    assert table.physical_schema.simple_string() == "struct<account_id:string,amount:double,ts:timestamp>"


@pytest.mark.parametrize(
    ("flink", "spark"),
    [
        ("VARCHAR(20)", T.StringType()),
        ("CHAR(3)", T.StringType()),
        ("TIMESTAMP(3)", T.TimestampType()),
        ("TIMESTAMP_LTZ(3)", T.TimestampType()),
        ("TIMESTAMP(6) WITH LOCAL TIME ZONE", T.TimestampType()),
        ("TIMESTAMP_NTZ", T.TimestampNTZType()),
        ("DECIMAL(12, 2)", T.DecimalType(12, 2)),
        ("BYTES", T.BinaryType()),
        ("DOUBLE PRECISION", T.DoubleType()),
        (
            "ROW<a INT, b ARRAY<STRING>>",
            T.StructType([T.StructField("a", T.IntegerType()), T.StructField("b", T.ArrayType(T.StringType()))]),
        ),
        ("ROW(a INT NOT NULL)", T.StructType([T.StructField("a", T.IntegerType())])),
        ("STRUCT<a: BIGINT>", T.StructType([T.StructField("a", T.LongType())])),
        ("MAP<STRING, DOUBLE>", T.MapType(T.StringType(), T.DoubleType())),
        ("array<bigint>", T.ArrayType(T.LongType())),
    ],
)
def test_flink_and_spark_types(flink: str, spark: T.DataType):
    assert spark_type(parse_type_string(flink)) == spark


@pytest.mark.parametrize("bad", ["TIME", "MULTISET<INT>", "NUMBER", "DECIMAL(40, 2)", "ARRAY<INT", "ROW<a>"])
def test_bad_types_are_errors(bad: str):
    with pytest.raises(UserError):
        parse_type_string(bad)


def test_several_tables_per_file_and_comments():
    tables = parse_ddl(
        "-- two tables\nCREATE TABLE a (x INT) WITH ('connector' = 'blackhole');\n"
        "/* block */ CREATE TABLE IF NOT EXISTS b.c (y STRING) WITH ('connector'='print')"
    )
    assert [t.parts for t in tables] == [("a",), ("b", "c")]


@pytest.mark.parametrize(
    ("ddl", "code", "line"),
    [
        ("CREATE TABLE t (x INT) WITH ('connector' = 'nope');", "DDL_UNKNOWN_CONNECTOR", 1),
        ("CREATE TABLE t (x INT) WITH ('path' = '/x');", "DDL_MISSING_CONNECTOR", 1),
        (
            "CREATE TABLE t (x INT)\nWITH ('connector' = 'filesystem', 'format' = 'json');",
            "DDL_MISSING_CONNECTOR_OPTION",
            1,
        ),
        (
            "CREATE TABLE t (x INT) WITH ('connector' = 'filesystem', 'path' = 'p', 'format' = 'xml');",
            "DDL_INVALID_CONNECTOR_OPTION",
            1,
        ),
        (
            "CREATE TABLE t (x INT) WITH ('connector' = 'blackhole', 'colour' = 'red');",
            "DDL_UNKNOWN_CONNECTOR_OPTION",
            1,
        ),
        (
            "CREATE TABLE t (x INT) WITH ('connector' = 'kafka', 'topic' = 't', 'format' = 'json');",
            "DDL_MISSING_CONNECTOR_OPTION",
            1,
        ),
        (
            "CREATE TABLE t (x INT) WITH ('connector' = 'kafka', 'topic' = 't', 'format' = 'json', "
            "'properties.bootstrap.servers' = 'b:9092', 'scan.startup.mode' = 'group-offsets');",
            "DDL_INVALID_CONNECTOR_OPTION",
            1,
        ),
        (
            "CREATE TABLE t (x INT) WITH ('connector' = 'datagen', 'fields.y.min' = '1');",
            "DDL_UNKNOWN_CONNECTOR_OPTION",
            1,
        ),
        (
            "CREATE TABLE t (x INT) WITH ('connector' = 'datagen', 'rows-per-second' = 'fast');",
            "DDL_INVALID_CONNECTOR_OPTION",
            1,
        ),
        ("\n\nCREATE TABLE t (\n  x INT,\n  x STRING\n) WITH ('connector' = 'blackhole');", "DDL_SYNTAX_ERROR", 5),
        ("CREATE TABLE t (x FANCY) WITH ('connector' = 'blackhole');", "DDL_SYNTAX_ERROR", 1),
        (
            "CREATE TABLE t (x INT,\n WATERMARK FOR x AS x * 2) WITH ('connector' = 'blackhole');",
            "DDL_INVALID_WATERMARK",
            2,
        ),
        ("CREATE TABLE t (x INT, WATERMARK FOR x AS x) WITH ('connector' = 'blackhole');", "DDL_INVALID_WATERMARK", 1),
        (
            "CREATE TABLE t (x INT, PRIMARY KEY (y) NOT ENFORCED) WITH ('connector' = 'blackhole');",
            "DDL_UNKNOWN_COLUMN",
            1,
        ),
        ("CREATE TABLE t (x INT) WITH ('connector' = 'blackhole', 'connector' = 'print');", "DDL_SYNTAX_ERROR", 1),
        ("CREATE VIEW v AS SELECT 1;", "DDL_SYNTAX_ERROR", 1),
        ("CREATE TABLE t (x INT) WITH ('connector' = 'kafka", "SQL_LEXICAL_ERROR", 1),
        (
            "CREATE TABLE t (x INT) WITH ('connector' = 'print',\n 'print-identifier' = '${1BAD}');",
            "DDL_INVALID_PLACEHOLDER",
            1,
        ),
    ],
)
def test_bad_ddl_is_rejected_with_file_and_line(ddl: str, code: str, line: int):
    with pytest.raises(UserError) as caught:
        parse_ddl(ddl, file="manifests/tables/t.sql")
    problem = next(p for p in caught.value.problems if p.code == code)
    assert problem.file == "manifests/tables/t.sql"
    assert problem.line == line


def test_watermark_units():
    for expression, delay in [
        ("ts", "0 seconds"),
        ("ts - INTERVAL '2' MINUTE", "2 minutes"),
        ("ts - INTERVAL '500' MILLISECOND", "500 milliseconds"),
        ("ts - INTERVAL '1 hour'", "1 hours"),
    ]:
        (table,) = parse_ddl(
            f"CREATE TABLE t (ts TIMESTAMP, WATERMARK FOR ts AS {expression}) WITH ('connector' = 'blackhole')"
        )
        assert table.watermark and table.watermark.delay == delay
