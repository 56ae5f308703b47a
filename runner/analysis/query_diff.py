"""Did a query change, and can its state survive the change? Judged by Spark itself.

Both queries are analysed over the same declared tables (one relation per unchanged
table, so Spark can compare them):

- meaning: ``DataFrame.sameSemantics`` — whitespace, comments and keyword case are not
  changes; an added filter or a changed window is;
- output: the result schema (a renamed column means the sink receives something else);
- state: Spark restarts a query from a checkpoint only if its stateful operators
  (aggregations, deduplication, joins, limits, arbitrary state) keep their kind, order,
  keys and aggregate functions, and it reads the same sources. Each stateful operator of
  the analysed plan is described in terms of the source columns its keys come from, and
  the two lists are compared. Operators whose state the runner cannot judge (user state
  functions) make any change incompatible: when unsure, incompatible.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from jobs.build import BuiltQuery, build_query
from jobs.jvm import scala_list
from runner.core.catalog import Catalog
from runner.core.manifest import Manifest
from runner.core.querydiff import QueryDiff
from runner.core.tables import TableDef

_KEYED = {"Deduplicate", "DeduplicateWithinWatermark"}
_OPAQUE = {
    "FlatMapGroupsWithState",
    "FlatMapGroupsInPandasWithState",
    "TransformWithState",
    "TransformWithStateInPandas",
    "FlatMapGroupsInPandas",
    "MapGroups",
}


@dataclass(frozen=True)
class StatefulOperator:
    kind: str  # aggregation, deduplication, join, limit, user state
    identity: tuple[str, ...]  # what the state depends on, in source terms
    shown: str  # for people: e.g. "aggregation by account_id, window"


@dataclass
class _Lineage:
    """What each attribute of a plan is, written in terms of the source columns."""

    defs: dict[int, str] = field(default_factory=dict)

    def text(self, expression: Any) -> str:
        name = expression.nodeName()
        if name == "AttributeReference":
            return self.defs.get(expression.exprId().id(), f"?{expression.name()}")
        if name == "Literal":
            return f"lit({expression.sql()})"
        children = [self.text(c) for c in _children(expression)]
        extra = ""
        if name == "AggregateExpression":
            extra = ":distinct" if expression.isDistinct() else ""
        return f"{name}:{expression.dataType().simpleString()}{extra}({', '.join(children)})"


def _children(node: Any) -> list[Any]:
    return scala_list(node.children())


def _aggregate_expressions(expression: Any) -> list[Any]:
    if expression.nodeName() == "AggregateExpression":
        return [expression]
    return [f for child in _children(expression) for f in _aggregate_expressions(child)]


def describe_plan(df: DataFrame) -> list[StatefulOperator]:
    """The stateful operators of ``df``'s analysed plan, bottom-up."""
    lineage = _Lineage()
    operators: list[StatefulOperator] = []

    def visit(plan: Any, alias: str | None) -> None:
        name = plan.nodeName()
        if name == "SubqueryAlias":
            alias = plan.identifier().name()
        children = _children(plan)
        for child in children:
            visit(child, alias)
        if not children:
            label = alias or name
            for attribute in scala_list(plan.output()):
                lineage.defs[attribute.exprId().id()] = f"{label}.{attribute.name()}"
            return
        if name in ("Project", "Aggregate"):
            outputs = scala_list(plan.projectList() if name == "Project" else plan.aggregateExpressions())
            for item in outputs:
                if item.nodeName() == "Alias":
                    lineage.defs[item.exprId().id()] = lineage.text(item.child())
        if name == "Aggregate":
            keys = scala_list(plan.groupingExpressions())
            functions = [f for item in scala_list(plan.aggregateExpressions()) for f in _aggregate_expressions(item)]
            shown = ", ".join(_readable(k.sql()) for k in keys) or "(everything)"
            computed = ", ".join(_readable(f.sql()) for f in functions)
            operators.append(
                StatefulOperator(
                    "aggregation",
                    ("keys", *[lineage.text(k) for k in keys], "functions", *[lineage.text(f) for f in functions]),
                    f"aggregation by {shown}" + (f" of {computed}" if computed else ""),
                )
            )
        elif name == "Distinct":
            keys = scala_list(plan.child().output())
            operators.append(
                StatefulOperator(
                    "deduplication",
                    tuple(lineage.text(k) for k in keys),
                    f"DISTINCT over {', '.join(k.name() for k in keys)}",
                )
            )
        elif name in _KEYED:
            keys = scala_list(plan.keys())
            operators.append(
                StatefulOperator(
                    "deduplication",
                    (name, *[lineage.text(k) for k in keys]),
                    f"deduplication on {', '.join(k.name() for k in keys)}",
                )
            )
        elif name == "Join":
            condition = plan.condition()
            text = lineage.text(condition.get()) if condition.isDefined() else "true"
            join_type = plan.joinType().toString()
            shown = _readable(condition.get().sql()) if condition.isDefined() else "no condition"
            operators.append(StatefulOperator("join", (join_type, text), f"{join_type} join on {shown}"))
        elif name == "GlobalLimit":
            operators.append(
                StatefulOperator("limit", (lineage.text(plan.limitExpr()),), f"LIMIT {plan.limitExpr().sql()}")
            )
        elif name in _OPAQUE:
            operators.append(StatefulOperator("user state", ("opaque", name), f"{name} (user state function)"))
        for attribute in scala_list(plan.output()):
            lineage.defs.setdefault(attribute.exprId().id(), f"{name}.{attribute.name()}")

    visit(df._jdf.queryExecution().analyzed(), None)
    return operators


def _readable(text: str) -> str:
    """SQL as people wrote it: without the runner's internal view names."""
    return re.sub(r"`?__t_[a-z0-9_]+`?\.", "", text)


def _schema(df: DataFrame) -> list[tuple[str, str]]:
    return [(f.name, f.dataType.simpleString()) for f in df.schema.fields]


def diff_queries(
    spark: SparkSession,
    old: Manifest,
    old_tables: list[TableDef],
    new: Manifest,
    catalog: Catalog,
    env: Mapping[str, str],
) -> QueryDiff:
    """Compare the deployed query (over the tables it was deployed with) with the desired one."""
    before = build_query(spark, old, Catalog(tuple(old_tables)), env, streaming=False)
    after = build_query(spark, new, catalog, env, streaming=False, reuse=before)
    return compare(before, after, old, new, old_tables, catalog)


def compare(
    before: BuiltQuery, after: BuiltQuery, old: Manifest, new: Manifest, old_tables: list[TableDef], catalog: Catalog
) -> QueryDiff:
    reasons: list[str] = []
    same_semantics = before.result.sameSemantics(after.result)
    if not same_semantics:
        reasons.append("the query's meaning changed (Spark's sameSemantics)")
    old_schema, new_schema = _schema(before.result), _schema(after.result)
    same_schema = old_schema == new_schema
    if not same_schema:
        reasons.append(
            "output columns changed: "
            + ", ".join(f"{n} {t}" for n, t in old_schema)
            + " -> "
            + ", ".join(f"{n} {t}" for n, t in new_schema)
        )
    incompatible: list[str] = []
    old_sources = {t.name: t.definition() for t in before.sources.values()}
    new_sources = {t.name: t.definition() for t in after.sources.values()}
    if set(old_sources) != set(new_sources):
        incompatible.append(f"sources changed: {', '.join(sorted(old_sources))} -> {', '.join(sorted(new_sources))}")
    changed_tables = sorted(n for n in set(old_sources) & set(new_sources) if old_sources[n] != new_sources[n])
    if changed_tables:
        incompatible.append(f"source table definition changed: {', '.join(changed_tables)}")
    old_target = Catalog(tuple(old_tables)).lookup_name(old.target_table)
    new_target = catalog.lookup_name(new.target_table)
    target_changed = (
        old_target is None
        or new_target is None
        or old_target.key != new_target.key
        or old_target.definition() != new_target.definition()
    )
    if target_changed:
        incompatible.append(f"target changed: {old.target_table} -> {new.target_table}")
    old_ops = describe_plan(before.result)
    new_ops = describe_plan(after.result)
    changed = not same_semantics or not same_schema or bool(changed_tables) or target_changed
    if any(op.kind == "user state" for op in old_ops + new_ops) and changed:
        incompatible.append("the query keeps user-defined state, whose compatibility cannot be judged")
    if [op.kind for op in old_ops] != [op.kind for op in new_ops]:
        incompatible.append(
            "stateful operators changed: "
            + (", ".join(op.shown for op in old_ops) or "none")
            + " -> "
            + (", ".join(op.shown for op in new_ops) or "none")
        )
    else:
        for position, (a, b) in enumerate(zip(old_ops, new_ops, strict=True), start=1):
            if a.identity != b.identity:
                change = (
                    f"{a.shown} -> {b.shown}"
                    if a.shown != b.shown
                    else f"{a.shown}, with keys computed differently (e.g. a window's size or slide)"
                )
                incompatible.append(f"{a.kind} {position} changed: {change}")
    return QueryDiff(
        changed=changed,
        state_compatible=not incompatible,
        reasons=tuple(reasons + incompatible),
        held_state=bool(old_ops),
    )
