"""A query manifest as data: its fields, their validation, defaults and JSON Schema.

A manifest declares one streaming query. ``manifests/job-template.yaml`` holds defaults;
a manifest overrides it key by key, and nested maps (``sparkProperties``) merge. Reading
manifests from YAML files, with errors that point at lines, is ``runner/authoring``.
"""

from __future__ import annotations

import ast
import copy
import re
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from runner.core import durations, placeholder_syntax, placeholders
from runner.core.error_catalogue import CATALOGUE
from runner.core.errors import UserError
from runner.core.restarts import RestartStrategy
from runner.core.sqltokens import Kind, tokenize

NAME_PATTERN = r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$"
# How a query over changelog tables runs (jobs/changelog/): its operators on the changes only, or the query over
# every row held, every micro-batch (kept to compare them; a query the operators do not cover is recomputed).
CHANGELOG_ENGINE = "spark.sqlrunner.changelog.engine"
CHANGELOG_ENGINES = ("incremental", "recompute")
NAME_HINT = CATALOGUE["MANIFEST_INVALID_NAME"].hint


def invalid(code: str, **params: Any) -> PydanticCustomError:
    """A validation error under a registered code; its words come from the error catalogue."""
    return PydanticCustomError(code, CATALOGUE[code].message, params)


# How a change to each manifest field is carried out on a deployed job (every field
# declares one, in its ``x-on-change`` schema annotation, and ``tests/test_plan.py``
# checks each):
#   none         recorded; the running job is left alone (it does not use the field)
#   restart      stop with a savepoint and restore: the job reads it when it starts
#   judged       Spark compares the queries: restore if the state can serve the new
#                query, otherwise a new version with clean state
#   new-version  a new version with clean state
#   identity     names the job: another value is another job
#   runner       written by the runner, never by the user
OnChange = Literal["none", "restart", "judged", "new-version", "identity", "runner"]


def _on_change(how: OnChange) -> dict[str, Any]:
    return {"x-on-change": how}


# Job options a manifest may take from the template when it does not set them itself.
BUILT_IN_DEFAULTS: dict[str, Any] = {
    "description": "",
    "trigger-interval": "10 seconds",
    "sparkProperties": {},
    "on-query-change": "continue",
    "retention": {"savepoints": 3, "runs": 3},
    "mode": "application",
}
# Keys that identify one query; a template that sets them would make every query the same.
PER_QUERY_KEYS = ("name", "target-table", "sql", "code")


class Meta(BaseModel):
    """Written by the runner when it deploys; never by the user."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    query_id: str = Field(alias="query-id")
    query_version: int = Field(alias="query-version", ge=1)
    query_create_timestamp: datetime = Field(alias="query-create-timestamp")


class Retention(BaseModel):
    """How much state to keep per query version; older savepoints and run folders are deleted."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    savepoints: int = Field(3, ge=1, description="Savepoints kept per version.")
    runs: int = Field(3, ge=1, description="Checkpoint run folders kept per version.")


class Manifest(BaseModel):
    """A merged manifest: the query plus every job option it runs with."""

    model_config = ConfigDict(
        extra="forbid",
        populate_by_name=True,
        frozen=True,
        title="spark-sql-runner manifest",
        json_schema_extra={"description": "One streaming SQL query, deployed by spark-sql-runner."},
    )

    name: str = Field(description=f"Unique job name: {NAME_HINT}.", json_schema_extra=_on_change("identity"))
    description: str = Field(
        "", description="What the query does; written into every output row.", json_schema_extra=_on_change("restart")
    )
    target_table: str = Field(
        alias="target-table",
        description="Declared table the query writes to.",
        json_schema_extra=_on_change("new-version"),
    )
    sql: str | None = Field(
        None, description="One Spark SQL SELECT over declared tables.", json_schema_extra=_on_change("judged")
    )
    code: str | None = Field(
        None,
        description="Python snippet: gets `spark`, `tables`, `table(name)`, `sql(text)`; "
        "must assign a streaming DataFrame to `execution_output`.",
        json_schema_extra=_on_change("judged"),
    )
    spark_properties: dict[str, str] = Field(
        default_factory=dict,
        alias="sparkProperties",
        description="Spark properties; merged over the template's.",
        json_schema_extra=_on_change("restart"),
    )
    trigger_interval: str = Field(
        "10 seconds",
        alias="trigger-interval",
        description="Micro-batch interval, e.g. '10 seconds'.",
        json_schema_extra=_on_change("restart"),
    )
    on_query_change: Literal["continue", "reprocess"] = Field(
        "continue",
        alias="on-query-change",
        description="When a change discards state: 'continue' reads on from where the previous version "
        "stopped (no duplicates); 'reprocess' re-reads from each source's startup position.",
        json_schema_extra=_on_change("none"),
    )
    retention: Retention = Field(
        default_factory=Retention,
        description="Savepoints and runs kept per version.",
        json_schema_extra=_on_change("none"),
    )
    mode: Literal["application", "session"] = Field(
        "application",
        description="'application': the query is its own Spark application (isolation); 'session': a query "
        "in the team's long-running session application (seconds to take effect, one driver for all).",
        json_schema_extra=_on_change("restart"),
    )
    restart_strategy: RestartStrategy | None = Field(
        None,
        alias="restart-strategy",
        description="How the job comes back after a run-time failure: attempts (within failure-window, or "
        "'unlimited'), delay, backoff, max-delay, failure-window. Not set: application jobs keep restarting "
        "(10 seconds, doubling up to 5 minutes); session queries follow the session's protection.",
        json_schema_extra=_on_change("restart"),
    )
    meta: Meta | None = Field(None, description="Set by the runner on deploy.", json_schema_extra=_on_change("runner"))

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not re.match(NAME_PATTERN, value):
            raise invalid("MANIFEST_INVALID_NAME", name=value)
        return value

    @field_validator("target_table")
    @classmethod
    def _target(cls, value: str) -> str:
        if not value.strip():
            raise invalid("MANIFEST_EMPTY_FIELD", name="target-table")
        return value.strip()

    @field_validator("spark_properties", mode="before")
    @classmethod
    def _properties(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        converted: dict[str, Any] = {}
        for key, item in value.items():
            if isinstance(item, bool):
                converted[str(key)] = "true" if item else "false"
            elif isinstance(item, int | float | str):
                converted[str(key)] = str(item)
            else:
                raise invalid(
                    "MANIFEST_INVALID_FIELD_TYPE",
                    name=f"sparkProperties.{key}",
                    expected="must be a string, number or boolean",
                )
        engine = converted.get(CHANGELOG_ENGINE)
        if engine is not None and engine not in CHANGELOG_ENGINES:
            raise invalid("MANIFEST_INVALID_CHANGELOG_ENGINE", key=CHANGELOG_ENGINE, value=engine)
        for key, item in converted.items():
            for reason in placeholder_syntax.check_syntax(item):
                raise invalid("MANIFEST_INVALID_PLACEHOLDER", key=key, reason=reason)
            if placeholder_syntax.names_in(item) and placeholders.is_launch_property(key):
                raise invalid("MANIFEST_PLACEHOLDER_AT_LAUNCH", key=key)
        return converted

    @field_validator("trigger_interval")
    @classmethod
    def _trigger(cls, value: str) -> str:
        if durations.seconds(value) is None:
            raise invalid("MANIFEST_INVALID_INTERVAL", value=value)
        return value.strip()

    @field_validator("sql")
    @classmethod
    def _sql(cls, value: str | None) -> str | None:
        if value is None:
            return None
        return single_statement(value)

    @field_validator("code")
    @classmethod
    def _code(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not value.strip():
            raise invalid("MANIFEST_EMPTY_CODE")
        try:
            tree = ast.parse(value)
        except SyntaxError as error:
            raise invalid("MANIFEST_CODE_SYNTAX_ERROR", code_line=error.lineno, reason=error.msg) from None
        assigned = {
            target.id
            for node in ast.walk(tree)
            if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign)
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
            if isinstance(target, ast.Name)
        }
        if "execution_output" not in assigned:
            raise invalid("MANIFEST_CODE_NO_OUTPUT")
        return value

    @model_validator(mode="after")
    def _one_query(self) -> Manifest:
        if self.sql is not None and self.code is not None:
            raise invalid("MANIFEST_SQL_AND_CODE")
        if self.sql is None and self.code is None:
            raise invalid("MANIFEST_MISSING_QUERY")
        return self

    @property
    def version(self) -> int:
        """The deployed version (``meta.query-version``); 0 for a manifest not deployed yet."""
        return self.meta.query_version if self.meta else 0

    @property
    def trigger_seconds(self) -> float:
        value = durations.seconds(self.trigger_interval)
        assert value is not None, "validated on load"
        return value

    def to_dict(self) -> dict[str, Any]:
        """The manifest as YAML-ready plain data, with the file's key spellings."""
        data = self.model_dump(by_alias=True, exclude_none=True, mode="json")
        return data


ALLOWED_FIELDS = [
    "name",
    "description",
    "target-table",
    "sql",
    "code",
    "sparkProperties",
    "trigger-interval",
    "on-query-change",
    "retention",
    "mode",
    "restart-strategy",
]


def chosen_changelog_engine(manifest: Manifest) -> str:
    """The engine the manifest asks its changelog query to run on (``CHANGELOG_ENGINE``)."""
    return manifest.spark_properties.get(CHANGELOG_ENGINE, CHANGELOG_ENGINES[0])


def single_statement(sql: str) -> str:
    """The SQL without a trailing ';'; more than one statement or none is an error."""
    try:
        tokens = tokenize(sql)
    except UserError as error:
        raise invalid("SQL_SYNTAX_ERROR", reason=error.problems[0].message) from None
    meaningful = [t for t in tokens if t.kind is not Kind.EOF]
    if not meaningful:
        raise invalid("MANIFEST_EMPTY_SQL")
    while meaningful and meaningful[-1].is_punct(";"):
        meaningful.pop()
    if not meaningful:
        raise invalid("MANIFEST_EMPTY_SQL")
    separators = [t for t in meaningful if t.is_punct(";")]
    if separators:
        raise invalid("MANIFEST_MULTIPLE_STATEMENTS", sql_line=separators[0].line)
    return sql[: meaningful[-1].end]


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """``override`` over ``base``: nested mappings merge key by key, everything else replaces."""
    merged = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def json_schema() -> dict[str, Any]:
    """JSON Schema of a manifest file, for editors (meta excluded: users never write it)."""
    schema = Manifest.model_json_schema(by_alias=True, mode="validation")
    schema["properties"].pop("meta", None)
    schema.get("$defs", {}).pop("Meta", None)
    if not schema.get("$defs"):
        schema.pop("$defs", None)
    schema["properties"]["name"]["pattern"] = NAME_PATTERN
    schema["properties"]["name"]["maxLength"] = 63
    schema["oneOf"] = [{"required": ["sql"]}, {"required": ["code"]}]
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return schema


def on_change() -> dict[str, OnChange]:
    """Each manifest field (by its YAML key) and how a change to it is carried out."""
    declared: dict[str, OnChange] = {}
    for name, info in Manifest.model_fields.items():
        extra = info.json_schema_extra
        assert isinstance(extra, dict) and "x-on-change" in extra, f"manifest field {name} declares no x-on-change"
        declared[info.alias or name] = extra["x-on-change"]  # type: ignore[assignment]
    return declared
