"""The Avro schema of a table whose values are ``'format' = 'avro'``: derived from its declared columns.

Flink's ``avro`` format has no schema option either: both sides derive the record schema from the
table's physical columns the same way, so a topic written by one is read by the other. The rules are
Flink's (``AvroSchemaConverter``, its default timestamp mapping):

    BOOLEAN -> boolean; TINYINT, SMALLINT, INT -> int; BIGINT -> long; FLOAT -> float; DOUBLE -> double
    STRING (CHAR, VARCHAR) -> string; BINARY (BYTES, VARBINARY) -> bytes
    DECIMAL(p, s) -> bytes, logical type decimal(p, s); DATE -> int, logical type date
    TIMESTAMP(p), TIMESTAMP_LTZ(p) -> long, logical type timestamp-millis (Flink's TIMESTAMP(3); a
        finer precision is cut to milliseconds, as Spark keeps microseconds and the schema millis)
    TIMESTAMP_NTZ -> long, logical type local-timestamp-millis
    ARRAY<T> -> array; MAP<STRING, T> -> map (Avro maps have string keys only); ROW -> record
    a nullable column -> the union ["null", T] with default null; NOT NULL -> T itself

The top record is ``org.apache.flink.avro.generated.record``, a nested one ``<parent>_<field>``:
Avro's binary encoding does not carry names, but readers that resolve schemas by name agree.
"""

from __future__ import annotations

from typing import Any

from runner.core import datatypes as T
from runner.core.tables import TableDef

RECORD = "record"
NAMESPACE = "org.apache.flink.avro.generated"

_PRIMITIVES: dict[T.DataType, Any] = {
    T.BOOLEAN: "boolean",
    T.TINYINT: "int",
    T.SMALLINT: "int",
    T.INT: "int",
    T.BIGINT: "long",
    T.FLOAT: "float",
    T.DOUBLE: "double",
    T.STRING: "string",
    T.BINARY: "bytes",
    T.DATE: {"type": "int", "logicalType": "date"},
    T.TIMESTAMP: {"type": "long", "logicalType": "timestamp-millis"},
    T.TIMESTAMP_NTZ: {"type": "long", "logicalType": "local-timestamp-millis"},
}


class UnsupportedAvroType(ValueError):
    """A declared type Avro cannot hold (the message says which and why)."""


def _nullable(schema: Any, nullable: bool) -> Any:
    return ["null", schema] if nullable else schema


def _schema(data_type: T.DataType, name: str) -> Any:
    if data_type in _PRIMITIVES:
        return _PRIMITIVES[data_type]
    if isinstance(data_type, T.Decimal):
        return {"type": "bytes", "logicalType": "decimal", "precision": data_type.precision, "scale": data_type.scale}
    if isinstance(data_type, T.Array):
        return {"type": "array", "items": _nullable(_schema(data_type.element, name), data_type.contains_null)}
    if isinstance(data_type, T.Map):
        if data_type.key != T.STRING:
            raise UnsupportedAvroType(f"{data_type.sql()}: Avro maps have STRING keys only")
        return {"type": "map", "values": _nullable(_schema(data_type.value, name), data_type.value_contains_null)}
    if isinstance(data_type, T.Struct):
        return _record(name, [(f.name, f.type, f.nullable) for f in data_type.fields])
    raise UnsupportedAvroType(f"{data_type.sql()} has no Avro form")


def _record(name: str, fields: list[tuple[str, T.DataType, bool]]) -> dict[str, Any]:
    entries = []
    for field_name, data_type, nullable in fields:
        field_schema = _nullable(_schema(data_type, f"{name}_{field_name}"), nullable)
        entry: dict[str, Any] = {"name": field_name, "type": field_schema}
        if nullable:
            entry["default"] = None
        entries.append(entry)
    return {"type": "record", "name": name, "fields": entries}


def value_schema(table: TableDef) -> dict[str, Any]:
    """The Avro record schema of the table's physical columns, in declaration order."""
    physical = [(c.name, c.type, c.nullable) for c in table.columns if not c.computed and c.type is not None]
    return {**_record(RECORD, physical), "namespace": NAMESPACE}


def unsupported(table: TableDef) -> list[tuple[str, str]]:
    """(column, why) for each physical column Avro cannot hold."""
    found = []
    for column in table.columns:
        if column.computed or column.type is None:
            continue
        try:
            _schema(column.type, f"{RECORD}_{column.name}")
        except UnsupportedAvroType as error:
            found.append((column.name, str(error)))
    return found
