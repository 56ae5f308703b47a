"""``datagen``: rows generated at a set rate, one generator per declared column, for demos and
benchmarks. Read only; a new version generates its rows anew from the seed."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from runner.core.connectors.base import Connector, ContinueBy, OptionSpec, Report

FIELD_OPTIONS = ("kind", "min", "max", "length", "start", "end", "cardinality", "null-rate", "values")


class Datagen(Connector):
    name = "datagen"
    option_spec = OptionSpec(
        allowed=frozenset({"rows-per-second", "number-of-rows", "seed"}),
        prefixes=("fields.",),
        integers=("rows-per-second", "number-of-rows", "seed"),
    )
    stream = True
    continue_by = ContinueBy.GENERATING
    continuation = "generated rows; nothing to continue"

    def check(self, options: Mapping[str, str], columns: Sequence[str], report: Report) -> None:
        """``fields.<column>.<option>``: a declared column, an option of its generator, a value it takes."""
        lowered = {c.lower() for c in columns}
        for key, value in options.items():
            if not key.startswith("fields."):
                continue
            parts = key.split(".")
            if len(parts) != 3 or parts[2] not in FIELD_OPTIONS:
                report(
                    "DDL_UNKNOWN_CONNECTOR_OPTION",
                    reason=f"option '{key}' is not a datagen field option",
                    hint=f"fields.<column>.<{'|'.join(FIELD_OPTIONS)}>",
                )
                continue
            if parts[1].lower() not in lowered:
                report(
                    "DDL_UNKNOWN_CONNECTOR_OPTION",
                    reason=f"option '{key}' names no declared column '{parts[1]}'",
                    hint=f"declared: {', '.join(columns)}",
                )
            if parts[2] == "kind" and value not in ("random", "sequence"):
                report(
                    "DDL_INVALID_CONNECTOR_OPTION",
                    reason=f"option '{key}' = {value!r} is not valid",
                    hint="random or sequence",
                )
            if parts[2] in ("length", "cardinality") and not value.isdigit():
                report(
                    "DDL_INVALID_CONNECTOR_OPTION",
                    reason=f"option '{key}' = {value!r} is not a positive integer",
                    hint="a whole number, e.g. '10'",
                )
            if parts[2] in ("min", "max", "start", "end", "null-rate"):
                try:
                    float(value)
                except ValueError:
                    report(
                        "DDL_INVALID_CONNECTOR_OPTION",
                        reason=f"option '{key}' = {value!r} is not a number",
                        hint="a number, e.g. '0.5'",
                    )
