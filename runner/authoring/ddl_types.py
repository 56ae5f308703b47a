"""Column types in Flink style or Spark style, parsed into the core's type model.

No Spark is needed to read DDL. Flink spellings map onto Spark's:

    VARCHAR(n), CHAR(n), STRING          -> STRING
    TIMESTAMP(p), TIMESTAMP_LTZ(p)       -> TIMESTAMP (Spark's session-time-zone timestamp)
    TIMESTAMP_NTZ, TIMESTAMP WITHOUT TZ  -> TIMESTAMP_NTZ only when spelled TIMESTAMP_NTZ
    ROW<a INT, b STRING>, ROW(a INT, ..) -> STRUCT<a: INT, b: STRING>
    BYTES, VARBINARY(n)                  -> BINARY
"""

from __future__ import annotations

from runner.core import datatypes as T
from runner.core.sqltokens import Kind, TokenStream, tokenize

_SIMPLE: dict[str, T.DataType] = {
    "STRING": T.STRING,
    "VARCHAR": T.STRING,
    "CHAR": T.STRING,
    "BOOLEAN": T.BOOLEAN,
    "BOOL": T.BOOLEAN,
    "TINYINT": T.TINYINT,
    "BYTE": T.TINYINT,
    "SMALLINT": T.SMALLINT,
    "SHORT": T.SMALLINT,
    "INT": T.INT,
    "INTEGER": T.INT,
    "BIGINT": T.BIGINT,
    "LONG": T.BIGINT,
    "FLOAT": T.FLOAT,
    "REAL": T.FLOAT,
    "DOUBLE": T.DOUBLE,
    "DATE": T.DATE,
    "TIMESTAMP": T.TIMESTAMP,
    "TIMESTAMP_LTZ": T.TIMESTAMP,
    "TIMESTAMP_NTZ": T.TIMESTAMP_NTZ,
    "BINARY": T.BINARY,
    "VARBINARY": T.BINARY,
    "BYTES": T.BINARY,
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
        return T.Decimal(precision, scale)
    if name == "DOUBLE":
        stream.accept_word("PRECISION")
        return T.DOUBLE
    if name in ("ARRAY",):
        stream.expect_punct("<")
        element = parse_type(stream)
        _skip_not_null(stream)
        stream.expect_punct(">")
        return T.Array(element)
    if name == "MAP":
        stream.expect_punct("<")
        key = parse_type(stream)
        _skip_not_null(stream)
        stream.expect_punct(",")
        value = parse_type(stream)
        _skip_not_null(stream)
        stream.expect_punct(">")
        return T.Map(key, value)
    if name in ("ROW", "STRUCT"):
        closing = ">" if stream.peek.is_punct("<") else ")"
        if not stream.accept_punct("<") and not stream.accept_punct("("):
            raise stream.error(f"expected '<' after {name}")
        fields: list[T.Field] = []
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
            fields.append(T.Field(field_tok.text, ftype))
            if not stream.accept_punct(","):
                break
        stream.expect_punct(closing)
        return T.Struct(tuple(fields))
    if name == "TIMESTAMP":
        _optional_length(stream)
        if stream.accept_word("WITH"):
            stream.expect_word("LOCAL")
            stream.expect_word("TIME")
            stream.expect_word("ZONE")
        elif stream.accept_word("WITHOUT"):
            stream.expect_word("TIME")
            stream.expect_word("ZONE")
        return T.TIMESTAMP
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
