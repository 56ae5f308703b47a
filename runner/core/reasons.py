"""Why the runner decided what it did: every reason is a registered code with parameters.

Deciding code (``runner/deploy/plan.py``, ``runner/analysis/query_diff.py``, the session and the
jobs) says *which* reason applies with ``Reason.of(CODE, **params)``; the words live once, in
``REASONS``, and ``Reason.render`` is the one place that turns a reason into text for people.
``plan --json`` and the history carry the code and its parameters, so tools (and tests) match
codes, not sentences. A code used nowhere, or used without being registered, fails
``tests/test_reasons.py``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import computed_field, field_serializer, field_validator, model_validator

from runner.core.part import Part

Param = str | int | tuple[str, ...]  # a tuple is a list of names, shown comma-separated

# code -> str.format template over the reason's parameters
REASONS: dict[str, str] = {
    # the plan: what is deployed and observed
    "NOT_DEPLOYED": "not deployed",
    "NEW_JOB": "new job: nothing deployed under this name",
    "MANIFEST_DELETED_RUNNING": "manifest deleted: stop with a savepoint and keep the state",
    "MANIFEST_DELETED_STOPPED": "manifest deleted; the job is not running, its state is kept",
    "OTHER_VERSION_RUNNING": "a job of v{running} is running, v{deployed} is deployed",
    "REDEPLOY_REMOVED": "redeploying a removed job",
    "RUNNING_UNCHANGED": "running, unchanged",
    "NOT_RUNNING": "not running",
    "NOT_RUNNING_RESTORING": "not running; restoring",
    "APPLICATION_ENDED": "its last application ended: {how}",
    "NEVER_STARTED": "v{version} never started: starting it as planned",
    "NO_STATE_FOUND": "no savepoint or checkpoint of v{version} found, although it ran",
    # the plan: what changed in the manifest
    "LAYOUT_ONLY": "query text differs only in layout (whitespace, comments, case): same meaning",
    "CONFIG_CHANGED": "configuration changed: {fields}",
    "CHANGED_WITHOUT_RESTART": "changed without a restart: {fields} (the job does not use them)",
    "NEW_VERSION_FIELDS": "{fields} changed: a new version starts",
    "RESTORE_REFUSED": (
        "v{version} could not start from its restored state: {refusal}; restoring it again would fail the same way"
    ),
    "STATE_UNREADABLE": "this release cannot restore the state of v{version}: {why}",
    # the plan: what happens to the state
    "STATE_CARRIES_OVER": "the change is state-compatible: the state carries over",
    "STATE_NOT_CARRIED": "state of v{version} cannot carry over: v{next} starts with clean state",
    "NOTHING_TO_CONTINUE": "v{version} left no state to continue from",
    "CHANGELOG_REREAD": (
        "changelog tables are read again from their startup position, not continued: the rows they hold are "
        "state v{version} does not hand over"
    ),
    "HELD_ROWS_LOST": (
        "rows v{version} still holds in its state (windows not yet closed, unmatched join rows) are emitted by "
        "neither version; on-query-change: reprocess recomputes them from the sources' startup position"
    ),
    # how the query changed (Spark's analysis)
    "QUERY_MEANING_CHANGED": "the query's meaning changed (Spark's sameSemantics)",
    "OUTPUT_COLUMNS_CHANGED": "output columns changed: {before} -> {after}",
    "SOURCES_CHANGED": "sources changed: {before} -> {after}",
    "SOURCE_DEFINITION_CHANGED": "source table definition changed: {tables}",
    "CHANGELOG_QUERY_CHANGED": (
        "a query over changelog tables changed: its state (each key's current row, the last result) is rebuilt "
        "from the tables' start, and the target's rows replaced by the new result"
    ),
    "CHANGELOG_ENGINE_CHANGED": (
        "the changelog engine changed ({before} -> {after}): the state one keeps is not the other's; it is rebuilt "
        "from the tables' start"
    ),
    "LOOKUP_OPTIONS_CHANGED": (
        "lookup table {table}: {fields} changed ({how}: a lookup table is not state, so the query restarts with its "
        "state and reloads the table as now declared)"
    ),
    "LOOKUP_TABLE_CHANGED": (
        "lookup table {table} is declared anew (where it is read or its columns): the query joins other reference "
        "data; its state is judged as for any other change"
    ),
    "TARGET_CHANGED": "target changed: {before} -> {after}",
    "STATE_UNSURE": (
        "unsure whether the state carries over: the {which} query has {what}, which the runner cannot judge "
        "(when unsure, the state is not reused)"
    ),
    "STATEFUL_OPERATORS_CHANGED": "stateful operators changed: {before} -> {after}",
    "STATEFUL_OPERATOR_CHANGED": "{kind} {position} changed: {before} -> {after} ({differ} differ)",
    "STATEFUL_OPERATOR_COMPUTED_DIFFERENTLY": (
        "{kind} {position} changed: {operator}, with {differ} computed differently (e.g. a window's size or "
        "slide, a struct field, a generator)"
    ),
    # requested or noticed outside a plan
    "SUPERSEDED": "{detail}",
    "STOP_REQUESTED": "requested by sql-runner stop",
    "SAVEPOINT_REQUESTED": "savepoint requested: stop, snapshot, restart from it",
    "SESSION_STOPPED": "sql-runner session stop",
    "SPARK_REFUSED_STATE": "{refusal}",
    "NEXT_PLAN_STARTS_CLEAN": ("the next plan starts v{next} with clean state instead of restoring v{version} again"),
    "QUERY_FAILED": "{error}",
    # a reason recorded as text by a release before reasons had codes
    "RECORDED_TEXT": "{text}",
}


class UnregisteredReason(KeyError):
    """A reason code that ``REASONS`` does not list (a bug in the runner, not the user's input)."""


class Reason(Part):
    """One reason: its code and parameters (``render()`` for people).

    As ``plan --json``, the console and the history carry it: the code, its parameters and the text. A reason
    recorded as bare text by an earlier release, or with a code of a later one, reads as ``RECORDED_TEXT``."""

    code: str
    params: tuple[tuple[str, Param], ...] = ()

    @staticmethod
    def of(code: str, /, **params: str | int | Iterable[str]) -> Reason:
        """``Reason.of("CONFIG_CHANGED", fields=["description"])``; a list parameter is shown comma-separated."""
        if code not in REASONS:
            raise UnregisteredReason(code)
        return Reason(code=code, params=params)

    @property
    def param(self) -> dict[str, Param]:
        return dict(self.params)

    def render(self) -> str:
        shown = {k: ", ".join(v) if isinstance(v, tuple) else v for k, v in self.params}
        return REASONS[self.code].format(**shown)

    @computed_field
    @property
    def text(self) -> str:
        """The reason as people read it (written for tools that show it; a reader renders it again)."""
        return self.render()

    @model_validator(mode="before")
    @classmethod
    def _recorded(cls, data: Any) -> Any:
        if isinstance(data, str):
            return {"code": "RECORDED_TEXT", "params": {"text": data}}
        if isinstance(data, Mapping) and str(data.get("code")) not in REASONS:  # a code of a later release
            return {"code": "RECORDED_TEXT", "params": {"text": str(data.get("text", data.get("code")))}}
        return data

    @field_validator("params", mode="before")
    @classmethod
    def _params(cls, params: Any) -> Any:
        if isinstance(params, Mapping):
            return tuple(sorted((str(k), _param(v)) for k, v in params.items()))
        return params

    @field_serializer("params")
    def _params_as_written(self, params: tuple[tuple[str, Param], ...]) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in params}


def _param(value: str | int | Iterable[str]) -> Param:
    return value if isinstance(value, str | int) else tuple(str(item) for item in value)


def codes(reasons: Iterable[Reason]) -> list[str]:
    return [reason.code for reason in reasons]


def rendered(reasons: Iterable[Reason]) -> list[str]:
    """The reasons as people read them, one line each."""
    return [reason.render() for reason in reasons]
