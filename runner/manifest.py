"""Query manifests: the YAML schema, template merging and validation with stable codes.

A manifest declares one streaming query. ``manifests/job-template.yaml`` holds defaults;
a manifest overrides it key by key, and nested maps (``sparkProperties``) merge.
"""

from __future__ import annotations

import ast
import copy
import difflib
import re
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError

from runner import placeholders, yamlfile
from runner.errors import Problem, UserError
from runner.sqltokens import Kind, tokenize

NAME_PATTERN = r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$"
NAME_HINT = "lowercase letters, digits and '-', starting and ending with a letter or digit, at most 63 characters"
_INTERVAL = re.compile(r"^\s*(\d+)\s*(milliseconds?|ms|seconds?|s|minutes?|min|hours?|h)\s*$", re.IGNORECASE)

# Job options a manifest may take from the template when it does not set them itself.
BUILT_IN_DEFAULTS: dict[str, Any] = {
    "description": "",
    "trigger-interval": "10 seconds",
    "sparkProperties": {},
    "on-query-change": "continue",
    "retention": {"savepoints": 3, "runs": 3},
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

    name: str = Field(description=f"Unique job name: {NAME_HINT}.")
    description: str = Field("", description="What the query does; written into every output row.")
    target_table: str = Field(alias="target-table", description="Declared table the query writes to.")
    sql: str | None = Field(None, description="One Spark SQL SELECT over declared tables.")
    code: str | None = Field(
        None,
        description="Python snippet: gets `spark`, `tables`, `table(name)`, `sql(text)`; "
        "must assign a streaming DataFrame to `execution_output`.",
    )
    spark_properties: dict[str, str] = Field(
        default_factory=dict, alias="sparkProperties", description="Spark properties; merged over the template's."
    )
    trigger_interval: str = Field(
        "10 seconds", alias="trigger-interval", description="Micro-batch interval, e.g. '10 seconds'."
    )
    on_query_change: Literal["continue", "reprocess"] = Field(
        "continue", alias="on-query-change",
        description="When a change discards state: 'continue' reads on from where the previous version "
        "stopped (no duplicates); 'reprocess' re-reads from each source's startup position.",
    )
    retention: Retention = Field(default_factory=Retention, description="Savepoints and runs kept per version.")
    meta: Meta | None = Field(None, description="Set by the runner on deploy.")

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not re.match(NAME_PATTERN, value):
            raise PydanticCustomError("MANIFEST_INVALID_NAME", "name '{name}' is not valid", {"name": value})
        return value

    @field_validator("target_table")
    @classmethod
    def _target(cls, value: str) -> str:
        if not value.strip():
            raise PydanticCustomError("MANIFEST_EMPTY_FIELD", "target-table is empty")
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
                raise PydanticCustomError(
                    "MANIFEST_INVALID_FIELD_TYPE",
                    "sparkProperties.{key} must be a string, number or boolean",
                    {"key": key},
                )
        return converted

    @field_validator("trigger_interval")
    @classmethod
    def _trigger(cls, value: str) -> str:
        if not _INTERVAL.match(value):
            raise PydanticCustomError(
                "MANIFEST_INVALID_INTERVAL", "trigger-interval '{value}' is not an interval", {"value": value}
            )
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
            raise PydanticCustomError("MANIFEST_EMPTY_CODE", "code is empty")
        try:
            tree = ast.parse(value)
        except SyntaxError as error:
            raise PydanticCustomError(
                "MANIFEST_CODE_SYNTAX_ERROR",
                "Python syntax error at line {line} of the code: {msg}",
                {"line": error.lineno, "msg": error.msg},
            ) from None
        assigned = {
            target.id
            for node in ast.walk(tree)
            if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign)
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
            if isinstance(target, ast.Name)
        }
        if "execution_output" not in assigned:
            raise PydanticCustomError("MANIFEST_CODE_NO_OUTPUT", "code never assigns `execution_output`")
        return value

    @model_validator(mode="after")
    def _one_query(self) -> Manifest:
        if self.sql is not None and self.code is not None:
            raise PydanticCustomError("MANIFEST_SQL_AND_CODE", "both 'sql' and 'code' are set")
        if self.sql is None and self.code is None:
            raise PydanticCustomError("MANIFEST_MISSING_QUERY", "neither 'sql' nor 'code' is set")
        return self

    @property
    def trigger_seconds(self) -> float:
        match = _INTERVAL.match(self.trigger_interval)
        assert match, "validated on load"
        amount, unit = int(match.group(1)), match.group(2).lower()
        if unit.startswith("ms") or unit.startswith("milli"):
            return amount / 1000
        if unit.startswith("min"):
            return amount * 60.0
        if unit.startswith("h"):
            return amount * 3600.0
        return float(amount)

    def to_dict(self) -> dict[str, Any]:
        """The manifest as YAML-ready plain data, with the file's key spellings."""
        data = self.model_dump(by_alias=True, exclude_none=True, mode="json")
        return data

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False, allow_unicode=True)


_HINTS = {
    "MANIFEST_INVALID_NAME": NAME_HINT,
    "MANIFEST_SQL_AND_CODE": "keep exactly one of 'sql' (Spark SQL) or 'code' (Python)",
    "MANIFEST_MISSING_QUERY": "add 'sql: SELECT ...' or a 'code' snippet",
    "MANIFEST_INVALID_INTERVAL": "a number and a unit, e.g. '10 seconds', '500 milliseconds', '1 minute'",
    "MANIFEST_MULTIPLE_STATEMENTS": "a manifest holds one SELECT; split other queries into their own manifests",
    "MANIFEST_EMPTY_SQL": "write the SELECT the job runs",
    "MANIFEST_CODE_NO_OUTPUT": "assign the streaming DataFrame to write: execution_output = ...",
}
_FIELD_NAMES = {
    "target_table": "target-table",
    "spark_properties": "sparkProperties",
    "trigger_interval": "trigger-interval",
    "on_query_change": "on-query-change",
    "query_id": "query-id",
    "query_version": "query-version",
    "query_create_timestamp": "query-create-timestamp",
}
ALLOWED_FIELDS = [
    "name", "description", "target-table", "sql", "code", "sparkProperties", "trigger-interval",
    "on-query-change", "retention",
]


def single_statement(sql: str) -> str:
    """The SQL without a trailing ';'; more than one statement or none is an error."""
    try:
        tokens = tokenize(sql)
    except UserError as error:
        raise PydanticCustomError("SQL_SYNTAX_ERROR", "{msg}", {"msg": error.problems[0].message}) from None
    meaningful = [t for t in tokens if t.kind is not Kind.EOF]
    if not meaningful:
        raise PydanticCustomError("MANIFEST_EMPTY_SQL", "sql is empty")
    while meaningful and meaningful[-1].is_punct(";"):
        meaningful.pop()
    if not meaningful:
        raise PydanticCustomError("MANIFEST_EMPTY_SQL", "sql is empty")
    separators = [t for t in meaningful if t.is_punct(";")]
    if separators:
        raise PydanticCustomError(
            "MANIFEST_MULTIPLE_STATEMENTS",
            "sql holds more than one statement (';' at line {line} of the SQL)",
            {"line": separators[0].line},
        )
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


def load_template(path: Path | None, *, display: str | None = None) -> dict[str, Any]:
    """Template defaults merged over the built-in ones; a missing file means built-ins only."""
    if path is None or not path.exists():
        return copy.deepcopy(BUILT_IN_DEFAULTS)
    return parse_template(path.read_text(encoding="utf-8"), file=display or str(path))


def parse_template(text: str, *, file: str) -> dict[str, Any]:
    """Validate a template's text; its defaults merged over the built-in ones."""
    doc = yamlfile.load(text, file=file, code="TEMPLATE_INVALID_YAML")
    data = doc.data if doc.data is not None else {}
    if not isinstance(data, dict):
        raise UserError(Problem("TEMPLATE_NOT_A_MAPPING", "the template must be a YAML mapping of defaults",
                                file=file))
    problems = []
    for key in data:
        if key in PER_QUERY_KEYS or key == "meta":
            problems.append(Problem("TEMPLATE_PER_QUERY_FIELD", f"'{key}' belongs in each manifest, not the template",
                                    file=file, field=str(key), line=doc.line_of(key)))
        elif key not in ALLOWED_FIELDS:
            problems.append(_unknown_field(str(key), file, doc.line_of(key), "TEMPLATE_UNKNOWN_FIELD"))
    if problems:
        raise UserError(problems)
    merged = deep_merge(BUILT_IN_DEFAULTS, data)
    # Validate the template's values with a stand-in query so type errors point at the template.
    probe = deep_merge(merged, {"name": "template", "target-table": "t", "sql": "SELECT 1"})
    _validate(probe, file, doc, code_prefix="TEMPLATE")
    return merged


def parse_manifest(text: str, template: dict[str, Any] | None = None, *, file: str | None = None,
                   allow_meta: bool = False) -> Manifest:
    """Validate one manifest's text and merge it over the template."""
    doc = yamlfile.load(text, file=file)
    data = doc.data
    if data is None:
        raise UserError(Problem("MANIFEST_EMPTY", "the manifest is empty", file=file,
                                hint=f"a manifest is a mapping with {', '.join(ALLOWED_FIELDS[:5])}"))
    if not isinstance(data, dict):
        raise UserError(Problem("MANIFEST_NOT_A_MAPPING", "a manifest must be a YAML mapping of fields",
                                file=file, hint=f"fields: {', '.join(ALLOWED_FIELDS)}"))
    if "meta" in data and not allow_meta:
        raise UserError(Problem("MANIFEST_RESERVED_FIELD", "'meta' is written by the runner on deploy",
                                file=file, field="meta", line=doc.line_of("meta"), hint="remove the meta section"))
    merged = deep_merge(template if template is not None else BUILT_IN_DEFAULTS, data)
    return _validate(merged, file, doc, code_prefix="MANIFEST")


def load_manifest(path: Path, template: dict[str, Any] | None = None, *, display: str | None = None,
                  allow_meta: bool = False) -> Manifest:
    file = display or str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise UserError(Problem("MANIFEST_UNREADABLE", f"cannot read the manifest: {error.strerror}",
                                file=file)) from None
    manifest = parse_manifest(text, template, file=file, allow_meta=allow_meta)
    stem = path.name.rsplit(".", 1)[0]
    if stem not in (manifest.name, "job-template") and not allow_meta:
        # A name/file mismatch makes `sql-runner run x.yaml` deploy something named otherwise.
        doc = yamlfile.load(text, file=file)
        raise UserError(Problem("MANIFEST_NAME_MISMATCH",
                                f"name '{manifest.name}' does not match the file name '{path.name}'",
                                file=file, field="name", line=doc.line_of("name"),
                                hint=f"rename the file to {manifest.name}.yaml or the manifest to '{stem}'"))
    return manifest


def _validate(data: dict[str, Any], file: str | None, doc: yamlfile.YamlDocument, *, code_prefix: str) -> Manifest:
    try:
        return Manifest.model_validate(data)
    except ValidationError as error:
        problems = [_problem(err, file, doc, code_prefix) for err in error.errors()]
        raise UserError(problems) from None


def _unknown_field(key: str, file: str | None, line: int | None, code: str) -> Problem:
    close = difflib.get_close_matches(key, ALLOWED_FIELDS, n=1)
    hint = (f"did you mean '{close[0]}'? " if close else "") + f"allowed: {', '.join(ALLOWED_FIELDS)}"
    return Problem(code, f"unknown field '{key}'", file=file, field=key, line=line, hint=hint)


def _problem(err: dict[str, Any], file: str | None, doc: yamlfile.YamlDocument, prefix: str) -> Problem:
    loc = [(_FIELD_NAMES.get(str(p), str(p))) for p in err["loc"]]
    field = ".".join(loc) or None
    line = doc.line_of(*loc) if loc else None
    kind = err["type"]
    if kind == "extra_forbidden":
        return _unknown_field(field or "?", file, line, f"{prefix}_UNKNOWN_FIELD")
    if kind == "missing":
        return Problem(f"{prefix}_MISSING_REQUIRED_FIELD", f"required field '{field}' is missing", file=file,
                       field=field, line=None, hint=f"add '{field}: ...'")
    if kind.isupper():  # our own PydanticCustomError codes
        code = kind if prefix == "MANIFEST" or not kind.startswith("MANIFEST_") else kind.replace("MANIFEST_",
                                                                                                     "TEMPLATE_", 1)
        if kind in ("MANIFEST_SQL_AND_CODE", "MANIFEST_MISSING_QUERY"):
            field = "sql" if kind == "MANIFEST_SQL_AND_CODE" else None
            line = doc.line_of("code") if kind == "MANIFEST_SQL_AND_CODE" else None
        return Problem(code, err["msg"], file=file, field=field, line=line, hint=_HINTS.get(kind))
    expected = err["msg"].replace("Input should be", "must be")
    return Problem(f"{prefix}_INVALID_FIELD_TYPE", f"'{field}' {expected}", file=file, field=field, line=line)


def unresolved_properties(manifest: Manifest, env: dict[str, str]) -> list[tuple[str, str]]:
    """sparkProperties whose ``${NAME}`` placeholders are not set in ``env``."""
    return placeholders.unresolved(manifest.spark_properties, env)


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
