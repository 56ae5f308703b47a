"""The declared tables, looked up by the names queries use."""

from __future__ import annotations

from dataclasses import dataclass

from runner.core.errors import UserError
from runner.core.sqltokens import Kind, tokenize
from runner.core.tables import TableDef


@dataclass(frozen=True)
class Catalog:
    """Declared tables by case-insensitive multipart name."""

    tables: tuple[TableDef, ...] = ()

    def lookup(self, parts: tuple[str, ...] | list[str]) -> TableDef | None:
        """Exact multipart match, else an unqualified name that matches exactly one table's last part."""
        key = tuple(p.lower() for p in parts)
        for table in self.tables:
            if table.key == key:
                return table
        if len(key) == 1:
            candidates = [t for t in self.tables if t.key[-1] == key[0]]
            if len(candidates) == 1:
                return candidates[0]
        return None

    def lookup_name(self, name: str) -> TableDef | None:
        """Look up a name written as in SQL: `kafka`.`x`, kafka.x or x."""
        try:
            tokens = [t for t in tokenize(name) if t.kind is not Kind.EOF]
        except UserError:
            return None
        parts = [t.text for t in tokens if t.is_identifier]
        dots = [t for t in tokens if t.is_punct(".")]
        if not parts or len(dots) != len(parts) - 1 or len(tokens) != len(parts) + len(dots):
            return None
        return self.lookup(parts)

    @property
    def names(self) -> list[str]:
        return [t.name for t in self.tables]
