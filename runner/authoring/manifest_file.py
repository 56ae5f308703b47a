"""Reading manifests and the job template from YAML, with errors that name the file, field and line."""

from __future__ import annotations

import copy
import difflib
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from runner.authoring import yamlfile
from runner.core.errors import Problem, UserError
from runner.core.manifest import ALLOWED_FIELDS, BUILT_IN_DEFAULTS, NAME_HINT, PER_QUERY_KEYS, Manifest, deep_merge

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


