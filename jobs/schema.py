"""The core's column types as Spark types, and Spark types spelled as messages spell them."""

from __future__ import annotations

from pyspark.sql import types as S

from runner.core import datatypes as T
from runner.core.tables import TableDef

_PRIMITIVES: dict[str, S.DataType] = {
    "string": S.StringType(),
    "boolean": S.BooleanType(),
    "byte": S.ByteType(),
    "short": S.ShortType(),
    "integer": S.IntegerType(),
    "long": S.LongType(),
    "float": S.FloatType(),
    "double": S.DoubleType(),
    "date": S.DateType(),
    "timestamp": S.TimestampType(),
    "timestamp_ntz": S.TimestampNTZType(),
    "binary": S.BinaryType(),
}


def spark_type(dtype: T.DataType) -> S.DataType:
    """The Spark type of a declared column type."""
    if isinstance(dtype, T.Primitive):
        if dtype.name not in _PRIMITIVES:
            raise ValueError(f"no Spark type for {dtype.sql()}")
        return _PRIMITIVES[dtype.name]
    if isinstance(dtype, T.Decimal):
        return S.DecimalType(dtype.precision, dtype.scale)
    if isinstance(dtype, T.Array):
        return S.ArrayType(spark_type(dtype.element), dtype.contains_null)
    if isinstance(dtype, T.Map):
        return S.MapType(spark_type(dtype.key), spark_type(dtype.value), dtype.value_contains_null)
    if isinstance(dtype, T.Struct):
        return S.StructType([S.StructField(f.name, spark_type(f.type), f.nullable) for f in dtype.fields])
    raise ValueError(f"no Spark type for {dtype!r}")


def spark_schema(table: TableDef) -> S.StructType:
    """The table's physical columns (computed columns excluded) as a Spark schema."""
    schema = spark_type(table.physical_schema)
    assert isinstance(schema, S.StructType)
    return schema


def type_sql(dtype: S.DataType) -> str:
    """How messages spell a Spark type: ``BIGINT``, ``STRUCT<id: STRING>``."""
    return T.from_json_value(dtype.jsonValue()).sql()
