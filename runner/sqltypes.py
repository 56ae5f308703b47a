"""Column types in Flink style or Spark style, parsed into pyspark DataTypes.

pyspark's type classes are plain Python, so this runs without a JVM (the deploy Lambda
validates manifests and DDL with no Spark). Flink spellings map onto Spark's:

    VARCHAR(n), CHAR(n), STRING          -> STRING
    TIMESTAMP(p), TIMESTAMP_LTZ(p)       -> TIMESTAMP (Spark's session-time-zone timestamp)
    TIMESTAMP_NTZ, TIMESTAMP WITHOUT TZ  -> TIMESTAMP_NTZ only when spelled TIMESTAMP_NTZ
    ROW<a INT, b STRING>, ROW(a INT, ..) -> STRUCT<a: INT, b: STRING>
    BYTES, VARBINARY(n)                  -> BINARY
"""

from __future__ import annotations

from pyspark.sql import types as T

from runner.sqltokens import Kind, TokenStream, tokenize

_SIMPLE: dict[str, T.DataType] = {
    "STRING": T.StringType(),
    "VARCHAR": T.StringType(),
    "CHAR": T.StringType(),
    "BOOLEAN": T.BooleanType(),
    "BOOL": T.BooleanType(),
    "TINYINT": T.ByteType(),
    "BYTE": T.ByteType(),
    "SMALLINT": T.ShortType(),
    "SHORT": T.ShortType(),
    "INT": T.IntegerType(),
    "INTEGER": T.IntegerType(),
    "BIGINT": T.LongType(),
    "LONG": T.LongType(),
    "FLOAT": T.FloatType(),
    "REAL": T.FloatType(),
    "DOUBLE": T.DoubleType(),
    "DATE": T.DateType(),
    "TIMESTAMP": T.TimestampType(),
    "TIMESTAMP_LTZ": T.TimestampType(),
    "TIMESTAMP_NTZ": T.TimestampNTZType(),
    "BINARY": T.BinaryType(),
    "VARBINARY": T.BinaryType(),
    "BYTES": T.BinaryType(),
}

_UNSUPPORTED = {
    "TIME": "Spark 4.0 has no TIME type; use TIMESTAMP or STRING",
    "MULTISET": "Spark has no MULTISET; use MAP<T, INT> or ARRAY<T>",
    "INTERVAL": "interval columns cannot be read or written by Spark sources; use BIGINT milliseconds",
    "RAW": "RAW types are Flink-specific; use BINARY",
}

SUPPORTED_TYPES_HINT = (
    "supported: STRING, VARCHAR(n), CHAR(n), BOOLEAN, TINYINT, SMALLINT, INT, BIGINT, FLOAT, DOUBLE, "
    "DECIMAL(p,s), DATE, TIMESTAMP(p), TIMESTAMP_LTZ(p), TIMESTAMP_NTZ, BINARY, BYTES, "
    "ARRAY<T>, MAP<K,V>, ROW<name T, ...> / STRUCT<name: T, ...>"
)


def parse_type(stream: TokenStream) -> T.DataType:
    """Parse one type from the stream (stops before NOT NULL / COMMENT of a column)."""
    tok = stream.peek
    if not tok.is_identifier:
        raise stream.error(f"expected a column type, found {tok.describe()}", hint=SUPPORTED_TYPES_HINT)
    name = stream.next().text.upper()
    if name in _UNSUPPORTED:
        raise stream.error(f"type {name} is not supported", tok, hint=_UNSUPPORTED[name])
    if name in ("DECIMAL", "DEC", "NUMERIC"):
        precision, scale = 10, 0
        if stream.accept_punct("("):
            precision = _int(stream, "decimal precision")
            if stream.accept_punct(","):
                scale = _int(stream, "decimal scale")
            stream.expect_punct(")")
        if not 1 <= precision <= 38 or not 0 <= scale <= precision:
            raise stream.error(f"DECIMAL({precision},{scale}) is out of range", tok, hint="1 <= p <= 38, 0 <= s <= p")
        return T.DecimalType(precision, scale)
    if name == "DOUBLE":
        stream.accept_word("PRECISION")
        return T.DoubleType()
    if name in ("ARRAY",):
        stream.expect_punct("<")
        element = parse_type(stream)
        _skip_not_null(stream)
        stream.expect_punct(">")
        return T.ArrayType(element, True)
    if name == "MAP":
        stream.expect_punct("<")
        key = parse_type(stream)
        _skip_not_null(stream)
        stream.expect_punct(",")
        value = parse_type(stream)
        _skip_not_null(stream)
        stream.expect_punct(">")
        return T.MapType(key, value, True)
    if name in ("ROW", "STRUCT"):
        closing = ">" if stream.peek.is_punct("<") else ")"
        if not stream.accept_punct("<") and not stream.accept_punct("("):
            raise stream.error(f"expected '<' after {name}")
        fields: list[T.StructField] = []
        seen: set[str] = set()
        while not stream.peek.is_punct(closing):
            field_tok = stream.expect_identifier("a field name")
            if field_tok.text.lower() in seen:
                raise stream.error(f"duplicate field {field_tok.text!r} in {name}", field_tok)
            seen.add(field_tok.text.lower())
            stream.accept_punct(":")
            ftype = parse_type(stream)
            _skip_not_null(stream)
            if stream.accept_word("COMMENT"):
                stream.expect_string("a field comment")
            fields.append(T.StructField(field_tok.text, ftype, True))
            if not stream.accept_punct(","):
                break
        stream.expect_punct(closing)
        return T.StructType(fields)
    if name == "TIMESTAMP":
        _optional_length(stream)
        if stream.accept_word("WITH"):
            stream.expect_word("LOCAL")
            stream.expect_word("TIME")
            stream.expect_word("ZONE")
        elif stream.accept_word("WITHOUT"):
            stream.expect_word("TIME")
            stream.expect_word("ZONE")
        return T.TimestampType()
    if name in _SIMPLE:
        _optional_length(stream)
        return _SIMPLE[name]
    raise stream.error(f"unknown type {tok.text!r}", tok, hint=SUPPORTED_TYPES_HINT)


def _optional_length(stream: TokenStream) -> None:
    if stream.accept_punct("("):
        _int(stream, "type length")
        stream.expect_punct(")")


def _skip_not_null(stream: TokenStream) -> None:
    if stream.peek.is_word("NOT") and stream.peek_at(1).is_word("NULL"):
        stream.next()
        stream.next()


def _int(stream: TokenStream, what: str) -> int:
    tok = stream.peek
    if tok.kind is not Kind.NUMBER or not tok.text.isdigit():
        raise stream.error(f"expected {what} (an integer), found {tok.describe()}")
    stream.next()
    return int(tok.text)


def parse_type_string(text: str) -> T.DataType:
    """Parse a standalone type string such as ``ROW<a INT, b ARRAY<STRING>>``."""
    stream = TokenStream(tokenize(text), file=None, code="DDL_INVALID_TYPE")
    result = parse_type(stream)
    if stream.peek.kind is not Kind.EOF:
        raise stream.error(f"unexpected {stream.peek.describe()} after type")
    return result


def type_sql(dtype: T.DataType) -> str:
    """Spark SQL spelling of a type, as used in messages: ``BIGINT``, ``STRUCT<id: STRING>``."""
    if isinstance(dtype, T.ArrayType):
        return f"ARRAY<{type_sql(dtype.elementType)}>"
    if isinstance(dtype, T.MapType):
        return f"MAP<{type_sql(dtype.keyType)}, {type_sql(dtype.valueType)}>"
    if isinstance(dtype, T.StructType):
        return "STRUCT<" + ", ".join(f"{f.name}: {type_sql(f.dataType)}" for f in dtype.fields) + ">"
    return dtype.simpleString().upper()
