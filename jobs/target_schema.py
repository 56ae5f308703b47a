"""Checking a query's result against the target table's declared columns.

As in the Flink original, the target DDL declares the query's columns followed by the
six metadata columns. Columns are matched by name (case-insensitive, as Spark resolves
them); a type that widens safely (INT -> BIGINT, FLOAT -> DOUBLE, ...) is cast, anything
else is a mismatch. Every mismatched column is reported, not just the first.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from jobs.schema import spark_type, type_sql
from runner.core.errors import Problem, UserError
from runner.core.tables import METADATA_COLUMNS, TableDef

_INTEGRAL_RANK = {T.ByteType: 1, T.ShortType: 2, T.IntegerType: 3, T.LongType: 4}
METADATA_HINT = "end the target's column list with: " + ", ".join(
    f"{name} {dtype.sql()}" for name, dtype in METADATA_COLUMNS
)


def widens(source: T.DataType, target: T.DataType) -> bool:
    """True when every ``source`` value fits ``target`` unchanged."""
    if _same(source, target) or isinstance(source, T.NullType):
        return True
    s_rank, t_rank = _INTEGRAL_RANK.get(type(source)), _INTEGRAL_RANK.get(type(target))
    if s_rank and t_rank:
        return s_rank <= t_rank
    if s_rank and isinstance(target, T.DoubleType):
        return s_rank <= 3
    if s_rank and isinstance(target, T.DecimalType):
        digits = {1: 3, 2: 5, 3: 10, 4: 19}[s_rank]
        return target.precision - target.scale >= digits
    if isinstance(source, T.FloatType) and isinstance(target, T.DoubleType):
        return True
    if isinstance(source, T.DecimalType) and isinstance(target, T.DecimalType):
        return target.scale >= source.scale and target.precision - target.scale >= source.precision - source.scale
    return False


def _same(a: T.DataType, b: T.DataType) -> bool:
    """Type equality ignoring nullability and field-name case."""
    if isinstance(a, T.StructType) and isinstance(b, T.StructType):
        return len(a.fields) == len(b.fields) and all(
            x.name.lower() == y.name.lower() and _same(x.dataType, y.dataType)
            for x, y in zip(a.fields, b.fields, strict=True)
        )
    if isinstance(a, T.ArrayType) and isinstance(b, T.ArrayType):
        return _same(a.elementType, b.elementType)
    if isinstance(a, T.MapType) and isinstance(b, T.MapType):
        return _same(a.keyType, b.keyType) and _same(a.valueType, b.valueType)
    return a == b


def conform(result: DataFrame, target: TableDef, *, file: str | None, field: str) -> DataFrame:
    """The query result reordered and cast to the target's query columns.

    Raises TARGET_SCHEMA_MISMATCH with one problem per mismatched column.
    """
    problems: list[Problem] = []

    def mismatch(reason: str, hint: str = "") -> None:
        problems.append(Problem.of("TARGET_SCHEMA_MISMATCH", file=file, field=field, reason=reason, hint=hint))

    meta_names = {name for name, _ in METADATA_COLUMNS}
    declared = [c for c in target.columns if not c.computed and c.type is not None]
    declared_by_name = {c.name.lower(): c for c in declared}
    for name, dtype in METADATA_COLUMNS:
        column = declared_by_name.get(name)
        if column is None:
            mismatch(f"target {target.name} does not declare metadata column {name} {dtype.sql()}", METADATA_HINT)
        elif not _same(spark_type(column.type), spark_type(dtype)):
            mismatch(
                f"target {target.name} declares {name} as {column.type.sql()}, expected {dtype.sql()}",
                f"declare {name} {dtype.sql()}",
            )
    wanted = [c for c in declared if c.name.lower() not in meta_names]
    produced = {f.name.lower(): f for f in result.schema.fields}
    for field_ in result.schema.fields:
        if field_.name.lower() in meta_names:
            mismatch(
                f"the query produces {field_.name}, a name reserved for metadata columns",
                "rename that column in the query",
            )
        elif field_.name.lower() not in declared_by_name:
            mismatch(
                f"query column '{field_.name}' ({type_sql(field_.dataType)}) is not declared in target {target.name}",
                f"declare it in {target.file or 'the target DDL'} or drop it from the query",
            )
    if len(produced) != len(result.schema.fields):
        mismatch("the query produces duplicate column names", "give every output column its own alias")
    selected = []
    for column in wanted:
        got = produced.get(column.name.lower())
        declared_type = spark_type(column.type)
        if got is None:
            mismatch(
                f"target column '{column.name}' ({column.type.sql()}) is not produced by the query",
                f"add it to the SELECT list, e.g. ... AS {column.name}",
            )
        elif not widens(got.dataType, declared_type):
            mismatch(
                f"column '{column.name}': the query produces {type_sql(got.dataType)}, target {target.name} "
                f"declares {column.type.sql()}",
                f"CAST(... AS {column.type.sql()}) in the query, or change the DDL",
            )
        else:
            expr = F.col(f"`{got.name}`")
            if not _same(got.dataType, declared_type):
                expr = expr.cast(declared_type)
            selected.append(expr.alias(column.name))
    if problems:
        raise UserError(problems)
    return result.select(*selected)
