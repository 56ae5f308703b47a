"""Binding a query to declared tables, using Spark's own parser.

Spark's parser returns every table reference (subqueries and CTEs included) with its
multipart name and exact offsets in the SQL text. Each reference to a declared table is
replaced by a temporary view registered for it, so names such as
`kafka`.`some-kafka-input-table` work exactly as written. Spark's analysis errors are
translated back into the user's names and positions.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass

from pyspark.errors import AnalysisException, ParseException
from pyspark.sql import DataFrame, SparkSession

from jobs.jvm import java_class, java_session, jvm_of, scala_list
from runner.core.catalog import Catalog
from runner.core.errors import Problem, UserError
from runner.core.lookup import is_lookup
from runner.core.sqltokens import Kind, tokenize
from runner.core.tables import TableDef


@dataclass(frozen=True)
class TableRef:
    parts: tuple[str, ...]
    start: int  # offset of the first character in the SQL text
    stop: int  # offset of the last character (inclusive)


@dataclass(frozen=True)
class BoundSql:
    text: str  # SQL with declared tables replaced by their views
    tables: dict[str, TableDef]  # view name -> table
    replacements: tuple[tuple[int, int, int], ...]  # (original start, original length, new length)

    def original_offset(self, offset: int) -> int:
        """Map an offset in the rewritten text back to the user's SQL."""
        shift = 0
        for original_start, old_len, new_len in self.replacements:
            new_start = original_start + shift
            if offset < new_start:
                return offset - shift
            if offset < new_start + new_len:
                return original_start
            shift += new_len - old_len
        return offset - shift


@dataclass(frozen=True)
class Location:
    """Where the query lives, for error messages."""

    file: str | None
    field: str
    line: int | None
    text: str | None = None  # the user's SQL, to turn offsets into line and position


def view_name(table: TableDef) -> str:
    """A stable, SQL-safe temporary view name for a declared table."""
    slug = re.sub(r"[^a-z0-9]+", "_", "_".join(table.key)).strip("_")[:40]
    digest = hashlib.sha1("\x00".join(table.key).encode()).hexdigest()[:8]
    return f"__t_{slug}_{digest}"


SUBQUERY_CLASS = "org.apache.spark.sql.catalyst.expressions.SubqueryExpression"


def table_references(spark: SparkSession, sql: str, where: Location) -> list[TableRef]:
    """Every table reference in ``sql`` that is not a CTE name, in text order."""
    jvm = jvm_of(spark)
    try:
        plan = java_session(spark).sessionState().sqlParser().parsePlan(sql)
    except ParseException as error:
        raise UserError(_problem_from_spark(error, "SQL_SYNTAX_ERROR", where, None)) from None
    subquery = java_class(jvm, "java.lang.Class").forName(SUBQUERY_CLASS)
    refs: dict[tuple[int, int], TableRef] = {}
    ctes: set[str] = set()

    def visit_plan(node) -> None:  # py4j object
        kind = node.getClass().getSimpleName()
        if kind == "UnresolvedRelation":
            origin = node.origin()
            parts = tuple(scala_list(node.multipartIdentifier()))
            start, stop = origin.startIndex().get(), origin.stopIndex().get()
            refs[(start, stop)] = TableRef(parts, start, stop)
        elif kind == "UnresolvedWith":
            for pair in scala_list(node.cteRelations()):
                ctes.add(pair._1().lower())
        for child in scala_list(node.children()) + scala_list(node.innerChildren()):
            visit_plan(child)
        for expression in scala_list(node.expressions()):
            visit_expression(expression)

    def visit_expression(expression) -> None:  # py4j object
        if subquery.isInstance(expression):
            visit_plan(expression.plan())
        for child in scala_list(expression.children()):
            visit_expression(child)

    visit_plan(plan)
    return sorted(
        (r for r in refs.values() if not (len(r.parts) == 1 and r.parts[0].lower() in ctes)), key=lambda r: r.start
    )


@dataclass(frozen=True)
class AsOf:
    """A ``FOR SYSTEM_TIME AS OF <column>`` clause (Flink's lookup join) in a query's text."""

    start: int  # offset of FOR
    end: int  # offset just past the column
    column: str  # the column named (its last part)


def as_of_clauses(sql: str, where: Location) -> list[AsOf]:
    """Every ``FOR SYSTEM_TIME AS OF <column>`` in ``sql`` (none when the text does not tokenize: Spark's parser
    then says what is wrong)."""
    try:
        tokens = tokenize(sql)
    except UserError:
        return []
    found: list[AsOf] = []
    for i in range(len(tokens) - 4):
        if not (
            tokens[i].is_word("FOR")
            and tokens[i + 1].is_word("SYSTEM_TIME")
            and tokens[i + 2].is_word("AS")
            and tokens[i + 3].is_word("OF")
        ):
            continue
        j, parts = i + 4, []
        while tokens[j].is_identifier:
            parts.append(tokens[j].text)
            if not tokens[j + 1].is_punct("."):
                break
            j += 2
        if not parts or tokens[j].kind is Kind.EOF or tokens[min(j + 1, len(tokens) - 1)].is_punct("("):
            raise UserError.of(
                "LOOKUP_AS_OF_SYNTAX",
                file=where.file,
                field=where.field,
                line=where.line,
                at=_line_pos(sql, tokens[i].start),
                part=where.field,
            )
        found.append(AsOf(tokens[i].start, tokens[j].end, parts[-1]))
    return found


def _blank(sql: str, clauses: list[AsOf]) -> str:
    """``sql`` with each clause blanked out (spaces, newlines kept): every other offset stays where it was."""
    for clause in clauses:
        span = "".join("\n" if c == "\n" else " " for c in sql[clause.start : clause.end])
        sql = sql[: clause.start] + span + sql[clause.end :]
    return sql


def _check_as_of(sql: str, clauses: list[AsOf], refs: list[TableRef], catalog: Catalog, where: Location) -> None:
    """Each clause follows a lookup table and names no stream's event-time column."""
    at = {"file": where.file, "field": where.field, "line": where.line}
    event_time = {
        t.watermark.column.lower(): t.name
        for t in (catalog.lookup(r.parts) for r in refs)
        if t is not None and t.watermark is not None and not is_lookup(t)
    }
    for clause in clauses:
        before = [r for r in refs if r.stop < clause.start and not sql[r.stop + 1 : clause.start].strip()]
        if not before:
            raise UserError.of("LOOKUP_AS_OF_MISPLACED", at=_line_pos(sql, clause.start), part=where.field, **at)
        table = catalog.lookup(before[-1].parts)
        assert table is not None
        if not is_lookup(table):
            raise UserError.of("LOOKUP_AS_OF_NOT_LOOKUP", table=table.name, connector=table.connector, **at)
        if clause.column.lower() in event_time:
            raise UserError.of(
                "LOOKUP_AS_OF_EVENT_TIME", column=clause.column, stream=event_time[clause.column.lower()], **at
            )


def bind(spark: SparkSession, sql: str, catalog: Catalog, where: Location) -> BoundSql:
    """Replace declared table references by view names; unknown tables are user errors. A lookup join's
    ``FOR SYSTEM_TIME AS OF <column>`` is checked and left out: every micro-batch joins the lookup table's
    current snapshot (``jobs/lookup/``), which is what Flink's processing-time lookup join reads."""
    clauses = as_of_clauses(sql, where)
    sql = _blank(sql, clauses)
    refs = table_references(spark, sql, where)
    unknown = [r for r in refs if catalog.lookup(r.parts) is None]
    if unknown:
        declared = ", ".join(catalog.names) or "none"
        raise UserError(
            [
                Problem.of(
                    "UNKNOWN_TABLE",
                    file=where.file,
                    field=where.field,
                    line=where.line,
                    reason=f"table {'.'.join(f'`{p}`' for p in r.parts)} is not declared "
                    f"({_line_pos(sql, r.start)} of the {where.field})",
                    hint=f"declare it in manifests/tables/*.sql; declared tables: {declared}",
                )
                for r in unknown
            ]
        )
    pieces: list[str] = []
    replacements: list[tuple[int, int, int]] = []
    tables: dict[str, TableDef] = {}
    cursor = 0
    for ref in refs:
        table = catalog.lookup(ref.parts)
        assert table is not None
        view = view_name(table)
        tables[view] = table
        pieces.append(sql[cursor : ref.start])
        replacement = f"`{view}`"
        pieces.append(replacement)
        replacements.append((ref.start, ref.stop + 1 - ref.start, len(replacement)))
        cursor = ref.stop + 1
    pieces.append(sql[cursor:])
    _check_as_of(sql, clauses, refs, catalog, where)
    return BoundSql("".join(pieces), tables, tuple(replacements))


def _line_pos(sql: str, offset: int) -> str:
    line = sql.count("\n", 0, offset) + 1
    column = offset - (sql.rfind("\n", 0, offset) + 1)
    return f"line {line}, position {column + 1}"


_CODES = {
    "TABLE_OR_VIEW_NOT_FOUND": "UNKNOWN_TABLE",
    "UNRESOLVED_COLUMN": "UNKNOWN_COLUMN",
    "UNRESOLVED_FIELD": "UNKNOWN_COLUMN",
    "UNRESOLVED_MAP_KEY": "UNKNOWN_COLUMN",
    "UNRESOLVED_ROUTINE": "UNKNOWN_FUNCTION",
    "DATATYPE_MISMATCH": "SQL_TYPE_ERROR",
    "CAST_WITHOUT_SUGGESTION": "SQL_TYPE_ERROR",
    "PARSE_SYNTAX_ERROR": "SQL_SYNTAX_ERROR",
    "AMBIGUOUS_REFERENCE": "AMBIGUOUS_COLUMN",
    "MISSING_AGGREGATION": "SQL_INVALID_AGGREGATION",
}


def first_line(message: str) -> str:
    """The first line of a Spark error message, without its SQLSTATE."""
    return re.sub(r"\s*SQLSTATE: \w+", "", message.split("\n")[0]).strip()


def _problem_from_spark(
    error: AnalysisException, default_code: str, where: Location, bound: BoundSql | None
) -> Problem:
    condition = error.getCondition() or ""
    code = _CODES.get(condition.split(".")[0], default_code)
    message = first_line(error.getMessage() or str(error))
    message = re.sub(r"^\[[A-Z_.]+\]\s*", "", message)
    if bound:
        for view, table in bound.tables.items():
            message = message.replace(f"`{view}`", table.name).replace(view, table.name)
    position = ""
    context = error.getQueryContext()
    if context and where.text:
        start = context[0].startIndex()
        if start >= 0:
            original = bound.original_offset(start) if bound else start
            position = f" ({_line_pos(where.text, original)} of the {where.field})"
    # Spark's own message says what is wrong; the templates of the codes it maps to take it as the reason.
    return Problem.of(
        code, file=where.file, field=where.field, line=where.line, reason=message.strip() + position, hint=""
    )


def analysed(run: Callable[[], DataFrame], where: Location, bound: BoundSql | None = None) -> DataFrame:
    """Run ``run`` (which builds a DataFrame) and turn Spark analysis errors into user errors."""
    try:
        frame = run()
        frame.schema  # noqa: B018 - forces analysis
        return frame
    except AnalysisException as error:
        raise UserError(_problem_from_spark(error, "SQL_ANALYSIS_ERROR", where, bound)) from None
