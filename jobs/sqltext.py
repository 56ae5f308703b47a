"""Spark SQL text for expressions the runner builds itself.

An expression built from ``pyspark.sql.functions`` costs a Py4J round trip per function,
operator and argument (hundreds for one table's malformed-record checks); the same
expression as SQL text is parsed by the JVM in one call. Names and messages here can hold
any character, so they are quoted in a way no parser setting reinterprets: identifiers in
backticks (a backtick doubled), and text without a quote or backslash inside a literal
(those two are spelled ``chr(39)`` and ``chr(92)``, so the result is the same with or
without ``spark.sql.parser.escapedStringLiterals``).
"""

from __future__ import annotations

import re

_AWKWARD = re.compile(r"(['\\])")


def identifier(name: str) -> str:
    """A column name as SQL: ``name`` in backticks."""
    return "`" + name.replace("`", "``") + "`"


def string(text: str) -> str:
    """A string literal holding exactly ``text``."""
    if not _AWKWARD.search(text):
        return f"'{text}'"
    parts = [f"chr({ord(p)})" if _AWKWARD.fullmatch(p) else f"'{p}'" for p in _AWKWARD.split(text) if p]
    return f"concat({', '.join(parts)})"
