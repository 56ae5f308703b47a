"""Small bridges to Scala values through py4j, for the places that use Spark's JVM API directly."""

from __future__ import annotations

from functools import reduce
from typing import Any

# JVM classes already looked up, per gateway: a lookup through ``jvm.a.b.C`` is one Py4J
# round trip per name part; a class found once is called directly afterwards.
_CLASSES: dict[tuple[Any, str], Any] = {}


def java_class(jvm: Any, name: str) -> Any:
    """The JVM class (or Scala object) ``name``, e.g. ``org.apache.hadoop.fs.Path``, through ``jvm``."""
    key = (jvm._gateway_client, name)  # the client, not id(jvm): a cached key keeps its gateway's identity
    found = _CLASSES.get(key)
    if found is None:
        found = _CLASSES[key] = reduce(getattr, name.split("."), jvm)
    return found


def scala_list(values: Any) -> list[Any]:
    """A Scala collection as a Python list."""
    iterator = values.iterator()
    items = []
    while iterator.hasNext():
        items.append(iterator.next())
    return items


def scala_none(jvm: Any) -> Any:
    """Scala's ``None``."""
    return getattr(java_class(jvm, "scala.None$"), "MODULE$")
