"""Table DDL: ``CREATE TABLE name (columns, WATERMARK, PRIMARY KEY) WITH (options)``.

The streaming-SQL convention that Flink, RisingWave and Arroyo share. A file holds one
or more statements separated by ';'. Supported inside the parentheses:

    col TYPE [NOT NULL] [COMMENT '...']
    col AS <Spark SQL expression> [COMMENT '...']          -- computed column
    WATERMARK FOR col AS col [- INTERVAL 'n' UNIT]
    PRIMARY KEY (a, b) NOT ENFORCED
and after them ``PARTITIONED BY (a, b)`` and ``WITH ('key' = 'value', ...)``.
"""

from __future__ import annotations

import re
from pathlib import Path

from runner.authoring.ddl_types import parse_type
from runner.core import avro, connectors, lookup
from runner.core import datatypes as T
from runner.core.errors import Problem, ProblemCollector, UserError
from runner.core.sqltokens import Kind, Token, TokenStream, split_statements, tokenize
from runner.core.tables import Column, TableDef, Watermark

_UNITS = {
    "MILLISECOND": "milliseconds",
    "SECOND": "seconds",
    "MINUTE": "minutes",
    "HOUR": "hours",
    "DAY": "days",
}


def parse_ddl(source: str, *, file: str | None = None) -> list[TableDef]:
    """Every CREATE TABLE in a DDL file; all problems in the file are reported together."""
    collector = ProblemCollector()
    tables: list[TableDef] = []
    try:
        statements = split_statements(source, file=file)
    except UserError as error:
        raise UserError([p.located(file=file) for p in error.problems]) from None
    for text, first_line in statements:
        try:
            tables.append(_parse_create_table(text, first_line, file))
        except UserError as error:
            collector.capture(error)
    for table in tables:
        collector.extend(check_table(table))
    collector.raise_if_any()
    return tables


def parse_ddl_file(path: Path, *, display: str | None = None) -> list[TableDef]:
    return parse_ddl(path.read_text(encoding="utf-8"), file=display or str(path))


def _parse_create_table(text: str, first_line: int, file: str | None) -> TableDef:
    stream = TokenStream(tokenize(text, file=file, first_line=first_line), file=file, code="DDL_SYNTAX_ERROR")
    start = stream.peek
    if not start.is_word("CREATE"):
        raise stream.error(
            f"expected CREATE TABLE, found {start.describe()}",
            hint="a DDL file holds only CREATE TABLE statements separated by ';'",
        )
    stream.next()
    stream.accept_word("TEMPORARY")
    stream.expect_word("TABLE")
    if stream.accept_word("IF"):
        stream.expect_word("NOT")
        stream.expect_word("EXISTS")
    parts = [stream.expect_identifier("a table name").text]
    while stream.accept_punct("."):
        parts.append(stream.expect_identifier("a table name part after '.'").text)
    if len(parts) > 3:
        raise stream.error(f"table name {'.'.join(parts)} has more than 3 parts", start)
    stream.expect_punct("(")
    columns: list[Column] = []
    watermark: Watermark | None = None
    primary_key: tuple[str, ...] = ()
    seen: set[str] = set()
    while True:
        tok = stream.peek
        if tok.is_word("WATERMARK") and stream.peek_at(1).is_word("FOR"):
            if watermark:
                raise stream.error("a table has at most one WATERMARK", tok)
            watermark = _parse_watermark(stream, text)
        elif tok.is_word("PRIMARY") and stream.peek_at(1).is_word("KEY"):
            if primary_key:
                raise stream.error("a table has at most one PRIMARY KEY", tok)
            stream.next()
            stream.next()
            primary_key = tuple(_identifier_list(stream, "a primary key column"))
            if stream.accept_word("NOT"):
                stream.expect_word("ENFORCED")
        elif tok.is_word("CONSTRAINT"):
            stream.next()
            stream.expect_identifier("a constraint name")
            continue
        else:
            column = _parse_column(stream, text)
            if column.name.lower() in seen:
                raise stream.error(f"column {column.name!r} is declared twice", tok)
            seen.add(column.name.lower())
            columns.append(column)
        if stream.accept_punct(")"):
            break
        if not stream.accept_punct(","):
            raise stream.error(f"expected ',' or ')' after a column, found {stream.peek.describe()}")
    partitioned_by: tuple[str, ...] = ()
    if stream.accept_word("PARTITIONED"):
        stream.expect_word("BY")
        partitioned_by = tuple(_identifier_list(stream, "a partition column"))
    options: dict[str, str] = {}
    options_lines: dict[str, int] = {}
    if stream.accept_word("WITH"):
        stream.expect_punct("(")
        while not stream.peek.is_punct(")"):
            key_tok = stream.expect_string("an option name")
            stream.expect_punct("=")
            value_tok = stream.expect_string("an option value")
            if key_tok.text in options:
                raise stream.error(f"option {key_tok.text!r} is set twice", key_tok)
            options[key_tok.text] = value_tok.text
            options_lines[key_tok.text] = key_tok.line
            if not stream.accept_punct(","):
                break
        stream.expect_punct(")")
    if stream.peek.kind is not Kind.EOF:
        raise stream.error(f"unexpected {stream.peek.describe()} after the table definition")
    return TableDef(
        parts=tuple(parts),
        columns=tuple(columns),
        options=options,
        watermark=watermark,
        primary_key=primary_key,
        partitioned_by=partitioned_by,
        file=file,
        line=start.line,
        options_lines=options_lines,
    )


def _parse_column(stream: TokenStream, text: str) -> Column:
    name_tok = stream.expect_identifier("a column name")
    if stream.accept_word("AS"):
        expression = _expression_until_comma(stream, text, "a computed column expression")
        comment = _optional_comment(stream)
        return Column(name=name_tok.text, expression=expression, comment=comment)
    dtype = parse_type(stream)
    nullable = True
    if stream.peek.is_word("METADATA"):
        raise stream.error("METADATA columns are not supported", hint="declare the value as a regular column")
    if stream.accept_word("NOT"):
        stream.expect_word("NULL")
        nullable = False
    elif stream.accept_word("NULL"):
        nullable = True
    comment = _optional_comment(stream)
    return Column(name=name_tok.text, type=dtype, nullable=nullable, comment=comment)


def _optional_comment(stream: TokenStream) -> str | None:
    if stream.accept_word("COMMENT"):
        return stream.expect_string("a comment").text
    return None


def _identifier_list(stream: TokenStream, what: str) -> list[str]:
    stream.expect_punct("(")
    names = [stream.expect_identifier(what).text]
    while stream.accept_punct(","):
        names.append(stream.expect_identifier(what).text)
    stream.expect_punct(")")
    return names


def _expression_until_comma(stream: TokenStream, text: str, what: str) -> str:
    """Raw source text of an expression, up to the ',' or ')' that closes it."""
    depth = 0
    first: Token | None = None
    last: Token | None = None
    while True:
        tok = stream.peek
        if tok.kind is Kind.EOF:
            raise stream.error(f"unterminated {what}")
        if depth == 0 and (tok.is_punct(",") or tok.is_punct(")") or tok.is_word("COMMENT")):
            break
        if tok.is_punct("("):
            depth += 1
        elif tok.is_punct(")"):
            depth -= 1
        first = first or tok
        last = tok
        stream.next()
    if first is None or last is None:
        raise stream.error(f"expected {what}")
    return text[first.start : last.end]


def _parse_watermark(stream: TokenStream, text: str) -> Watermark:
    wm_tok = stream.next()
    stream.expect_word("FOR")
    column = stream.expect_identifier("the watermark column").text
    stream.expect_word("AS")
    expr_start = stream.peek
    expression = _expression_until_comma(stream, text, "watermark expression")
    delay = _watermark_delay(column, expression)
    if delay is None:
        raise UserError.of(
            "DDL_INVALID_WATERMARK",
            file=stream.file,
            line=expr_start.line or wm_tok.line,
            reason=f"watermark expression {expression!r} is not supported",
            hint=f"write WATERMARK FOR {column} AS {column} - INTERVAL '5' SECOND (or AS {column} for no delay)",
        )
    return Watermark(column=column, delay=delay)


_WM_RE = re.compile(
    r"^\s*`?(?P<col>[^`\s]+)`?\s*(?:-\s*INTERVAL\s*'(?P<n>\d+)(?:\s+(?P<u1>[A-Za-z]+))?'\s*(?P<u2>[A-Za-z]+)?)?\s*$",
    re.IGNORECASE,
)


def _watermark_delay(column: str, expression: str) -> str | None:
    match = _WM_RE.match(expression)
    if not match or match.group("col").lower() != column.lower():
        return None
    if match.group("n") is None:
        return "0 seconds"
    unit = (match.group("u1") or match.group("u2") or "").upper().rstrip("S")
    if match.group("u1") and match.group("u2"):
        return None
    if unit not in _UNITS:
        return None
    return f"{int(match.group('n'))} {_UNITS[unit]}"


def check_table(table: TableDef) -> list[Problem]:
    """Cross-checks inside one table: keys, watermark and partition columns, connector options."""
    problems: list[Problem] = []
    where = {"file": table.file, "line": table.line}

    def declared(name: str) -> Column | None:
        return table.column(name)

    if not table.columns:
        problems.append(Problem.of("DDL_NO_COLUMNS", table=table.name, **where))
    if table.watermark:
        column = declared(table.watermark.column)
        if column is None:
            problems.append(
                Problem.of(
                    "DDL_UNKNOWN_COLUMN", table=table.name, kind="watermark", column=table.watermark.column, **where
                )
            )
        elif column.type is not None and column.type not in T.TIMESTAMPS:
            problems.append(
                Problem.of(
                    "DDL_INVALID_WATERMARK",
                    table=table.name,
                    reason=f"table {table.name}: watermark column '{column.name}' must be a TIMESTAMP",
                    hint=f"declare {column.name} as TIMESTAMP(3)",
                    **where,
                )
            )
    for kind, names in (("primary key", table.primary_key), ("partition", table.partitioned_by)):
        for name in names:
            if declared(name) is None:
                problems.append(Problem.of("DDL_UNKNOWN_COLUMN", table=table.name, kind=kind, column=name, **where))
    problems.extend(
        connectors.problems(
            table.options,
            [c.name for c in table.columns],
            table.primary_key,
            file=table.file,
            line=table.line,
            table=table.name,
        )
    )
    if table.watermark is not None and lookup.lookup_cache(table.options) is not None:
        problems.append(
            Problem.of(
                "DDL_INVALID_WATERMARK",
                table=table.name,
                reason=f"table {table.name} is a lookup table: it has no event time, so no WATERMARK",
                hint="drop the WATERMARK (a lookup table is joined as of processing time), or declare the table as "
                "a stream (no 'lookup.cache')",
                **where,
            )
        )
    connector = connectors.find(table.options.get("connector"))
    if connector is not None and "avro" in connector.formats and connector.record_format(table.options) == "avro":
        for column, why in avro.unsupported(table):
            problems.append(
                Problem.of(
                    "DDL_INVALID_TYPE",
                    reason=f"table {table.name}: column '{column}' cannot be an Avro field: {why}",
                    hint="declare it with a type Avro holds (docs/connectors.md: 'format' = 'avro'), or use 'json'",
                    **where,
                )
            )
    return problems
