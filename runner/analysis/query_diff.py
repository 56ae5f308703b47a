"""Did a query change, and can its state survive the change? Judged by Spark itself.

Both queries are analysed as the streaming plans their jobs will run, over the same
declared tables (one relation per unchanged table, so Spark can compare them):

- meaning: ``DataFrame.sameSemantics`` — whitespace, comments and keyword case are not
  changes; an added filter or a changed window is;
- output: the result schema (a renamed column means the sink receives something else);
- state: a checkpoint can serve the new query only if it reads the same sources and every
  stateful operator keeps the same state (``runner/analysis/state_shape.py``: keys and
  functions in source terms with every parameter, state row types, what each side of a
  join keeps). When the describer is unsure of a node or expression, the change is
  incompatible, and the reason names what it could not judge.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import DataFrame, SparkSession

from jobs.build import BuiltJob, build_job
from runner.analysis.state_shape import StatefulOperator, StateShape, describe
from runner.core.catalog import Catalog
from runner.core.lookup import ON_CHANGE, changed_options, data_definition, is_lookup
from runner.core.manifest import Manifest, chosen_changelog_engine
from runner.core.querydiff import QueryDiff
from runner.core.reasons import Reason
from runner.core.tables import TableDef


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
    before = deployed_build(spark, old, old_tables, env)
    after = build_job(spark, new, catalog, env, live=False, reuse=before.query)
    return compare(before, after, old, new, old_tables, catalog)


def deployed_build(spark: SparkSession, old: Manifest, old_tables: list[TableDef], env: Mapping[str, str]) -> BuiltJob:
    """The deployed query's analysis, over the tables it was deployed with; a desired query built with
    ``reuse=`` its ``query`` can be compared with it."""
    return build_job(spark, old, Catalog(tuple(old_tables)), env, live=False)


def state_of(built: BuiltJob) -> StateShape:
    """What ``built``'s streaming plan keeps in state."""
    query = built.query
    return describe(built.output, {query.sources[view].name: frame for view, frame in query.frames.items()})


def compare(
    before: BuiltJob, after: BuiltJob, old: Manifest, new: Manifest, old_tables: list[TableDef], catalog: Catalog
) -> QueryDiff:
    reasons: list[Reason] = []
    same_semantics = before.query.result.sameSemantics(after.query.result)
    if not same_semantics:
        reasons.append(Reason.of("QUERY_MEANING_CHANGED"))
    old_schema, new_schema = _schema(before.query.result), _schema(after.query.result)
    same_schema = old_schema == new_schema
    if not same_schema:
        reasons.append(
            Reason.of(
                "OUTPUT_COLUMNS_CHANGED",
                before=[f"{n} {t}" for n, t in old_schema],
                after=[f"{n} {t}" for n, t in new_schema],
            )
        )
    incompatible: list[Reason] = []
    old_sources = {t.name: t.definition() for t in before.query.streams().values()}
    new_sources = {t.name: t.definition() for t in after.query.streams().values()}
    lookups = _lookup_changes(before, after)
    reasons.extend(lookups)
    if set(old_sources) != set(new_sources):
        incompatible.append(Reason.of("SOURCES_CHANGED", before=sorted(old_sources), after=sorted(new_sources)))
    changed_tables = sorted(n for n in set(old_sources) & set(new_sources) if old_sources[n] != new_sources[n])
    if changed_tables:
        incompatible.append(Reason.of("SOURCE_DEFINITION_CHANGED", tables=changed_tables))
    old_target = Catalog(tuple(old_tables)).lookup_name(old.target_table)
    new_target = catalog.lookup_name(new.target_table)
    target_changed = (
        old_target is None
        or new_target is None
        or old_target.key != new_target.key
        or old_target.definition() != new_target.definition()
    )
    if target_changed:
        incompatible.append(Reason.of("TARGET_CHANGED", before=old.target_table, after=new.target_table))
    changelog = before.query.changelog is not None or after.query.changelog is not None
    engines = chosen_changelog_engine(old), chosen_changelog_engine(new)
    engine_changed = changelog and engines[0] != engines[1]
    if engine_changed:
        incompatible.append(Reason.of("CHANGELOG_ENGINE_CHANGED", before=engines[0], after=engines[1]))
    old_state, new_state = state_of(before), state_of(after)
    query_changed = not same_semantics or not same_schema or bool(changed_tables) or target_changed or bool(lookups)
    changed = query_changed or engine_changed
    if query_changed and changelog:
        # Its state is the tables' rows and the last result; the result of another query is not the target's.
        incompatible.append(Reason.of("CHANGELOG_QUERY_CHANGED"))
    elif query_changed:
        incompatible.extend(_state_changes(old_state, new_state))
    return QueryDiff(
        changed=changed,
        state_compatible=not incompatible,
        reasons=tuple(reasons + incompatible),
        held_state=bool(old_state.operators) or before.query.changelog is not None,
    )


def _lookup_changes(before: BuiltJob, after: BuiltJob) -> list[Reason]:
    """How the lookup tables both queries join changed. A lookup table is not state: a new reload setting
    restarts the query (``runner/core/lookup.py:ON_CHANGE``); other data joined is a change of the query's
    meaning, whose state Spark judges as for any other change."""
    old = {t.name: t for t in before.query.sources.values() if is_lookup(t)}
    new = {t.name: t for t in after.query.sources.values() if is_lookup(t)}
    reasons: list[Reason] = []
    for name in sorted(set(old) & set(new)):
        if data_definition(old[name]) != data_definition(new[name]):
            reasons.append(Reason.of("LOOKUP_TABLE_CHANGED", table=name))
        elif options := changed_options(old[name], new[name]):
            how = sorted({ON_CHANGE[option] for option in options if option in ON_CHANGE})
            reasons.append(Reason.of("LOOKUP_OPTIONS_CHANGED", table=name, fields=options, how=", ".join(how)))
    return reasons


def _state_changes(old: StateShape, new: StateShape) -> list[Reason]:
    """Why ``old``'s state cannot serve ``new`` (empty: it can)."""
    for shape, which in ((old, "deployed"), (new, "desired")):
        if shape.unsure:
            return [Reason.of("STATE_UNSURE", which=which, what=shape.unsure)]
    if [op.kind for op in old.operators] != [op.kind for op in new.operators]:
        return [
            Reason.of(
                "STATEFUL_OPERATORS_CHANGED",
                before=", ".join(op.shown for op in old.operators) or "none",
                after=", ".join(op.shown for op in new.operators) or "none",
            )
        ]
    return [
        _what_changed(a, b, position)
        for position, (a, b) in enumerate(zip(old.operators, new.operators, strict=True), start=1)
        if a.identity != b.identity
    ]


def _what_changed(a: StatefulOperator, b: StatefulOperator, position: int) -> Reason:
    labels = list(dict.fromkeys(label for label, _ in a.identity + b.identity))
    differ = [label for label in labels if _values(a, label) != _values(b, label)]
    named = {"key": "grouping keys", "function": "aggregate functions"}
    what = list(dict.fromkeys(named.get(label, label) for label in differ))
    if a.shown != b.shown:
        return Reason.of(
            "STATEFUL_OPERATOR_CHANGED", kind=a.kind, position=position, before=a.shown, after=b.shown, differ=what
        )
    return Reason.of(
        "STATEFUL_OPERATOR_COMPUTED_DIFFERENTLY", kind=a.kind, position=position, operator=a.shown, differ=what
    )


def _values(operator: StatefulOperator, label: str) -> list[str]:
    return [value for name, value in operator.identity if name == label]
