"""``kafka``: a topic (or topics) on a broker, read and written through Spark's own Kafka connector.

A record's value holds the row (JSON, Avro, or a debezium-json change); a PRIMARY KEY on a target
makes its columns the message key and writes it in update mode. Read exactly from where a previous
version stopped (the offsets it committed); written at least once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from runner.core.connectors.base import Connector, ContinueBy, OptionSpec, Report

FORMATS = ("json", "avro", "debezium-json")
CHANGELOG_MODES = ("append", "upsert")
STARTUP_MODES = ("earliest-offset", "latest-offset", "specific-offsets", "timestamp", "group-offsets")


def value_format(options: Mapping[str, str]) -> str | None:
    """How a Kafka record's value is encoded: ``value.format``, else ``format``."""
    return options.get("value.format") or options.get("format")


class Kafka(Connector):
    name = "kafka"
    formats = FORMATS
    option_spec = OptionSpec(
        required=("properties.bootstrap.servers",),
        allowed=frozenset(
            {
                "topic",
                "topic-pattern",
                "format",
                "value.format",
                "scan.startup.mode",
                "scan.startup.specific-offsets",
                "scan.startup.timestamp-millis",
                "scan.max-offsets-per-trigger",
                "scan.fail-on-data-loss",
                "changelog-mode",
            }
        ),
        prefixes=("properties.",),
        choices={
            "format": FORMATS,
            "value.format": FORMATS,
            "changelog-mode": CHANGELOG_MODES,
            "scan.startup.mode": STARTUP_MODES,
            "scan.fail-on-data-loss": ("true", "false"),
        },
        integers=("scan.startup.timestamp-millis", "scan.max-offsets-per-trigger"),
    )
    stream = True
    sink = True
    continue_by = ContinueBy.OFFSETS
    continuation = "continues from the Kafka offsets v{version} committed"

    def check(self, options: Mapping[str, str], columns: Sequence[str], report: Report) -> None:
        """One format and one way of naming topics; a startup mode with what it needs, and one Spark has."""
        if "format" not in options and "value.format" not in options:
            report(
                "DDL_MISSING_CONNECTOR_OPTION",
                reason="connector 'kafka' needs option 'format'",
                hint=f"one of: {', '.join(FORMATS)}",
            )
        if "format" in options and "value.format" in options and options["format"] != options["value.format"]:
            report(
                "DDL_INVALID_CONNECTOR_OPTION",
                reason=f"'format' = {options['format']!r} and 'value.format' = {options['value.format']!r} disagree",
                hint="set one of them",
            )
        if "topic" in options and "topic-pattern" in options:
            report(
                "DDL_INVALID_CONNECTOR_OPTION",
                reason="set either 'topic' or 'topic-pattern', not both",
                hint="'topic' for named topics, 'topic-pattern' for a regular expression",
            )
        if "topic" not in options and "topic-pattern" not in options:
            report(
                "DDL_MISSING_CONNECTOR_OPTION",
                reason="connector 'kafka' needs option 'topic'",
                hint="'topic' = 'name' (or 'topic-pattern' = 'regex' for a source)",
            )
        mode = options.get("scan.startup.mode")
        if mode == "specific-offsets" and "scan.startup.specific-offsets" not in options:
            report(
                "DDL_MISSING_CONNECTOR_OPTION",
                reason="scan.startup.mode 'specific-offsets' needs 'scan.startup.specific-offsets'",
                hint="'partition:0,offset:42;partition:1,offset:300'",
            )
        if mode == "timestamp" and "scan.startup.timestamp-millis" not in options:
            report(
                "DDL_MISSING_CONNECTOR_OPTION",
                reason="scan.startup.mode 'timestamp' needs 'scan.startup.timestamp-millis'",
                hint="'scan.startup.timestamp-millis' = '<epoch milliseconds>'",
            )
        if mode == "group-offsets":
            report(
                "DDL_INVALID_CONNECTOR_OPTION",
                reason="scan.startup.mode 'group-offsets' is not available on Spark",
                hint="Spark tracks Kafka offsets in its checkpoint, not in consumer groups; use 'earliest-offset', "
                "'latest-offset', 'specific-offsets' or 'timestamp'",
            )

    def value_format(self, options: Mapping[str, str]) -> str | None:
        return value_format(options)

    def record_format(self, options: Mapping[str, str]) -> str | None:
        return value_format(options)

    def can_dead_letter(self, options: Mapping[str, str], has_not_null: bool) -> bool:
        return True  # a message's value is text or bytes until it is decoded

    def changes_refused(self, options: Mapping[str, str], keyed: bool) -> tuple[str, str] | None:
        fmt = value_format(options)
        if fmt == "debezium-json":
            return None
        return (
            f"a kafka table in {fmt} holds records, not updates and deletes",
            "declare the target 'connector' = 'upsert-kafka' with a PRIMARY KEY, or 'format' = 'debezium-json'",
        )

    def delivery(self, keyed: bool) -> str:
        # A replayed batch is written again; a keyed topic converges to the same latest value per key.
        return "at-least-once, keyed" if keyed else "at-least-once"
