"""A connector as the control plane knows it, without Spark: what its tables' ``WITH (...)`` takes and
how that is checked, the roles its tables play, and the facts the runner decides by.

One subclass of :class:`Connector` per connector, one module each in this package, registered by name
in ``__init__.py``. The DDL checks, the plan, the state and the job all ask a table's connector here
instead of comparing its name. How a job reads and writes the connector's tables in Spark is its other
half, ``jobs/connectors/<name>.py``, registered under the same name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import ClassVar

from runner.core import placeholder_syntax
from runner.core.connectors import lookups

# report(code, **params): one problem of the table being checked (its file, line and name are added).
Report = Callable[..., None]


@dataclass(frozen=True)
class OptionSpec:
    """The options a connector's tables take in ``WITH (...)``, besides ``'connector'``."""

    required: tuple[str, ...] = ()
    allowed: frozenset[str] = frozenset()
    prefixes: tuple[str, ...] = ()  # any option starting so (``properties.``: the Kafka client's own settings)
    choices: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    integers: tuple[str, ...] = ()  # options whose value must be a non-negative integer

    def accepts(self, key: str) -> bool:
        return key == "connector" or key in self.allowed or key in self.required or key.startswith(self.prefixes)

    def known(self) -> list[str]:
        """The options, for a hint: in name order, then the prefixes."""
        return sorted(self.allowed | set(self.required)) + [p + "*" for p in self.prefixes]


class ContinueBy(Enum):
    """How a stream source of a new query version picks up where the previous version stopped
    (``runner/state/continuation.py`` works the start out, ``runner/deploy/plan.py`` says it)."""

    OFFSETS = "offsets"  # exactly where it stopped: from the offsets the previous version committed
    SKIPPING_READ_FILES = "skipping-read-files"  # its folder read again, without the files already read
    GENERATING = "generating"  # its rows are generated anew (from its seed): there is nothing to continue


class Connector:
    """One connector. A subclass sets what its connector declares and overrides the facts that differ
    from these defaults: a table that is neither read nor written, with no formats, no changes and no
    lookups, that cannot continue a previous version."""

    name: ClassVar[str]
    option_spec: ClassVar[OptionSpec] = OptionSpec()
    formats: ClassVar[tuple[str, ...]] = ()  # what its 'format' (a Kafka table's 'value.format') takes

    # Roles. A table read by a query is a lookup table when ``lookup_cache`` says so, else a stream.
    stream: ClassVar[bool] = False  # a query can read its tables as streams
    sink: ClassVar[bool] = False  # a query can write its tables
    keyed_sink: ClassVar[bool] = True  # a target of it may declare a PRIMARY KEY (written in update mode)
    lookup_caches: ClassVar[tuple[str, ...]] = ()  # the 'lookup.cache' kinds its lookup tables serve

    # Facts for deciding
    continue_by: ClassVar[ContinueBy | None] = None  # None: a new version starts from the startup position
    continuation: ClassVar[str] = ""  # what the plan says of a source that continues ``{version}``
    path_option: ClassVar[str | None] = None  # the option naming the folder its files are in
    preview_reads_to_end: ClassVar[bool] = False  # a preview reads what its tables hold now and ends

    def problems(
        self, options: Mapping[str, str], columns: Sequence[str], primary_key: Sequence[str], report: Report
    ) -> None:
        """Report every problem of a table of this connector declared with ``options``, ``columns`` and
        ``primary_key``: its options against :attr:`option_spec`, the connector's own rules, its lookup
        options, and how its records carry changes."""
        self._option_problems(options, report)
        self.check(options, columns, report)
        for reason, hint in self.lookup_problems(options):
            report("DDL_INVALID_CONNECTOR_OPTION", reason=reason, hint=hint)
        self.changelog_problems(options, primary_key, report)

    def _option_problems(self, options: Mapping[str, str], report: Report) -> None:
        spec = self.option_spec
        for key in spec.required:
            if key not in options:
                report(
                    "DDL_MISSING_CONNECTOR_OPTION",
                    reason=f"connector '{self.name}' needs option '{key}'",
                    hint=f"add '{key}' = '...' to WITH (...)",
                )
        for key, value in options.items():
            if not spec.accepts(key):
                report(
                    "DDL_UNKNOWN_CONNECTOR_OPTION",
                    reason=f"connector '{self.name}' has no option '{key}'",
                    hint=f"allowed: {', '.join(spec.known()) or 'no options'}",
                )
                continue
            for message in placeholder_syntax.check_syntax(value):
                report("DDL_INVALID_PLACEHOLDER", key=key, reason=message)
            if placeholder_syntax.names_in(value):
                continue  # the value is only known at run time
            if key in spec.choices and value not in spec.choices[key]:
                report(
                    "DDL_INVALID_CONNECTOR_OPTION",
                    reason=f"option '{key}' = {value!r} is not valid",
                    hint=f"one of: {', '.join(spec.choices[key])}",
                )
            if key in spec.integers and not value.isdigit():
                report(
                    "DDL_INVALID_CONNECTOR_OPTION",
                    reason=f"option '{key}' = {value!r} is not a non-negative integer",
                    hint="a whole number, e.g. '100'",
                )

    def check(self, options: Mapping[str, str], columns: Sequence[str], report: Report) -> None:
        """The connector's own rules over its options, beyond what :attr:`option_spec` declares."""

    # ---- records -----------------------------------------------------------------------------------

    def value_format(self, options: Mapping[str, str]) -> str | None:
        """How a record's value is encoded, for a table whose records have a key and a value (Kafka)."""
        return None

    def record_format(self, options: Mapping[str, str]) -> str | None:
        """How a record is encoded (``json``, ``csv``, ``avro``, ``debezium-json``, ...)."""
        return options.get("format")

    def can_dead_letter(self, options: Mapping[str, str], has_not_null: bool) -> bool:
        """A record read from the table can be malformed (and set aside); ``has_not_null``: the table
        declares a NOT NULL column."""
        return False

    # ---- changes -----------------------------------------------------------------------------------

    def changelog(self, options: Mapping[str, str]) -> str | None:
        """How the table's records change its rows, when they do: ``upsert`` (each record is its key's
        latest row, a tombstone deletes the key) or ``debezium`` (``op`` with ``before``/``after``
        images); None for a table that only grows."""
        if options.get("changelog-mode") == "upsert":
            return "upsert"
        if self.record_format(options) == "debezium-json":
            return "debezium"
        return None

    def changelog_cause(self, options: Mapping[str, str]) -> str | None:
        """What declares the table's rows to change, for a message; None when nothing does."""
        fmt = options.get("value.format") or options.get("format")
        if options.get("changelog-mode") == "upsert":
            return "'changelog-mode' = 'upsert'"
        if fmt == "debezium-json":
            return "format 'debezium-json'"
        return None

    def changelog_problems(self, options: Mapping[str, str], primary_key: Sequence[str], report: Report) -> None:
        """A table whose rows change needs a PRIMARY KEY, and its options must agree on how its records
        carry changes."""
        fmt = options.get("value.format") or options.get("format")
        if options.get("changelog-mode") == "upsert" and fmt == "debezium-json":
            report(
                "DDL_INVALID_CONNECTOR_OPTION",
                reason="'changelog-mode' = 'upsert' and 'format' = 'debezium-json' disagree",
                hint="a debezium-json record says itself whether it inserts, updates or deletes: drop 'changelog-mode'",
            )
        cause = self.changelog_cause(options)
        if cause is not None and not primary_key:
            report("DDL_CHANGELOG_WITHOUT_KEY", what=cause)

    def changes_refused(self, options: Mapping[str, str], keyed: bool) -> tuple[str, str] | None:
        """Why a query whose result changes (updates and deletes) cannot write a target of this connector,
        with a hint, as (reason, hint); None when it can. ``keyed``: the target declares a PRIMARY KEY."""
        return None

    def key_prefix(self, options: Mapping[str, str]) -> str:
        """What the names of a record key's fields lack of the PRIMARY KEY columns' (``key.fields-prefix``)."""
        return ""

    def value_excludes_key(self, options: Mapping[str, str]) -> bool:
        """A record's value leaves out the PRIMARY KEY columns (they are in its key)."""
        return False

    def delivery(self, keyed: bool) -> str:
        """What a reader of a target of this connector sees after a crash and restart: ``exactly-once``,
        ``at-least-once`` (a replayed batch is written again), ``at-least-once, keyed`` (the latest value
        per key ends the same); ``-`` when nothing can read it. ``keyed``: it declares a PRIMARY KEY."""
        return "-"

    # ---- lookups -----------------------------------------------------------------------------------

    def lookup_cache(self, options: Mapping[str, str]) -> str | None:
        """How a query reads a table with these options: the kind of cache of a lookup table
        (``lookups.CACHES``), or None for a stream."""
        return None

    def lookup_problems(self, options: Mapping[str, str]) -> list[tuple[str, str]]:
        """Problems with the table's ``lookup.*`` options, as (reason, hint)."""
        cache = self.lookup_cache(options)
        if cache is None:
            return []
        return [
            *lookups.value_problems(options, cache),
            *self.lookup_rules(options, cache),
            *lookups.staleness_problems(options),
        ]

    def lookup_rules(self, options: Mapping[str, str], cache: str) -> list[tuple[str, str]]:
        """The connector's own rules for its lookup tables, as (reason, hint)."""
        return []
