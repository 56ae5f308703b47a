"""``upsert-kafka``: a keyed topic whose messages are each their key's latest row, a tombstone (no
value) deleting the key, as Flink's connector of that name. The key's fields are the PRIMARY KEY
columns (named with ``key.fields-prefix``); a changelog query writes its updates as new values and
its deletes as tombstones. A new version re-reads it (its rows are its whole history)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from runner.core.connectors import kafka
from runner.core.connectors.base import Connector, OptionSpec, Report

FORMATS = ("json",)
KEY_PREFIX = "key.fields-prefix"


class UpsertKafka(Connector):
    name = "upsert-kafka"
    formats = FORMATS
    option_spec = OptionSpec(
        required=("topic", "properties.bootstrap.servers", "key.format", "value.format"),
        allowed=frozenset(
            {KEY_PREFIX, "value.fields-include", "scan.max-offsets-per-trigger", "scan.fail-on-data-loss"}
        ),
        prefixes=("properties.",),
        choices={
            "key.format": FORMATS,
            "value.format": FORMATS,
            "value.fields-include": ("ALL", "EXCEPT_KEY"),
            "scan.fail-on-data-loss": ("true", "false"),
        },
        integers=("scan.max-offsets-per-trigger",),
    )
    stream = True
    sink = True

    def value_format(self, options: Mapping[str, str]) -> str | None:
        return kafka.value_format(options)

    def record_format(self, options: Mapping[str, str]) -> str | None:
        return kafka.value_format(options)

    def can_dead_letter(self, options: Mapping[str, str], has_not_null: bool) -> bool:
        return True

    def changelog(self, options: Mapping[str, str]) -> str | None:
        return "upsert"

    def changelog_cause(self, options: Mapping[str, str]) -> str | None:
        return "connector 'upsert-kafka'"

    def changelog_problems(self, options: Mapping[str, str], primary_key: Sequence[str], report: Report) -> None:
        super().changelog_problems(options, primary_key, report)
        prefix = options.get(KEY_PREFIX)
        for key in (k for k in primary_key if prefix and not k.startswith(prefix)):
            report(
                "DDL_INVALID_CONNECTOR_OPTION",
                reason=f"primary key column '{key}' does not start with 'key.fields-prefix' {prefix!r}",
                hint="the key's fields are the PRIMARY KEY columns named with the prefix",
            )

    def key_prefix(self, options: Mapping[str, str]) -> str:
        return options.get(KEY_PREFIX, "")

    def value_excludes_key(self, options: Mapping[str, str]) -> bool:
        return options.get("value.fields-include", "ALL") == "EXCEPT_KEY"

    def delivery(self, keyed: bool) -> str:
        return "at-least-once, keyed"
