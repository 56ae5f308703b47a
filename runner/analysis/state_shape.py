"""What a streaming query keeps in state, described from the plan Spark will run.

A checkpoint can serve a changed query only if every stateful operator keeps the same
state: the same keys, computed the same way from the same source columns, and state rows
of the same shape. This module describes each stateful operator of the optimised
streaming plan (the plan Spark plans its state operators from, with columns pruned the
way the job prunes them) in those terms:

- aggregation: the grouping keys, the aggregate functions (with their inputs and every
  parameter), the key types and the types of the aggregation buffer Spark stores;
- deduplication: the keys; a stream-stream join: the join type, the condition, and the
  columns each side keeps in state (its input rows); a streaming LIMIT: the limit.

Every column is written out in terms of the declared source columns it comes from, traced
through every plan node in between (projections, ``Expand`` for sliding windows,
``Generate`` for ``explode``, unions, Python UDF evaluation, ...). An expression is written
with its class and every constructor parameter — a struct field's ordinal, a window's size
and slide, a generator's arguments, a Python UDF's pickled code — so two keys are equal
only if Spark would compute them the same way.

Default deny: a plan node or an expression parameter the describer does not know makes
the description *unsure*, naming it; the caller treats unsure as incompatible.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame

from jobs.jvm import analysed_plan, java_session, jvm_of, scala_list


class Unsure(Exception):
    """The describer met something it does not fully understand; ``where`` names it."""

    def __init__(self, where: str):
        super().__init__(where)
        self.where = where


@dataclass(frozen=True)
class StatefulOperator:
    kind: str  # aggregation, deduplication, join, limit
    identity: tuple[tuple[str, str], ...]  # (what, how it is computed), compared between versions
    shown: str  # for people: e.g. "aggregation by account_id, window of count(1)"


@dataclass(frozen=True)
class StateShape:
    operators: tuple[StatefulOperator, ...]
    unsure: str | None = None  # the node or expression that could not be judged


# Plan nodes whose output is their child's output, row by row or as a subset of rows:
# they change neither which columns exist nor how they are computed.
_PASS_THROUGH = {
    "Filter",
    "EventTimeWatermark",
    "SubqueryAlias",
    "View",
    "CollectMetrics",
    "Repartition",
    "RepartitionByExpression",
    "RebalancePartitions",
    "Sort",
    "LocalLimit",
    "ResolvedHint",
}
# Plan nodes that keep state the runner cannot see into.
_USER_STATE = {
    "FlatMapGroupsWithState",
    "FlatMapGroupsInPandasWithState",
    "TransformWithState",
    "TransformWithStateInPySpark",
    "TransformWithStateInPandas",
}
_PYTHON_EVAL = {"BatchEvalPython", "ArrowEvalPython"}


def _readable(text: str) -> str:
    """SQL as people wrote it: without the runner's internal view names."""
    return re.sub(r"`?__t_[a-z0-9_]+`?\.", "", text)


class _Classes:
    """JVM classes the renderer tells apart, looked up once per class name."""

    def __init__(self, jvm: Any):
        load = jvm.java.lang.Class.forName
        self._kinds = [
            ("expression", load("org.apache.spark.sql.catalyst.expressions.Expression")),
            ("exprid", load("org.apache.spark.sql.catalyst.expressions.ExprId")),
            ("datatype", load("org.apache.spark.sql.types.DataType")),
            ("option", load("scala.Option")),
            ("seq", load("scala.collection.Iterable")),
            ("enum-value", load("scala.Enumeration$Value")),
            ("java-enum", load("java.lang.Enum")),
            ("utf8", load("org.apache.spark.unsafe.types.UTF8String")),
            ("product", load("scala.Product")),
        ]
        self._cache: dict[str, str] = {}

    def kind(self, value: Any) -> tuple[str, str]:
        name = value.getClass().getName()
        if name not in self._cache:
            self._cache[name] = next((k for k, cls in self._kinds if cls.isInstance(value)), "other")
        return self._cache[name], name


@dataclass
class _Describer:
    classes: _Classes
    sources: dict[int, str]  # exprId of a declared table's column -> "table.column"
    source_leaves: list[tuple[Any, str]]  # (leaf plan, table name), to recognise re-instanced leaves
    defs: dict[int, str | Unsure] = field(default_factory=dict)
    names: dict[int, str] = field(default_factory=dict)  # exprId -> what people call the column
    operators: list[StatefulOperator] = field(default_factory=list)
    unsure: str | None = None

    # ---- expressions ---------------------------------------------------------------------

    def attribute(self, attribute: Any) -> str:
        found = self.defs.get(attribute.exprId().id())
        if found is None:
            raise Unsure(f"column {attribute.name()} of unknown origin")
        if isinstance(found, Unsure):
            raise found
        return found

    def render(self, expression: Any) -> str:
        """``expression`` with every column written in source terms and every parameter shown."""
        name = expression.nodeName()
        if name == "AttributeReference":
            return self.attribute(expression)
        if name == "Alias":
            return self.render(expression.child())
        if name == "Literal":
            return f"Literal({expression.sql()}: {expression.dataType().catalogString()})"
        if name == "NamedLambdaVariable":
            return f"LambdaVariable({expression.name()}: {expression.dataType().catalogString()})"
        if name == "PythonUDF":
            # The function is known by its pickled code; a different function is a different key.
            code = expression.func().command().hashCode()
            arguments = ", ".join(self.render(c) for c in scala_list(expression.children()))
            return (
                f"PythonUDF({expression.name()}, code {code}, eval type {expression.evalType()}, "
                f"{expression.dataType().catalogString()}, deterministic {expression.udfDeterministic()})"
                f"({arguments})"
            )
        parameters = [self._parameter(expression.productElement(i), name) for i in range(expression.productArity())]
        return f"{name}({', '.join(p for p in parameters if p is not None)})"

    def _parameter(self, value: Any, owner: str) -> str | None:
        if value is None or isinstance(value, bool | int | float | str):
            return repr(value)
        kind, class_name = self.classes.kind(value)
        if kind == "expression":
            return self.render(value)
        if kind == "exprid":
            return None  # an identity within one analysis, not part of the meaning
        if kind == "datatype":
            return value.catalogString()
        if kind == "option":
            return "None" if value.isEmpty() else f"Some({self._parameter(value.get(), owner)})"
        if kind == "seq":
            return "[" + ", ".join(str(self._parameter(v, owner)) for v in scala_list(value)) + "]"
        if kind in ("enum-value", "java-enum", "utf8"):
            return value.toString()
        if kind == "product":
            if class_name.startswith("scala.Tuple"):
                items = [self._parameter(value.productElement(i), owner) for i in range(value.productArity())]
                return "(" + ", ".join(str(i) for i in items) + ")"
            if value.productArity() == 0:  # a case object: EvalMode, sort direction, aggregate mode
                return class_name.rsplit(".", 1)[-1].rstrip("$")
        raise Unsure(f"expression {owner} (a parameter of type {class_name})")

    def define(self, attribute: Any, how: Callable[[], str]) -> None:
        try:
            self.defs[attribute.exprId().id()] = how()
        except Unsure as unsure:
            self.defs[attribute.exprId().id()] = unsure

    def shown(self, expression: Any) -> str:
        if expression.nodeName() == "AttributeReference":
            return self.names.get(expression.exprId().id(), expression.name())
        return _readable(expression.sql())

    # ---- plan nodes ----------------------------------------------------------------------

    def visit(self, plan: Any) -> None:
        children = scala_list(plan.children())
        for child in children:
            self.visit(child)
        name = plan.nodeName()
        try:
            self._node(plan, name, children)
        except Unsure as unsure:
            self.unsure = self.unsure or unsure.where

    def _node(self, plan: Any, name: str, children: list[Any]) -> None:
        if not children:
            self._leaf(plan, name)
        elif name in _PASS_THROUGH:
            pass
        elif name == "Project":
            for item in scala_list(plan.projectList()):
                if item.nodeName() == "Alias":
                    self._alias(item)
        elif name == "Aggregate":
            self._aggregate(plan)
        elif name in ("Deduplicate", "DeduplicateWithinWatermark"):
            keys = scala_list(plan.keys())
            self._stateful(
                "deduplication",
                (("operator", name), *(("deduplication keys", self.render(k)) for k in keys)),
                f"deduplication on {', '.join(self.shown(k) for k in keys)}",
            )
        elif name == "Join":
            self._join(plan)
        elif name == "GlobalLimit":
            limit = plan.limitExpr()
            self._stateful("limit", (("limit", self.render(limit)),), f"LIMIT {limit.sql()}")
        elif name == "Expand":
            projections = [scala_list(p) for p in scala_list(plan.projections())]
            for index, attribute in enumerate(scala_list(plan.output())):
                self.define(
                    attribute,
                    lambda i=index: "Expand[" + "; ".join(self.render(p[i]) for p in projections) + "]",
                )
        elif name == "Generate":
            generator = plan.generator()
            outer = plan.outer()
            for index, attribute in enumerate(scala_list(plan.generatorOutput())):
                self.define(attribute, lambda i=index: f"Generate({self.render(generator)}, outer {outer})[{i}]")
                self.names[attribute.exprId().id()] = attribute.name()
        elif name == "Union":
            outputs = [scala_list(c.output()) for c in children]
            for index, attribute in enumerate(outputs[0]):
                self.define(
                    attribute, lambda i=index: "Union[" + "; ".join(self.attribute(o[i]) for o in outputs) + "]"
                )
        elif name in _PYTHON_EVAL:
            for udf, attribute in zip(scala_list(plan.udfs()), scala_list(plan.resultAttrs()), strict=True):
                self.define(attribute, lambda u=udf: self.render(u))
        elif name in _USER_STATE:
            raise Unsure(f"{name} (a user-defined state function, whose state the runner cannot compare)")
        else:
            raise Unsure(f"plan node {name}")

    def _leaf(self, plan: Any, name: str) -> None:
        output = scala_list(plan.output())
        if output and all(a.exprId().id() in self.sources for a in output):
            for attribute in output:
                self.defs[attribute.exprId().id()] = self.sources[attribute.exprId().id()]
            return
        # A relation read twice (a self-join) gets new column ids: recognise it by its source.
        tables = {table for leaf, table in self.source_leaves if plan.sameResult(leaf)}
        if len(tables) != 1:
            raise Unsure(f"a relation ({name}) that is not one of the declared tables")
        table = tables.pop()
        for attribute in output:
            self.defs[attribute.exprId().id()] = f"{table}.{attribute.name()}"

    def _alias(self, alias: Any) -> None:
        self.define(alias, lambda: self.render(alias.child()))
        label = alias.name()
        self.names[alias.exprId().id()] = (
            _readable(alias.child().sql()) if label.startswith("_groupingexpression") else label
        )

    def _aggregate(self, plan: Any) -> None:
        keys = scala_list(plan.groupingExpressions())
        outputs = scala_list(plan.aggregateExpressions())
        functions: list[Any] = []
        for item in outputs:
            for function in _aggregate_expressions(item):
                if not any(function.semanticEquals(f) for f in functions):
                    functions.append(function)
        buffer = [
            a.dataType().catalogString()
            for f in functions
            for a in scala_list(f.aggregateFunction().aggBufferAttributes())
        ]
        identity = (
            *(("key", self.render(k)) for k in keys),
            *(("function", self.render(f)) for f in functions),
            ("state key types", ", ".join(k.dataType().catalogString() for k in keys)),
            ("state value types", ", ".join(buffer)),
        )
        computed = ", ".join(_readable(f.sql()) for f in functions)
        grouped = ", ".join(self.shown(k) for k in keys) or "(everything)"
        shown = f"aggregation by {grouped} of {computed}" if computed else f"DISTINCT over {grouped}"
        self._stateful("aggregation", identity, shown)
        for item in outputs:
            if item.nodeName() == "Alias":
                self._alias(item)

    def _join(self, plan: Any) -> None:
        left, right = plan.left(), plan.right()
        condition = plan.condition()
        join_type = plan.joinType().toString()
        if not (left.isStreaming() and right.isStreaming()):
            return  # a stream-static join keeps no state: each batch joins with the static side
        sides = [
            (f"{side} side keeps", ", ".join(self.render(a) for a in scala_list(child.output())))
            for side, child in (("left", left), ("right", right))
        ]
        identity = (
            ("join type", join_type),
            ("condition", self.render(condition.get()) if condition.isDefined() else "none"),
            *sides,
        )
        shown = _readable(condition.get().sql()) if condition.isDefined() else "no condition"
        self._stateful("join", identity, f"{join_type} join on {shown}")

    def _stateful(self, kind: str, identity: tuple[tuple[str, str], ...], shown: str) -> None:
        self.operators.append(StatefulOperator(kind, identity, shown))


def _aggregate_expressions(expression: Any) -> list[Any]:
    if expression.nodeName() == "AggregateExpression":
        return [expression]
    return [f for child in scala_list(expression.children()) for f in _aggregate_expressions(child)]


def _leaves(plan: Any) -> list[Any]:
    children = scala_list(plan.children())
    return [plan] if not children else [leaf for child in children for leaf in _leaves(child)]


def describe(output: DataFrame, tables: dict[str, DataFrame]) -> StateShape:
    """The state ``output``'s streaming plan keeps; ``tables``: declared table name -> its registered frame."""
    spark = output.sparkSession
    jvm = jvm_of(spark)
    sources: dict[int, str] = {}
    source_leaves: list[tuple[Any, str]] = []
    for table, frame in tables.items():
        for leaf in _leaves(analysed_plan(frame)):
            source_leaves.append((leaf, table))
            for attribute in scala_list(leaf.output()):
                sources[attribute.exprId().id()] = f"{table}.{attribute.name()}"
    optimised = java_session(spark).sessionState().optimizer().execute(analysed_plan(output))
    describer = _Describer(_Classes(jvm), sources, source_leaves)
    describer.visit(optimised)
    return StateShape(tuple(describer.operators), describer.unsure)
