"""Integers read as a wider type than declared, narrowed back: a record holding one that does not fit is malformed.

Spark's JSON parser reads a TINYINT with Jackson's ``getByteValue``, which takes -128 to 255 and gives 128 to
255 wrapped round (200 reads as -56). A TINYINT is therefore read from JSON as a SMALLINT (``json_type``), whose
parser refuses all but 16-bit integers, and narrowed here. Avro has no type narrower than ``int``: ``from_avro``
reads TINYINT and SMALLINT columns as INT, and a CAST to the declared type would fail the job (Spark 4 runs in
ANSI mode) on a value that does not fit.

``narrowed`` gives a value as its declared type and the condition that an integer in it, at any depth (a ROW's
field, an ARRAY's element, a MAP's value), does not fit that type. The record is then malformed, and the value is
NULL, so that the reason names the field as it names a field of the wrong type. A type read as declared gives
no condition, and its value is used as read: a table without TINYINT (or, in Avro, SMALLINT) has the plan it
would have without this module.
"""

from __future__ import annotations

import functools
import operator

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

_RANGES: dict[T.DataType, tuple[int, int]] = {
    T.ByteType(): (-128, 127),
    T.ShortType(): (-32768, 32767),
}


def json_type(dtype: T.DataType) -> T.DataType:
    """The type Spark's JSON parser is asked for to read ``dtype``: every TINYINT in it a SMALLINT."""
    return _widened(dtype, {T.ByteType(): T.ShortType()})


def avro_type(dtype: T.DataType) -> T.DataType:
    """The type ``from_avro`` gives a value of ``dtype`` as (``runner/core/avro.py``): every TINYINT and
    SMALLINT in it an INT."""
    return _widened(dtype, {T.ByteType(): T.IntegerType(), T.ShortType(): T.IntegerType()})


def _widened(dtype: T.DataType, wider: dict[T.DataType, T.DataType]) -> T.DataType:
    if isinstance(dtype, T.StructType):
        return T.StructType([T.StructField(f.name, _widened(f.dataType, wider), f.nullable, f.metadata) for f in dtype])
    if isinstance(dtype, T.ArrayType):
        return T.ArrayType(_widened(dtype.elementType, wider), dtype.containsNull)
    if isinstance(dtype, T.MapType):  # keys are text: JSON's, and Avro's (runner/core/avro.py) are STRING only
        return T.MapType(dtype.keyType, _widened(dtype.valueType, wider), dtype.valueContainsNull)
    return wider.get(dtype, dtype)


def narrowed(value: Column, wide: T.DataType, declared: T.DataType) -> tuple[Column, Column | None]:
    """``value``, read as ``wide``, as ``declared``: NULL where an integer in it does not fit its declared type;
    and the condition that one does not (never NULL). ``(value, None)`` when no integer in ``wide`` is wider
    than declared: the value is used as read."""
    if not _wider(wide, declared):
        return value, None
    misfit = F.coalesce(_misfit(value, wide, declared), F.lit(False))
    # try_cast, not CAST: should Spark evaluate the cast ahead of the condition, a CAST of a value that does not
    # fit would fail the job (ANSI mode).
    return F.when(~misfit, value.try_cast(declared)), misfit


def any_of(conditions: list[Column | None]) -> Column | None:
    """The conditions (``narrowed``'s) OR-ed together; None when there is none."""
    present = [c for c in conditions if c is not None]
    return functools.reduce(operator.or_, present) if present else None


def _wider(wide: T.DataType, declared: T.DataType) -> bool:
    """Whether an integer in ``wide`` is of a wider type than declared."""
    if isinstance(declared, T.StructType) and isinstance(wide, T.StructType):
        return any(_wider(wide[f.name].dataType, f.dataType) for f in declared)
    if isinstance(declared, T.ArrayType) and isinstance(wide, T.ArrayType):
        return _wider(wide.elementType, declared.elementType)
    if isinstance(declared, T.MapType) and isinstance(wide, T.MapType):
        return _wider(wide.valueType, declared.valueType)
    return declared in _RANGES and wide != declared


def _misfit(value: Column, wide: T.DataType, declared: T.DataType) -> Column:
    """TRUE where an integer in ``value`` is outside its declared type's range (NULL where that is unknown: a
    NULL in it), for a ``wide`` that holds one wider than declared."""
    if isinstance(declared, T.StructType) and isinstance(wide, T.StructType):
        fields = [(wide[f.name].dataType, f) for f in declared if _wider(wide[f.name].dataType, f.dataType)]
        return functools.reduce(operator.or_, [_misfit(value.getField(f.name), w, f.dataType) for w, f in fields])
    if isinstance(declared, T.ArrayType) and isinstance(wide, T.ArrayType):
        return F.exists(value, lambda e: _misfit(e, wide.elementType, declared.elementType))
    if isinstance(declared, T.MapType) and isinstance(wide, T.MapType):
        return F.exists(F.map_values(value), lambda e: _misfit(e, wide.valueType, declared.valueType))
    low, high = _RANGES[declared]
    return ~value.between(low, high)
