"""``filesystem``: a folder of files, local or ``s3://``; read as a stream (or, declaring
``'lookup.cache'``, as a lookup table) and written by Spark's file sink, exactly once."""

from __future__ import annotations

from collections.abc import Mapping

from runner.core.connectors import lookups
from runner.core.connectors.base import Connector, ContinueBy, OptionSpec

FORMATS = ("json", "csv", "parquet", "debezium-json")
LOOKUP_FORMATS = ("json", "csv", "parquet")  # a lookup table holds rows, not changes
# 'changelog-mode' = 'upsert': a keyed table whose records are each its key's latest row.
CHANGELOG_MODES = ("append", "upsert")


class Filesystem(Connector):
    name = "filesystem"
    formats = FORMATS
    option_spec = OptionSpec(
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
            | lookups.OPTIONS
        ),
        choices={
            "format": FORMATS,
            "csv.header": ("true", "false"),
            "changelog-mode": CHANGELOG_MODES,
            lookups.CACHE: lookups.CACHES,
        },
        integers=("source.max-files-per-trigger", lookups.MAX_RETRIES),
    )
    stream = True
    sink = True
    keyed_sink = False  # Spark's file sink appends
    lookup_caches = (lookups.FULL,)  # a folder is loaded whole
    continue_by = ContinueBy.SKIPPING_READ_FILES
    continuation = "continues after the files v{version} read (skips them)"
    path_option = "path"
    preview_reads_to_end = True

    def can_dead_letter(self, options: Mapping[str, str], has_not_null: bool) -> bool:
        # A JSON or CSV record can fail to parse; a Parquet one cannot, but may lack a NOT NULL value.
        return options.get("format") in ("json", "csv", "debezium-json") or has_not_null

    def changes_refused(self, options: Mapping[str, str], keyed: bool) -> tuple[str, str] | None:
        return (
            "a file table only grows",
            "write to a jdbc table with a PRIMARY KEY, an upsert-kafka table, or a kafka table in debezium-json",
        )

    def delivery(self, keyed: bool) -> str:
        return "exactly-once"  # a replayed batch replaces what it wrote

    def lookup_cache(self, options: Mapping[str, str]) -> str | None:
        return options.get(lookups.CACHE)  # a stream unless it declares a cache

    def lookup_problems(self, options: Mapping[str, str]) -> list[tuple[str, str]]:
        declared = [k for k in options if k.startswith(lookups.PREFIX)]
        problems = []
        if declared and lookups.CACHE not in options:
            problems.append(
                (
                    f"option '{declared[0]}' is set but 'lookup.cache' is not",
                    "'lookup.cache' = 'FULL' makes the folder a lookup table (reloaded while the query runs)",
                )
            )
        return problems + super().lookup_problems(options)

    def lookup_rules(self, options: Mapping[str, str], cache: str) -> list[tuple[str, str]]:
        problems = []
        if cache in lookups.CACHES and cache not in self.lookup_caches:
            problems.append(
                (
                    f"a folder lookup table is loaded whole: 'lookup.cache' = '{cache}' is for jdbc tables",
                    "'lookup.cache' = 'FULL'",
                )
            )
        fmt = options.get("format")
        if fmt is not None and fmt not in LOOKUP_FORMATS:
            problems.append(
                (
                    f"a lookup table's 'format' = {fmt!r} is not a table of rows",
                    f"one of: {', '.join(LOOKUP_FORMATS)} (a lookup table holds rows, not changes)",
                )
            )
        if "changelog-mode" in options:
            problems.append(("a lookup table takes no 'changelog-mode'", "its rows are reloaded whole: drop it"))
        return problems
