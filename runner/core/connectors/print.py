"""``print``: a target whose rows are logged to stdout, each prefixed with the print-identifier."""

from __future__ import annotations

from runner.core.connectors.base import Connector, OptionSpec


class Print(Connector):
    name = "print"
    option_spec = OptionSpec(allowed=frozenset({"print-identifier", "print.max-rows"}), integers=("print.max-rows",))
    sink = True

    def delivery(self, keyed: bool) -> str:
        return "at-least-once"
