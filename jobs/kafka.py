"""Kafka tables mapped onto Spark's Kafka connector (pure option mapping, no Spark).

``properties.*`` become ``kafka.*``; the startup mode becomes ``startingOffsets`` /
``startingTimestamp``. The connector is not part of pyspark: it is in the declared jar set
(``runner/core/jars.py``), on every local application's classpath and in EMR's ``spark.jars``.
"""

from __future__ import annotations

import json

from runner.core.errors import UserError
from runner.core.starts import kafka_topics
from runner.core.tables import TableDef

# Client settings the platform gives every Kafka table (the team's EMR cluster: MSK's SASL/IAM
# settings), as Spark properties ``spark.sqlrunner.kafka.properties.<client setting>``; a
# table's own option wins.
PLATFORM_DEFAULTS_PREFIX = "spark.sqlrunner.kafka."
EARLIEST = -2  # Spark's startingOffsets value for a partition's first offset


def with_platform_defaults(options: dict[str, str], defaults: dict[str, str]) -> dict[str, str]:
    """A table's options over the platform's client defaults (``properties.*`` only: never a topic)."""
    return {**{k: v for k, v in defaults.items() if k.startswith("properties.")}, **options}


def _kafka_properties(options: dict[str, str]) -> dict[str, str]:
    return {
        "kafka." + key[len("properties.") :]: value for key, value in options.items() if key.startswith("properties.")
    }


def complete_offsets(
    committed: dict[str, dict[str, int]], current: dict[str, list[int]]
) -> tuple[dict[str, dict[str, int]], list[str]]:
    """Starting offsets for exactly the partitions the source is assigned now (what Spark requires):
    the committed offset where there is one, the earliest (-2) for a partition or topic that appeared
    since; partitions that are gone are left out. Returns the offsets and a note per difference."""
    offsets: dict[str, dict[str, int]] = {}
    notes: list[str] = []
    for topic, partitions in sorted(current.items()):
        known = committed.get(topic, {})
        offsets[topic] = {}
        for partition in partitions:
            if str(partition) in known:
                offsets[topic][str(partition)] = int(known[str(partition)])
            else:
                offsets[topic][str(partition)] = EARLIEST
                notes.append(f"{topic} partition {partition} is new since the previous version: read from its start")
    for topic, partitions in sorted(committed.items()):
        gone = sorted(set(partitions) - set(offsets.get(topic, {})), key=int)
        if gone:
            notes.append(f"{topic} partitions {', '.join(gone)} are no longer assigned: not read")
    return offsets, notes


def source_options(table: TableDef, options: dict[str, str]) -> dict[str, str]:
    """Reader options for ``spark.readStream.format("kafka")`` from resolved table options."""
    result = _kafka_properties(options)
    if "topic-pattern" in options:
        result["subscribePattern"] = options["topic-pattern"]
    else:
        result["subscribe"] = ",".join(kafka_topics(options))
    mode = options.get("scan.startup.mode", "earliest-offset")
    if mode == "earliest-offset":
        result["startingOffsets"] = "earliest"
    elif mode == "latest-offset":
        result["startingOffsets"] = "latest"
    elif mode == "specific-offsets":
        result["startingOffsets"] = specific_offsets_json(table, options)
    elif mode == "timestamp":
        result["startingTimestamp"] = options["scan.startup.timestamp-millis"]
    if "scan.max-offsets-per-trigger" in options:
        result["maxOffsetsPerTrigger"] = options["scan.max-offsets-per-trigger"]
    if "scan.fail-on-data-loss" in options:
        result["failOnDataLoss"] = options["scan.fail-on-data-loss"]
    return result


def specific_offsets_json(table: TableDef, options: dict[str, str]) -> str:
    """``partition:0,offset:42;partition:1,offset:300`` -> ``{"topic": {"0": 42, "1": 300}}``."""
    topics = kafka_topics(options)
    if len(topics) != 1:
        raise _option_error(table, "scan.startup.specific-offsets needs exactly one 'topic'")
    offsets: dict[str, int] = {}
    for entry in options["scan.startup.specific-offsets"].split(";"):
        if not entry.strip():
            continue
        fields = dict(part.split(":", 1) for part in entry.split(",") if ":" in part)
        partition, offset = fields.get("partition", "").strip(), fields.get("offset", "").strip()
        if not partition.isdigit() or not offset.lstrip("-").isdigit():
            raise _option_error(
                table, f"scan.startup.specific-offsets entry {entry!r} is not 'partition:<n>,offset:<n>'"
            )
        offsets[partition] = int(offset)
    if not offsets:
        raise _option_error(table, "scan.startup.specific-offsets is empty")
    return json.dumps({topics[0]: offsets}, separators=(",", ":"))


def sink_options(table: TableDef, options: dict[str, str]) -> dict[str, str]:
    """Writer options for ``writeStream.format("kafka")``."""
    topics = kafka_topics(options)
    if "topic-pattern" in options or len(topics) != 1:
        raise _option_error(table, "a Kafka sink writes to exactly one 'topic'")
    return {**_kafka_properties(options), "topic": topics[0]}


def _option_error(table: TableDef, message: str) -> UserError:
    return UserError.of(
        "DDL_INVALID_CONNECTOR_OPTION",
        file=table.file,
        line=table.line,
        table=table.name,
        reason=message,
        hint="see the kafka connector's options in docs/connectors.md",
    )
