"""What each connector accepts: roles, required and allowed options, formats.

Pure data and checks, no Spark: DDL is checked without starting Spark. The Spark side
of each connector lives in ``jobs/``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from runner.core import lookup, placeholder_syntax
from runner.core.errors import Problem


@dataclass(frozen=True)
class ConnectorSpec:
    name: str
    source: bool
    sink: bool
    required: tuple[str, ...] = ()
    allowed: frozenset[str] = frozenset()
    allowed_prefixes: tuple[str, ...] = ()
    choices: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # Options whose value must be a non-negative integer.
    integers: tuple[str, ...] = ()

    def accepts(self, key: str) -> bool:
        return (
            key == "connector" or key in self.allowed or key in self.required or key.startswith(self.allowed_prefixes)
        )


FILE_FORMATS = ("json", "csv", "parquet", "debezium-json")
KAFKA_FORMATS = ("json", "avro", "debezium-json")
UPSERT_KAFKA_FORMATS = ("json",)
# 'changelog-mode' = 'upsert': a keyed file or Kafka table whose records are each its key's latest row.
CHANGELOG_MODES = ("append", "upsert")
DATAGEN_FIELD_OPTIONS = ("kind", "min", "max", "length", "start", "end", "cardinality", "null-rate", "values")

CONNECTORS: dict[str, ConnectorSpec] = {
    spec.name: spec
    for spec in (
        ConnectorSpec(
            "filesystem",
            source=True,
            sink=True,
            required=("path", "format"),
            allowed=frozenset(
                {
                    "source.max-files-per-trigger",
                    "source.path-glob-filter",
                    "csv.field-delimiter",
                    "csv.quote-character",
                    "csv.null-literal",
                    "csv.header",
                    "changelog-mode",
                }
                | lookup.OPTIONS
            ),
            choices={
                "format": FILE_FORMATS,
                "csv.header": ("true", "false"),
                "changelog-mode": CHANGELOG_MODES,
                lookup.CACHE: lookup.CACHES,
            },
            integers=("source.max-files-per-trigger", lookup.MAX_RETRIES),
        ),
        ConnectorSpec(
            "datagen",
            source=True,
            sink=False,
            allowed=frozenset({"rows-per-second", "number-of-rows", "seed"}),
            allowed_prefixes=("fields.",),
            integers=("rows-per-second", "number-of-rows", "seed"),
        ),
        ConnectorSpec("blackhole", source=False, sink=True),
        ConnectorSpec(
            "print",
            source=False,
            sink=True,
            allowed=frozenset({"print-identifier", "print.max-rows"}),
            integers=("print.max-rows",),
        ),
        ConnectorSpec(
            "kafka",
            source=True,
            sink=True,
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
            allowed_prefixes=("properties.",),
            choices={
                "format": KAFKA_FORMATS,
                "value.format": KAFKA_FORMATS,
                "changelog-mode": CHANGELOG_MODES,
                "scan.startup.mode": (
                    "earliest-offset",
                    "latest-offset",
                    "specific-offsets",
                    "timestamp",
                    "group-offsets",
                ),
                "scan.fail-on-data-loss": ("true", "false"),
            },
            integers=("scan.startup.timestamp-millis", "scan.max-offsets-per-trigger"),
        ),
        ConnectorSpec(
            "upsert-kafka",
            source=True,
            sink=True,
            required=("topic", "properties.bootstrap.servers", "key.format", "value.format"),
            allowed=frozenset(
                {"key.fields-prefix", "value.fields-include", "scan.max-offsets-per-trigger", "scan.fail-on-data-loss"}
            ),
            allowed_prefixes=("properties.",),
            choices={
                "key.format": UPSERT_KAFKA_FORMATS,
                "value.format": UPSERT_KAFKA_FORMATS,
                "value.fields-include": ("ALL", "EXCEPT_KEY"),
                "scan.fail-on-data-loss": ("true", "false"),
            },
            integers=("scan.max-offsets-per-trigger",),
        ),
        ConnectorSpec(
            "jdbc",
            source=True,  # as a lookup table (runner/core/lookup.py)
            sink=True,
            required=("url", "table-name"),
            allowed=frozenset({"username", "password"}) | lookup.OPTIONS,
            choices={lookup.CACHE: lookup.CACHES, lookup.CACHE_MISSING: ("true", "false")},
            integers=(lookup.MAX_RETRIES, lookup.MAX_ROWS),
        ),
    )
}


def check_options(
    options: dict[str, str], columns: list[str], *, file: str | None, line: int | None, table: str
) -> list[Problem]:
    """Problems with a table's WITH options; empty when the options are valid."""
    problems: list[Problem] = []

    def problem(code: str, **params: str) -> None:
        problems.append(Problem.of(code, file=file, line=line, table=table, **params))

    connector = options.get("connector")
    if connector is None:
        problem("DDL_MISSING_CONNECTOR", connectors=", ".join(CONNECTORS))
        return problems
    spec = CONNECTORS.get(connector)
    if spec is None:
        problem("DDL_UNKNOWN_CONNECTOR", connector=connector, connectors=", ".join(CONNECTORS))
        return problems
    for key in spec.required:
        if key not in options:
            problem(
                "DDL_MISSING_CONNECTOR_OPTION",
                reason=f"connector '{connector}' needs option '{key}'",
                hint=f"add '{key}' = '...' to WITH (...)",
            )
    for key, value in options.items():
        if not spec.accepts(key):
            known = sorted(spec.allowed | set(spec.required)) + [p + "*" for p in spec.allowed_prefixes]
            problem(
                "DDL_UNKNOWN_CONNECTOR_OPTION",
                reason=f"connector '{connector}' has no option '{key}'",
                hint=f"allowed: {', '.join(known) or 'no options'}",
            )
            continue
        for message in placeholder_syntax.check_syntax(value):
            problem("DDL_INVALID_PLACEHOLDER", key=key, reason=message)
        if placeholder_syntax.names_in(value):
            continue  # the value is only known at run time
        if key in spec.choices and value not in spec.choices[key]:
            problem(
                "DDL_INVALID_CONNECTOR_OPTION",
                reason=f"option '{key}' = {value!r} is not valid",
                hint=f"one of: {', '.join(spec.choices[key])}",
            )
        if key in spec.integers and not value.isdigit():
            problem(
                "DDL_INVALID_CONNECTOR_OPTION",
                reason=f"option '{key}' = {value!r} is not a non-negative integer",
                hint="a whole number, e.g. '100'",
            )
    if connector == "kafka":
        _check_kafka(options, problem)
    if connector == "datagen":
        _check_datagen(options, columns, problem)
    if connector == "jdbc":
        _check_jdbc(options, problem)
    for reason, hint in lookup.check(options):
        problem("DDL_INVALID_CONNECTOR_OPTION", reason=reason, hint=hint)
    return problems


def _check_jdbc(options: dict[str, str], problem: Callable[..., None]) -> None:
    url = options.get("url", "")
    if url and not placeholder_syntax.names_in(url) and not url.startswith("jdbc:postgresql://"):
        problem(
            "DDL_INVALID_CONNECTOR_OPTION",
            reason=f"option 'url' = {url!r} is not a PostgreSQL JDBC URL",
            hint="'jdbc:postgresql://<host>:<port>/<database>' (PostgreSQL is the database the jdbc sink writes)",
        )
    password = options.get("password")
    if (password and not placeholder_syntax.names_in(password)) or "password=" in url.lower():
        problem(
            "DDL_INVALID_CONNECTOR_OPTION",
            reason="a literal password is declared (it would be kept in the deployed state)",
            hint="'password' = '${DB_PASSWORD}' (a placeholder, resolved only where the job runs), not in the 'url'",
        )


def check_changelog(
    options: dict[str, str], primary_key: tuple[str, ...], *, file: str | None, line: int | None, table: str
) -> list[Problem]:
    """Problems of a table whose rows change (``TableDef.changelog``): it needs a PRIMARY KEY, and its
    options must agree on how its records carry changes."""
    problems: list[Problem] = []

    def problem(code: str, **params: str) -> None:
        problems.append(Problem.of(code, file=file, line=line, table=table, **params))

    connector = options.get("connector")
    fmt = options.get("value.format") or options.get("format")
    mode = options.get("changelog-mode")
    changelog = connector == "upsert-kafka" or mode == "upsert" or fmt == "debezium-json"
    if mode == "upsert" and fmt == "debezium-json":
        problem(
            "DDL_INVALID_CONNECTOR_OPTION",
            reason="'changelog-mode' = 'upsert' and 'format' = 'debezium-json' disagree",
            hint="a debezium-json record says itself whether it inserts, updates or deletes: drop 'changelog-mode'",
        )
    if changelog and not primary_key:
        what = (
            "connector 'upsert-kafka'"
            if connector == "upsert-kafka"
            else "'changelog-mode' = 'upsert'"
            if mode == "upsert"
            else "format 'debezium-json'"
        )
        problem("DDL_CHANGELOG_WITHOUT_KEY", what=what)
    prefix = options.get("key.fields-prefix")
    if connector == "upsert-kafka" and prefix:
        for key in (k for k in primary_key if not k.startswith(prefix)):
            problem(
                "DDL_INVALID_CONNECTOR_OPTION",
                reason=f"primary key column '{key}' does not start with 'key.fields-prefix' {prefix!r}",
                hint="the key's fields are the PRIMARY KEY columns named with the prefix",
            )
    return problems


def _check_kafka(options: dict[str, str], problem: Callable[..., None]) -> None:
    if "format" not in options and "value.format" not in options:
        problem(
            "DDL_MISSING_CONNECTOR_OPTION",
            reason="connector 'kafka' needs option 'format'",
            hint=f"one of: {', '.join(KAFKA_FORMATS)}",
        )
    if "format" in options and "value.format" in options and options["format"] != options["value.format"]:
        problem(
            "DDL_INVALID_CONNECTOR_OPTION",
            reason=f"'format' = {options['format']!r} and 'value.format' = {options['value.format']!r} disagree",
            hint="set one of them",
        )
    if "topic" in options and "topic-pattern" in options:
        problem(
            "DDL_INVALID_CONNECTOR_OPTION",
            reason="set either 'topic' or 'topic-pattern', not both",
            hint="'topic' for named topics, 'topic-pattern' for a regular expression",
        )
    if "topic" not in options and "topic-pattern" not in options:
        problem(
            "DDL_MISSING_CONNECTOR_OPTION",
            reason="connector 'kafka' needs option 'topic'",
            hint="'topic' = 'name' (or 'topic-pattern' = 'regex' for a source)",
        )
    mode = options.get("scan.startup.mode")
    if mode == "specific-offsets" and "scan.startup.specific-offsets" not in options:
        problem(
            "DDL_MISSING_CONNECTOR_OPTION",
            reason="scan.startup.mode 'specific-offsets' needs 'scan.startup.specific-offsets'",
            hint="'partition:0,offset:42;partition:1,offset:300'",
        )
    if mode == "timestamp" and "scan.startup.timestamp-millis" not in options:
        problem(
            "DDL_MISSING_CONNECTOR_OPTION",
            reason="scan.startup.mode 'timestamp' needs 'scan.startup.timestamp-millis'",
            hint="'scan.startup.timestamp-millis' = '<epoch milliseconds>'",
        )
    if mode == "group-offsets":
        problem(
            "DDL_INVALID_CONNECTOR_OPTION",
            reason="scan.startup.mode 'group-offsets' is not available on Spark",
            hint="Spark tracks Kafka offsets in its checkpoint, not in consumer groups; use 'earliest-offset', "
            "'latest-offset', 'specific-offsets' or 'timestamp'",
        )


def _check_datagen(options: dict[str, str], columns: list[str], problem: Callable[..., None]) -> None:
    lowered = {c.lower() for c in columns}
    for key, value in options.items():
        if not key.startswith("fields."):
            continue
        parts = key.split(".")
        if len(parts) != 3 or parts[2] not in DATAGEN_FIELD_OPTIONS:
            problem(
                "DDL_UNKNOWN_CONNECTOR_OPTION",
                reason=f"option '{key}' is not a datagen field option",
                hint=f"fields.<column>.<{'|'.join(DATAGEN_FIELD_OPTIONS)}>",
            )
            continue
        if parts[1].lower() not in lowered:
            problem(
                "DDL_UNKNOWN_CONNECTOR_OPTION",
                reason=f"option '{key}' names no declared column '{parts[1]}'",
                hint=f"declared: {', '.join(columns)}",
            )
        if parts[2] == "kind" and value not in ("random", "sequence"):
            problem(
                "DDL_INVALID_CONNECTOR_OPTION",
                reason=f"option '{key}' = {value!r} is not valid",
                hint="random or sequence",
            )
        if parts[2] in ("length", "cardinality") and not value.isdigit():
            problem(
                "DDL_INVALID_CONNECTOR_OPTION",
                reason=f"option '{key}' = {value!r} is not a positive integer",
                hint="a whole number, e.g. '10'",
            )
        if parts[2] in ("min", "max", "start", "end", "null-rate"):
            try:
                float(value)
            except ValueError:
                problem(
                    "DDL_INVALID_CONNECTOR_OPTION",
                    reason=f"option '{key}' = {value!r} is not a number",
                    hint="a number, e.g. '0.5'",
                )
