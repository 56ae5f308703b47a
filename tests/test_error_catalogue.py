"""The error catalogue: every code raised is registered once, every registered code is raised
somewhere, every template renders, and a user-fixable problem exits 2 with a hint.

Scanned statically (the AST of runner/ and jobs/): the first argument of Problem.of,
UserError.of, the manifest model's invalid() and the connector checks' problem(); every
`code=` keyword and `code` parameter default; the values of the *_CODES mappings. At run
time Problem.of refuses a code the catalogue does not hold.
"""

from __future__ import annotations

import ast
import re
import string
from pathlib import Path

import pytest

from runner.core.error_catalogue import CATALOGUE
from runner.core.errors import Problem, UnregisteredErrorCode, UserError

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted(p for package in ("runner", "jobs") for p in (ROOT / package).rglob("*.py"))
CATALOGUE_FILE = ROOT / "runner" / "core" / "error_catalogue.py"
CODE = re.compile(r"^[A-Z][A-Z0-9]*(_[A-Z0-9]+)+$")
RAISERS = {"Problem.of", "UserError.of", "invalid", "problem"}


def _literal(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _scan() -> tuple[dict[str, list[str]], set[str]]:
    """(codes in raising positions -> where, every code-like literal outside the catalogue)."""
    raised: dict[str, list[str]] = {}
    literals: set[str] = set()
    for path in SOURCES:
        if path == CATALOGUE_FILE:
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            found: list[str | None] = []
            if isinstance(node, ast.Call):
                if ast.unparse(node.func) in RAISERS and node.args:
                    found.append(_literal(node.args[0]))
                found += [_literal(k.value) for k in node.keywords if k.arg == "code"]
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                args = node.args.args + node.args.kwonlyargs
                defaults = [None] * (len(node.args.args) - len(node.args.defaults)) + list(node.args.defaults)
                defaults += list(node.args.kw_defaults)
                found += [_literal(d) for a, d in zip(args, defaults, strict=True) if a.arg == "code" and d]
            elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict):
                if any(isinstance(t, ast.Name) and t.id.endswith("_CODES") for t in node.targets):
                    found += [_literal(v) for v in node.value.values]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and CODE.match(node.value):
                literals.add(node.value)
            for code in filter(None, found):
                raised.setdefault(code, []).append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return raised, literals


def test_every_code_raised_is_registered_and_every_registered_code_is_raised():
    raised, literals = _scan()
    unregistered = {code: where for code, where in raised.items() if code not in CATALOGUE}
    assert not unregistered, f"raised but not in runner/core/error_catalogue.py: {unregistered}"
    never = sorted(set(CATALOGUE) - set(raised) - literals)
    assert not never, f"registered but raised nowhere: {never}"


def test_problems_are_made_from_the_catalogue_only():
    direct = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for path in SOURCES
        if path.name != "errors.py"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call)
        and ast.unparse(node.func) in ("Problem", "PydanticCustomError")
        and "CATALOGUE[" not in ast.unparse(node)
    ]
    assert not direct, f"problems built without the catalogue: {direct}"


@pytest.mark.parametrize("code", sorted(CATALOGUE))
def test_templates_render_and_user_errors_exit_2(code: str):
    entry = CATALOGUE[code]
    fields = {
        name for text in (entry.message, entry.hint or "") for _, name, _, _ in string.Formatter().parse(text) if name
    }
    problem = Problem.of(code, **{name: f"<{name}>" for name in fields})
    assert problem.message and "{" not in problem.message.replace("${", "")
    assert entry.exit_code == 2 and UserError(problem).exit_code == 2


def test_an_unregistered_code_is_a_defect_not_a_user_error():
    with pytest.raises(UnregisteredErrorCode):
        Problem.of("NO_SUCH_CODE")


def test_a_job_whose_manifest_has_no_meta_is_a_user_error(spark):
    from jobs.metadata import with_metadata
    from runner.core.manifest import Manifest

    manifest = Manifest.model_validate({"name": "not-deployed", "target-table": "t", "sql": "SELECT 1"})
    with pytest.raises(UserError) as caught:
        with_metadata(spark.range(1), manifest)
    assert caught.value.codes == ["JOB_SPEC_WITHOUT_META"] and caught.value.exit_code == 2
