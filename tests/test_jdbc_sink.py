"""An ordinary query's micro-batches into a keyed PostgreSQL table (jobs/jdbc.py's Writer, on the run's server).

A query that is not a changelog query upserts its rows by the target's key: the table ends as if each batch's
rows were upserted one by one in the batch's order. So a key given several rows in one batch ends with the
last (PostgreSQL refuses one INSERT ... ON CONFLICT that updates a row twice: the batch would fail on every
retry), and a key with a NULL part, which a UNIQUE constraint takes and which never conflicts, is one key like
any other instead of a new row each time.
"""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
from pyspark.sql import types as T

from jobs import jdbc
from runner.authoring.ddl import parse_ddl
from runner.core.placeholders import resolved_options
from tests.conftest import METADATA_DDL
from tests.tablehelpers import PG_METADATA

NO_METADATA = (None,) * 6  # the six metadata columns: what they hold does not matter here


def writer(postgres, columns: str, pg_columns: str, key: str | None) -> tuple[jdbc.Writer, str]:
    """A Writer of a new table declared with ``columns`` (and ``key``) and created with ``pg_columns``."""
    name = f"s_{uuid.uuid4().hex[:10]}"
    postgres.execute(f"CREATE TABLE {name} ({pg_columns}{PG_METADATA})")
    declared_key = f", PRIMARY KEY ({key}) NOT ENFORCED" if key else ""
    (target,) = parse_ddl(
        f"""CREATE TABLE t ({columns}{METADATA_DDL}{declared_key})
        WITH ('connector' = 'jdbc', 'url' = '{postgres.url}', 'table-name' = '{name}',
              'username' = 'runner', 'password' = '${{PG_PASSWORD}}')"""
    )
    db = jdbc.database(target, resolved_options(target, {"PG_PASSWORD": postgres.password}))
    return jdbc.Writer(target, db, f"query-{name}", jdbc.check_table(target, db)), name


def rows(*values: tuple) -> list[tuple]:
    return [(*v, *NO_METADATA) for v in values]


def test_the_last_row_of_a_key_in_a_batch_wins_and_a_null_key_is_one_key(postgres):
    # a column of the database's own that the query does not write: an upsert updates a row in place, so it
    # keeps what was set in it, for a key with a NULL part too
    write, table = writer(postgres, "k STRING, n BIGINT", "k TEXT UNIQUE, n BIGINT, note TEXT DEFAULT 'new'", "k")

    def held() -> list[tuple]:
        return postgres.execute(f"SELECT k, n FROM {table} ORDER BY k NULLS FIRST")

    assert write.write(0, rows(("a", 1), (None, 2), ("b", 3)))
    assert held() == [(None, 2), ("a", 1), ("b", 3)]
    # one key twice in a batch (a NULL key too): committed, the later row kept
    assert write.write(1, rows(("a", 4), (None, 5), ("a", 6), (None, 7), ("c", 8)))
    assert held() == [(None, 7), ("a", 6), ("b", 3), ("c", 8)]
    # the batch again, as after a crash before the checkpoint's commit: the fence skips it
    assert not write.write(1, rows(("a", 100), (None, 100)))
    assert held() == [(None, 7), ("a", 6), ("b", 3), ("c", 8)]
    postgres.execute(f"UPDATE {table} SET note = 'by hand'")
    # the last row of a key has the smaller value: the order in the batch decides, not the value
    assert write.write(2, rows((None, 12), ("b", 11), ("b", 10), (None, 9)))
    assert held() == [(None, 9), ("a", 6), ("b", 10), ("c", 8)]
    assert postgres.execute(f"SELECT DISTINCT note FROM {table}") == [("by hand",)]


def test_a_changelog_querys_changes_to_a_null_key_update_its_row_in_place_and_delete_it(postgres):
    write, table = writer(postgres, "k STRING, n BIGINT", "k TEXT UNIQUE, n BIGINT, note TEXT DEFAULT 'new'", "k")

    def held() -> list[tuple]:
        return postgres.execute(f"SELECT k, n, note FROM {table} ORDER BY k NULLS FIRST")

    def write_changes(batch_id: int, *changes: tuple, replace: bool = False) -> tuple[int, int] | None:
        return write.write_changes(batch_id, changes, NO_METADATA, replace=replace)

    assert write_changes(0, ("insert", None, 1), ("insert", "a", 2), replace=True) == (2, 0)
    postgres.execute(f"UPDATE {table} SET note = 'by hand'")
    assert write_changes(1, ("update", None, 3), ("update", "a", 4)) == (2, 0)
    assert held() == [(None, 3, "by hand"), ("a", 4, "by hand")]
    assert write_changes(2, ("delete", None, None), ("insert", "b", 5)) == (1, 1)
    assert held() == [("a", 4, "by hand"), ("b", 5, "new")]
    assert write_changes(3, ("insert", None, 6), ("delete", "a", None)) == (1, 1)
    assert held() == [(None, 6, "new"), ("b", 5, "new")]


def test_a_changelog_batchs_metadata_sent_once_is_in_every_row_it_upserts_and_only_those(postgres):
    write, table = writer(postgres, "k STRING, n BIGINT", "k TEXT UNIQUE, n BIGINT", "k")
    created = datetime(2026, 1, 1, 8, 30)

    def metadata(at: datetime, version: int, description: str | None) -> tuple:
        return (at, "q", description, "id-1", version, created)

    def held() -> list[tuple]:
        return postgres.execute(
            f"SELECT k, n, __create_timestamp, __query_name, __query_description, __query_id, __query_version, "
            f"__query_create_timestamp FROM {table} ORDER BY k NULLS FIRST"
        )

    first, second = datetime(2026, 11, 29, 15, 0, 0, 123456), datetime(2026, 11, 29, 15, 0, 1, 5)
    changes = [("insert", "a", 1), ("insert", None, 2), ("insert", "b", 3)]
    assert write.write_changes(0, changes, metadata(first, 1, "it's \\ a\ttab"), replace=True) == (3, 0)
    one = ("q", "it's \\ a\ttab", "id-1", 1, created)
    assert held() == [(None, 2, first, *one), ("a", 1, first, *one), ("b", 3, first, *one)]
    # the next batch's metadata is in the rows it upserts (a NULL key's too); a row it leaves keeps its own
    changes = [("update", "a", 4), ("update", None, 5), ("delete", "c", None), ("insert", "c", 6)]
    assert write.write_changes(1, changes, metadata(second, 2, None), replace=False) == (3, 1)
    two = ("q", None, "id-1", 2, created)
    assert held() == [(None, 5, second, *two), ("a", 4, second, *two), ("b", 3, first, *one), ("c", 6, second, *two)]


def test_a_composite_key_with_a_null_part_and_a_table_without_key(postgres):
    write, table = writer(
        postgres,
        "region STRING, city STRING, n BIGINT",
        "region TEXT, city TEXT, n BIGINT, UNIQUE (region, city)",
        "region, city",
    )
    assert write.write(0, rows(("eu", None, 1), ("eu", "paris", 2), (None, None, 3), ("eu", None, 4)))
    assert write.write(1, rows(("eu", None, 5), (None, None, 6), ("us", None, 7)))
    assert postgres.execute(f"SELECT region, city, n FROM {table} ORDER BY n") == [
        ("eu", "paris", 2),
        ("eu", None, 5),
        (None, None, 6),
        ("us", None, 7),
    ]

    # without a key every row is appended, the same row twice too
    append, log = writer(postgres, "k STRING, n BIGINT", "k TEXT, n BIGINT", None)
    assert append.write(0, rows(("a", 1), ("a", 1), (None, 2)))
    assert append.write(1, rows(("a", 1)))
    assert postgres.execute(f"SELECT k, n FROM {log} ORDER BY k NULLS FIRST, n") == [
        (None, 2),
        ("a", 1),
        ("a", 1),
        ("a", 1),
    ]


EVERY_TYPE = (
    "k STRING, s STRING, b BOOLEAN, i INT, l BIGINT, sm SMALLINT, t TINYINT, d DOUBLE, f FLOAT, dec DECIMAL(12,3), "
    "dt DATE, ts TIMESTAMP(6), ntz TIMESTAMP_NTZ, bin BYTES"
)
EVERY_PG_TYPE = (
    "k TEXT UNIQUE, s TEXT, b BOOLEAN, i INTEGER, l BIGINT, sm SMALLINT, t SMALLINT, d DOUBLE PRECISION, f REAL, "
    "dec NUMERIC(12,3), dt DATE, ts TIMESTAMPTZ, ntz TIMESTAMP, bin BYTEA"
)
TRICKY = ["plain", "", "tab\there", "line\nend", "cr\rhere", "back\\slash", "\\N", "\\.", "é ✓ 𝄞", "quote\"'"]


@pytest.mark.spark
def test_a_changelog_batch_sent_as_copy_text_from_the_jvm_lands_as_its_rows_sent_one_by_one_do(spark, postgres):
    """Each type's text as Spark writes it (``jobs/connectors/jdbc.py``: ``change_text``) against the same changes
    sent as rows through psycopg, into two tables of every scalar type: the same rows, the same counts; and the
    values as the changes left them, a timestamp's instant exactly whatever the session's time zone. Values
    tried: text with a tab, a line end, a carriage return, a backslash, the text of NULL (\\N) and of COPY's end
    (\\.), an empty string and NULL, characters outside ASCII; each integer type's bounds; NaN, both infinities,
    -0.0, the smallest and a large double, 0.1 + 0.2; a decimal below zero and with its whole scale; the first and
    the last date; timestamps to the microsecond, with and without time zone, one of 1900 in Paris (an offset with
    seconds); bytes holding a zero, a backslash and a line end, and no bytes; 3,000 changes in one batch."""
    from jobs.connectors.jdbc import change_text
    from jobs.schema import spark_schema

    text_writer, by_text = writer(postgres, EVERY_TYPE, EVERY_PG_TYPE, "k")
    row_writer, by_rows = writer(postgres, EVERY_TYPE, EVERY_PG_TYPE, "k")
    declared = [
        f for f in spark_schema(text_writer.target).fields if f.name in jdbc.declared_columns(text_writer.target)
    ]
    schema = T.StructType([T.StructField("__sql_runner_kind", T.StringType()), *declared])
    when = datetime(2026, 11, 30, 5, 6, 7, 891011, tzinfo=UTC)
    doubles = [float("nan"), float("inf"), float("-inf"), -0.0, 5e-324, 1.7976931348623157e308, 0.1 + 0.2]

    def change(kind: str, n: int, key: str | None) -> tuple:
        if kind == "delete":
            return (kind, key, *([None] * (len(declared) - 1)))
        value = TRICKY[n % len(TRICKY)] if n % 11 else None
        bounds = [(-(2**31), -(2**63), -(2**15), -128), (2**31 - 1, 2**63 - 1, 2**15 - 1, 127)][n % 2]
        return (
            kind,
            key,
            value,
            [True, False, None][n % 3],
            *bounds,
            doubles[n % len(doubles)],
            [1.1, -3.4e38, float("nan")][n % 3],
            [Decimal("-123456789.123"), Decimal("0.001"), Decimal("0.000")][n % 3],
            [date(1, 1, 1), date(9999, 12, 31), date(2026, 2, 28)][n % 3],
            # 1900 in Paris, the session's time zone below, was 9 min 21 s ahead of UTC
            [when + timedelta(microseconds=n), datetime(1900, 6, 1, 12, 0, 0, n, tzinfo=UTC)][n % 2],
            (when + timedelta(days=n)).replace(tzinfo=None),
            [b"\x00\\\n\xff", b"", None][n % 3],
        )

    first = [change("insert", n, f"k{n}") for n in range(30)] + [change("insert", 30, None)]
    later = [change("update", n + 7, f"k{n}") for n in range(0, 30, 3)]
    later += [change("delete", 0, f"k{n}") for n in range(1, 30, 3)] + [change("delete", 0, None)]
    many = [change("insert", n, f"m{n}") for n in range(3000)]  # blocks of many lines
    zone = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "Europe/Paris")
    try:
        for batch, changes in enumerate([first, later, many]):
            frame = spark.createDataFrame(changes, schema).repartition(3)  # several partitions, so several blocks
            text = change_text(frame, ["k"])
            assert text is not None
            counted = text_writer.write_changes(batch, text, NO_METADATA, replace=batch == 0)
            assert counted == row_writer.write_changes(batch, frame.collect(), NO_METADATA, replace=batch == 0)
            deletes = len([c for c in changes if c[0] == "delete"])
            assert counted == (len(changes) - deletes, deletes)
            # rows carry a TIMESTAMP as Python's local time, which PostgreSQL reads in its own time zone: compared
            # exactly below instead, by the instant
            columns = "k, s, b, i, l, sm, t, d::text, f::text, dec, dt, ntz, bin"
            held = postgres.execute(f"SELECT {columns} FROM {by_text} ORDER BY k NULLS FIRST")
            assert held == postgres.execute(f"SELECT {columns} FROM {by_rows} ORDER BY k NULLS FIRST")
    finally:
        spark.conf.set("spark.sql.session.timeZone", zone)
    # and as the changes left them: each text, number, date, instant and byte exactly (the floats by the
    # comparison above: NaN is no value equal to itself)
    left: dict = {}
    for kind, key, *values in first + later + many:
        if kind == "delete":
            left.pop(key, None)
        else:
            left[key] = (key, *values[:6], *values[8:])
    exact = "k, s, b, i, l, sm, t, dec, dt, ts, ntz, bin"
    assert postgres.execute(f"SELECT {exact} FROM {by_text} ORDER BY k NULLS FIRST") == sorted(
        left.values(), key=lambda row: (row[0] is not None, row[0] or "")
    )
    # a type whose text is not made in the JVM: its changes go as rows
    nested = spark.createDataFrame([("insert", "k", [1])], "__sql_runner_kind STRING, k STRING, a ARRAY<INT>")
    assert change_text(nested, ["k"]) is None


@pytest.mark.parametrize("bad", ["a row of too few columns", "a value of the wrong type"])
def test_a_batch_postgres_refuses_changes_nothing(postgres, bad):
    """Bad input tried: a row shorter than the table's columns, and text where a BIGINT goes; the batch fails
    with PostgreSQL's words and the table and the fence are as before it."""
    write, table = writer(postgres, "k STRING, n BIGINT", "k TEXT UNIQUE, n BIGINT", "k")
    assert write.write(0, rows(("a", 1)))
    broken = [("a", 2)] if bad == "a row of too few columns" else rows(("a", "two"))
    with pytest.raises(ConnectionError, match="PostgreSQL"):
        write.write(1, rows(("b", 3)) + broken)
    assert postgres.execute(f"SELECT k, n FROM {table}") == [("a", 1)]
    assert not write.committed(1)
    assert write.write(1, rows(("b", 3)))
    assert postgres.execute(f"SELECT k, n FROM {table} ORDER BY k") == [("a", 1), ("b", 3)]
