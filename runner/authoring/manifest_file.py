"""Reading manifests and the job template from YAML, with errors that name the file, field and line."""

from __future__ import annotations

import copy
import difflib
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from runner.authoring import yamlfile
from runner.core.error_catalogue import CATALOGUE
from runner.core.errors import Problem, UserError
from runner.core.manifest import ALLOWED_FIELDS, BUILT_IN_DEFAULTS, PER_QUERY_KEYS, Manifest, deep_merge

# A problem with a value the template sets is the template's, under the template's code.
_TEMPLATE_CODES = {
    "MANIFEST_UNKNOWN_FIELD": "TEMPLATE_UNKNOWN_FIELD",
    "MANIFEST_INVALID_FIELD_TYPE": "TEMPLATE_INVALID_FIELD_TYPE",
    "MANIFEST_INVALID_INTERVAL": "TEMPLATE_INVALID_INTERVAL",
}
_FIELD_NAMES = {
    "target_table": "target-table",
    "spark_properties": "sparkProperties",
    "trigger_interval": "trigger-interval",
    "on_query_change": "on-query-change",
    "restart_strategy": "restart-strategy",
    "max_delay": "max-delay",
    "failure_window": "failure-window",
    "query_id": "query-id",
    "query_version": "query-version",
    "query_create_timestamp": "query-create-timestamp",
}


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
        raise UserError.of("TEMPLATE_NOT_A_MAPPING", file=file)
    problems = []
    for key in data:
        if key in PER_QUERY_KEYS or key == "meta":
            problems.append(
                Problem.of("TEMPLATE_PER_QUERY_FIELD", file=file, field=str(key), line=doc.line_of(key), key=key)
            )
        elif key not in ALLOWED_FIELDS:
            problems.append(_unknown_field(str(key), file, doc.line_of(key), "TEMPLATE_UNKNOWN_FIELD"))
    if problems:
        raise UserError(problems)
    merged = deep_merge(BUILT_IN_DEFAULTS, data)
    # Validate the template's values with a stand-in query so type errors point at the template.
    probe = deep_merge(merged, {"name": "template", "target-table": "t", "sql": "SELECT 1"})
    _validate(probe, file, doc, in_template=True)
    return merged


def parse_manifest(
    text: str, template: dict[str, Any] | None = None, *, file: str | None = None, allow_meta: bool = False
) -> Manifest:
    """Validate one manifest's text and merge it over the template."""
    doc = yamlfile.load(text, file=file)
    data = doc.data
    if data is None:
        raise UserError.of("MANIFEST_EMPTY", file=file, fields=", ".join(ALLOWED_FIELDS[:5]))
    if not isinstance(data, dict):
        raise UserError.of("MANIFEST_NOT_A_MAPPING", file=file, fields=", ".join(ALLOWED_FIELDS))
    if "meta" in data and not allow_meta:
        raise UserError.of("MANIFEST_RESERVED_FIELD", file=file, field="meta", line=doc.line_of("meta"))
    merged = deep_merge(template if template is not None else BUILT_IN_DEFAULTS, data)
    return _validate(merged, file, doc, in_template=False)


def load_manifest(
    path: Path, template: dict[str, Any] | None = None, *, display: str | None = None, allow_meta: bool = False
) -> Manifest:
    file = display or str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise UserError.of("MANIFEST_UNREADABLE", file=file, reason=error.strerror) from None
    manifest = parse_manifest(text, template, file=file, allow_meta=allow_meta)
    stem = path.name.rsplit(".", 1)[0]
    if stem not in (manifest.name, "job-template") and not allow_meta:
        # A name/file mismatch makes `sql-runner run x.yaml` deploy something named otherwise.
        doc = yamlfile.load(text, file=file)
        raise UserError.of(
            "MANIFEST_NAME_MISMATCH",
            file=file,
            field="name",
            line=doc.line_of("name"),
            name=manifest.name,
            file_name=path.name,
            stem=stem,
        )
    return manifest


def _validate(data: dict[str, Any], file: str | None, doc: yamlfile.YamlDocument, *, in_template: bool) -> Manifest:
    try:
        return Manifest.model_validate(data)
    except ValidationError as error:
        problems = [_problem(err, file, doc) for err in error.errors()]
        if in_template:
            problems = [p.model_copy(update={"code": _TEMPLATE_CODES.get(p.code, p.code)}) for p in problems]
        raise UserError(problems) from None


def _unknown_field(key: str, file: str | None, line: int | None, code: str) -> Problem:
    close = difflib.get_close_matches(key, ALLOWED_FIELDS, n=1)
    suggestion = f"did you mean '{close[0]}'? " if close else ""
    return Problem.of(
        code, file=file, field=key, line=line, key=key, suggestion=suggestion, allowed=", ".join(ALLOWED_FIELDS)
    )


def _problem(err: dict[str, Any], file: str | None, doc: yamlfile.YamlDocument) -> Problem:
    loc = [(_FIELD_NAMES.get(str(p), str(p))) for p in err["loc"]]
    field = ".".join(loc) or None
    line = doc.line_of(*loc) if loc else None
    kind = err["type"]
    if kind == "extra_forbidden":
        return _unknown_field(field or "?", file, line, "MANIFEST_UNKNOWN_FIELD")
    if kind == "missing":
        return Problem.of("MANIFEST_MISSING_REQUIRED_FIELD", file=file, field=field, name=field)
    if kind in CATALOGUE:  # the Manifest model's own checks raise registered codes
        if kind == "MANIFEST_SQL_AND_CODE":
            field, line = "sql", doc.line_of("code")
        elif kind == "MANIFEST_MISSING_QUERY":
            field, line = None, None
        return Problem.of(kind, file=file, field=field, line=line, **err.get("ctx", {}))
    expected = err["msg"].replace("Input should be", "must be")
    return Problem.of("MANIFEST_INVALID_FIELD_TYPE", file=file, field=field, line=line, name=field, expected=expected)
