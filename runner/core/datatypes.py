"""Column types as plain data: what DDL declares, what a job spec carries, how messages spell them.

Spark-free, so the control plane, the deploy Lambda and the job share one model. The JSON
form is Spark's own (``DataType.jsonValue()``), so deployed records and job specs stay
readable across versions and the Spark side converts with one mapping (``jobs/schema.py``).
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import PlainSerializer, PlainValidator

# Spark's JSON type names whose SQL spelling differs from the JSON one.
_SQL_NAMES = {"integer": "int", "long": "bigint", "short": "smallint", "byte": "tinyint"}
_DECIMAL = re.compile(r"^decimal\((\d+),\s*(\d+)\)$")


class DataType(ABC):
    """A column type. ``sql()`` is how messages spell it: ``BIGINT``, ``STRUCT<id: STRING>``."""

    @abstractmethod
    def json_value(self) -> Any:
        """Spark's JSON form of the type."""

    @abstractmethod
    def simple_string(self) -> str:
        """Spark's short spelling: ``bigint``, ``struct<a:int>``."""

    def sql(self) -> str:
        return self.simple_string().upper()


@dataclass(frozen=True)
class Primitive(DataType):
    """A type without parameters, by Spark's JSON name (``string``, ``integer``, ``timestamp``...)."""

    name: str

    def json_value(self) -> Any:
        return self.name

    def simple_string(self) -> str:
        return _SQL_NAMES.get(self.name, self.name)


@dataclass(frozen=True)
class Decimal(DataType):
    precision: int = 10
    scale: int = 0

    def json_value(self) -> Any:
        return f"decimal({self.precision},{self.scale})"

    def simple_string(self) -> str:
        return self.json_value()


@dataclass(frozen=True)
class Array(DataType):
    element: DataType
    contains_null: bool = True

    def json_value(self) -> Any:
        return {"type": "array", "elementType": self.element.json_value(), "containsNull": self.contains_null}

    def simple_string(self) -> str:
        return f"array<{self.element.simple_string()}>"

    def sql(self) -> str:
        return f"ARRAY<{self.element.sql()}>"


@dataclass(frozen=True)
class Map(DataType):
    key: DataType
    value: DataType
    value_contains_null: bool = True

    def json_value(self) -> Any:
        return {
            "type": "map",
            "keyType": self.key.json_value(),
            "valueType": self.value.json_value(),
            "valueContainsNull": self.value_contains_null,
        }

    def simple_string(self) -> str:
        return f"map<{self.key.simple_string()},{self.value.simple_string()}>"

    def sql(self) -> str:
        return f"MAP<{self.key.sql()}, {self.value.sql()}>"


@dataclass(frozen=True)
class Field:
    name: str
    type: DataType
    nullable: bool = True


@dataclass(frozen=True)
class Struct(DataType):
    fields: tuple[Field, ...] = ()

    def json_value(self) -> Any:
        return {
            "type": "struct",
            "fields": [
                {"name": f.name, "type": f.type.json_value(), "nullable": f.nullable, "metadata": {}}
                for f in self.fields
            ],
        }

    def simple_string(self) -> str:
        return "struct<" + ",".join(f"{f.name}:{f.type.simple_string()}" for f in self.fields) + ">"

    def sql(self) -> str:
        return "STRUCT<" + ", ".join(f"{f.name}: {f.type.sql()}" for f in self.fields) + ">"


STRING = Primitive("string")
BOOLEAN = Primitive("boolean")
TINYINT = Primitive("byte")
SMALLINT = Primitive("short")
INT = Primitive("integer")
BIGINT = Primitive("long")
FLOAT = Primitive("float")
DOUBLE = Primitive("double")
DATE = Primitive("date")
TIMESTAMP = Primitive("timestamp")
TIMESTAMP_NTZ = Primitive("timestamp_ntz")
BINARY = Primitive("binary")
TIMESTAMPS = (TIMESTAMP, TIMESTAMP_NTZ)


def from_json_value(value: Any) -> DataType:
    """The type a Spark JSON type value (``DataType.jsonValue()``) describes."""
    if isinstance(value, str):
        decimal = _DECIMAL.match(value)
        return Decimal(int(decimal.group(1)), int(decimal.group(2))) if decimal else Primitive(value)
    kind = value["type"]
    if kind == "array":
        return Array(from_json_value(value["elementType"]), bool(value.get("containsNull", True)))
    if kind == "map":
        return Map(
            from_json_value(value["keyType"]),
            from_json_value(value["valueType"]),
            bool(value.get("valueContainsNull", True)),
        )
    if kind == "struct":
        return Struct(
            tuple(Field(f["name"], from_json_value(f["type"]), bool(f.get("nullable", True))) for f in value["fields"])
        )
    if kind == "udt":  # a user-defined type is stored as its SQL type
        return from_json_value(value["sqlType"])
    raise ValueError(f"not a Spark type: {value!r}")


def _read(value: Any) -> DataType:
    return value if isinstance(value, DataType) else from_json_value(value)


# A column type as a document holds it: Spark's JSON form.
SparkJson = Annotated[DataType, PlainValidator(_read), PlainSerializer(lambda t: t.json_value(), return_type=Any)]
