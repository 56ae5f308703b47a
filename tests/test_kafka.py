"""Kafka tables onto Spark's Kafka connector: the exact options produced, JSON and Avro decoding,
message keys, and the check of a client's protocol against a listener. No broker runs here (the
tests against a real one are in test_kafka_e2e.py and test_kafka_jobs.py)."""

from __future__ import annotations

import json

import pytest
from pyspark.sql import functions as F

from jobs import kafka
from jobs.connectors.kafka import kafka_records
from jobs.sources import RAW, Source, decode_json_values, kafka_checks
from runner.authoring.ddl import parse_ddl
from runner.core.errors import UserError
from runner.core.placeholders import resolved_options

SOURCE = """
CREATE TABLE `kafka`.`transactions` (account_id STRING, amount DOUBLE NOT NULL, ts TIMESTAMP(3))
WITH ('connector' = 'kafka', 'topic' = 'transactions', 'format' = 'json',
      'properties.bootstrap.servers' = '${BOOTSTRAP}',
      'properties.security.protocol' = 'SASL_SSL',
      'scan.startup.mode' = '{mode}' {extra})
"""


def table(mode: str = "earliest-offset", extra: str = ""):
    return parse_ddl(SOURCE.replace("{mode}", mode).replace("{extra}", extra))[0]


def test_source_options_map_properties_and_startup_mode():
    t = table()
    options = kafka.source_options(t, resolved_options(t, {"BOOTSTRAP": "b-1:9098,b-2:9098"}))
    assert options == {
        "kafka.bootstrap.servers": "b-1:9098,b-2:9098",
        "kafka.security.protocol": "SASL_SSL",
        "subscribe": "transactions",
        "startingOffsets": "earliest",
    }


@pytest.mark.parametrize(
    ("mode", "extra", "expected"),
    [
        ("latest-offset", "", {"startingOffsets": "latest"}),
        ("timestamp", ", 'scan.startup.timestamp-millis' = '1700000000000'", {"startingTimestamp": "1700000000000"}),
        (
            "specific-offsets",
            ", 'scan.startup.specific-offsets' = 'partition:0,offset:42;partition:1,offset:300'",
            {"startingOffsets": json.dumps({"transactions": {"0": 42, "1": 300}}, separators=(",", ":"))},
        ),
        (
            "earliest-offset",
            ", 'scan.max-offsets-per-trigger' = '1000', 'scan.fail-on-data-loss' = 'false'",
            {"startingOffsets": "earliest", "maxOffsetsPerTrigger": "1000", "failOnDataLoss": "false"},
        ),
    ],
)
def test_startup_modes(mode: str, extra: str, expected: dict):
    t = table(mode, extra)
    options = kafka.source_options(t, resolved_options(t, {"BOOTSTRAP": "b:9092"}))
    for key, value in expected.items():
        assert options[key] == value


def test_bad_specific_offsets_is_a_user_error():
    t = table("specific-offsets", ", 'scan.startup.specific-offsets' = 'partition:x'")
    with pytest.raises(UserError) as caught:
        kafka.source_options(t, resolved_options(t, {"BOOTSTRAP": "b"}))
    assert caught.value.codes == ["DDL_INVALID_CONNECTOR_OPTION"]


def test_topic_pattern_and_sink_options():
    (pattern,) = parse_ddl(
        "CREATE TABLE p (a INT) WITH ('connector' = 'kafka', 'topic-pattern' = 'tx-.*', "
        "'format' = 'json', 'properties.bootstrap.servers' = 'b:9092')"
    )
    assert kafka.source_options(pattern, pattern.options)["subscribePattern"] == "tx-.*"
    with pytest.raises(UserError):
        kafka.sink_options(pattern, pattern.options)
    t = table()
    assert kafka.sink_options(t, resolved_options(t, {"BOOTSTRAP": "b:9092"})) == {
        "kafka.bootstrap.servers": "b:9092",
        "kafka.security.protocol": "SASL_SSL",
        "topic": "transactions",
    }


def test_unresolved_placeholder_names_the_variable_and_hides_nothing_else():
    t = table()
    with pytest.raises(UserError) as caught:
        resolved_options(t, {})
    assert caught.value.codes == ["UNRESOLVED_PLACEHOLDER"]
    assert "${BOOTSTRAP}" in caught.value.problems[0].message


def test_json_values_decode_against_the_schema_and_bad_ones_get_reasons(spark):
    t = table()
    values = [
        '{"account_id": "a", "amount": 1.5, "ts": "2026-01-01T00:00:00Z"}',
        "{broken",
        '{"account_id": "b", "amount": "lots"}',
        '{"account_id": "c"}',
        None,
    ]
    frame = spark.createDataFrame([(v,) for v in values], "value STRING").select(F.col("value").cast("binary"))
    decoded = {r["account_id"] or r[RAW]: r for r in decode_json_values(frame, t).collect()}
    assert decoded["a"]["amount"] == 1.5 and decoded["a"]["__sql_runner_error"] is None
    assert decoded["{broken"]["__sql_runner_error"] == "malformed JSON: not a JSON object"
    assert decoded["b"]["__sql_runner_error"] == "field 'amount': lots is not a valid DOUBLE"
    assert decoded["c"]["__sql_runner_error"] == "field 'amount' is missing (declared NOT NULL)"
    reasons = {r["__sql_runner_error"] for r in decoded.values()}
    assert "message has no value (tombstone)" in reasons
    # What a job's query reads: the records given no reason above, by the cheap check alone
    # (broken JSON, a wrong type, a missing NOT NULL field and a tombstone all left out).
    good = Source(t, frame, kafka_checks(t)).good(frame).collect()
    assert [(r["account_id"], r["amount"]) for r in good] == [("a", 1.5)]
    assert set(good[0].asDict()) == {"account_id", "amount", "ts"}


def test_sink_records_are_keyed_by_the_primary_key(spark):
    (sink,) = parse_ddl(
        "CREATE TABLE s (id STRING, n INT, PRIMARY KEY (id) NOT ENFORCED) WITH ("
        "'connector' = 'kafka', 'topic' = 'out', 'format' = 'json', "
        "'properties.bootstrap.servers' = 'b:9092')"
    )
    rows = kafka_records(spark.createDataFrame([("x", 1)], "id STRING, n INT"), sink).collect()
    assert (rows[0]["key"], rows[0]["value"]) == ('{"id":"x"}', '{"id":"x","n":1}')


def test_avro_values_decode_against_the_derived_schema_and_a_row_of_nulls_is_malformed_only_when_it_is(spark):
    """Spark's from_avro gives an undecodable value as a row of nulls; where every field is nullable, a record
    of nulls is valid (one zero byte per field) and only other values are malformed."""
    import io

    import fastavro

    from runner.core.avro import value_schema

    (t,) = parse_ddl(
        "CREATE TABLE k (a STRING, b INT) WITH ('connector' = 'kafka', 'topic' = 't', 'format' = 'avro', "
        "'properties.bootstrap.servers' = 'b:9092')"
    )
    schema = fastavro.parse_schema(value_schema(t))

    def encode(row: dict) -> bytes:
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, schema, row)
        return buffer.getvalue()

    values = [encode({"a": "x", "b": 1}), encode({"a": None, "b": None}), b"\x02\xff\xff\xff\xff\xff", None]
    assert values[1] == b"\x00\x00", "a record of nulls is one zero byte (the null branch) per field"
    frame = spark.createDataFrame([(v,) for v in values], "value BINARY")
    decoded = [(r["a"], r["b"], r["__sql_runner_error"]) for r in decode_json_values(frame, t).collect()]
    malformed = "malformed Avro: the value does not decode with the schema derived from the declared columns"
    assert decoded == [
        ("x", 1, None),
        (None, None, None),
        (None, None, malformed),
        (None, None, "message has no value (tombstone)"),
    ]


def test_an_avro_int_out_of_range_of_its_tinyint_or_smallint_column_is_malformed_and_fails_nothing(spark):
    """TINYINT and SMALLINT are Avro ints: one that does not fit its column, top-level or nested, makes its record
    malformed, the reason naming the field (a CAST to the column's type would fail the job, Spark running in ANSI
    mode); one at the ends of the range is kept exactly."""
    import io

    import fastavro

    from runner.core.avro import value_schema

    (t,) = parse_ddl(
        "CREATE TABLE k (id STRING, b TINYINT, s SMALLINT, r ROW<x TINYINT, xs ARRAY<TINYINT>>) WITH ("
        "'connector' = 'kafka', 'topic' = 't', 'format' = 'avro', 'properties.bootstrap.servers' = 'b:9092')"
    )
    schema = fastavro.parse_schema(value_schema(t))

    def encode(row: dict) -> bytes:
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, schema, row)
        return buffer.getvalue()

    nested = "STRUCT<x: TINYINT, xs: ARRAY<TINYINT>>"
    rows = {
        "ends": ({"id": "ends", "b": -128, "s": 32767, "r": {"x": 127, "xs": [-128, 127]}}, None),
        "b": ({"id": "b", "b": 128, "s": 1, "r": None}, "field 'b': 128 is not a valid TINYINT"),
        "s": ({"id": "s", "b": 1, "s": -32769, "r": None}, "field 's': -32769 is not a valid SMALLINT"),
        "xs": (
            {"id": "xs", "b": 1, "s": 1, "r": {"x": 1, "xs": [1, -129]}},
            f'field \'r\': {{"x":1,"xs":[1,-129]}} is not a valid {nested}',
        ),
    }
    frame = spark.createDataFrame([(encode(row),) for row, _ in rows.values()], "value BINARY")
    source = Source(t, frame, kafka_checks(t))
    decoded = {r["id"]: r for r in source.parse(frame).collect()}
    assert {name: r["__sql_runner_error"] for name, r in decoded.items()} == {n: why for n, (_, why) in rows.items()}
    good = source.good(frame)
    assert [f.dataType.simpleString() for f in good.schema] == [
        "string",
        "tinyint",
        "smallint",
        nested.lower().replace(" ", ""),
    ]
    assert [(r.id, r.b, r.s, r.r.asDict()) for r in good.collect()] == [
        ("ends", -128, 32767, {"x": 127, "xs": [-128, 127]})
    ]


def test_bootstrap_servers_and_the_protocol_probe_tell_a_tls_listener_from_a_plaintext_one():
    import socket
    import threading

    from jobs.kafka_check import REACHED, UNREACHABLE, brokers, probe

    assert brokers({"properties.bootstrap.servers": "b-1:9098, [::1]:9092,bad"}) == [("b-1", 9098), ("::1", 9092)]

    def serve(answer: bytes) -> int:
        """A listener that answers every connection's first bytes with ``answer``, then closes it."""
        server = socket.create_server(("127.0.0.1", 0))

        def run() -> None:
            while True:
                connection, _ = server.accept()
                with connection:
                    connection.recv(1024)
                    connection.sendall(answer)

        threading.Thread(target=run, daemon=True).start()
        return server.getsockname()[1]

    tls_alert = serve(b"\x15\x03\x03\x00\x02\x02\x46")  # what a TLS listener says to a plaintext request
    kafka_like = serve(b"\x00\x00\x00\x10\x00\x00\x00\x07" + b"\x00" * 16)  # size, correlation id 7, ...
    assert probe("127.0.0.1", tls_alert, "PLAINTEXT") == "it answered with a TLS alert: it is a TLS listener"
    assert probe("127.0.0.1", kafka_like, "PLAINTEXT") == REACHED
    assert probe("127.0.0.1", kafka_like, "SASL_SSL").startswith("it did not complete a TLS handshake")
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        closed = unused.getsockname()[1]
    assert probe("127.0.0.1", closed, "SASL_SSL") == UNREACHABLE, "an unreachable broker is not a settings problem"
