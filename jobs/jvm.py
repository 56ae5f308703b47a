"""Small bridges to Scala values through py4j, for the places that use Spark's JVM API directly."""

from __future__ import annotations

from typing import Any


def scala_list(values: Any) -> list[Any]:
    """A Scala collection as a Python list."""
    iterator = values.iterator()
    items = []
    while iterator.hasNext():
        items.append(iterator.next())
    return items


def scala_none(jvm: Any) -> Any:
    """Scala's ``None``."""
    return getattr(getattr(jvm.scala, "None$"), "MODULE$")
