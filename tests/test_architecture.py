"""The layers and the absence of import cycles, as pyproject.toml's import-linter contracts say.

Imports inside functions count as imports. The contracts are checked on the project as
it is, and on a copy with one forbidden import added, to show that each kind of breach
is caught: the core importing pyspark, the core importing the CLI, and a cycle between
two modules of one package. The tests themselves share their helpers through the helper
modules of tests/ (tests/__init__.py), never by one test module importing another.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
PACKAGES = ("runner", "jobs", "infra", "demo")


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(root)}  # the packages under root, not the installed ones
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(root / "pyproject.toml"), "--no-cache", "--no-logo"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_every_layer_and_cycle_contract_is_kept():
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "4 kept, 0 broken" in result.stdout


@pytest.fixture(scope="module")
def copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("project")
    shutil.copy2(ROOT / "pyproject.toml", root / "pyproject.toml")
    for package in PACKAGES:
        shutil.copytree(ROOT / package, root / package, ignore=shutil.ignore_patterns("__pycache__"))
    return root


@pytest.mark.parametrize(
    ("module", "added", "broken"),
    [
        ("runner/core/datatypes.py", "import pyspark.sql.types", "runner.core is not allowed to import pyspark"),
        (
            "runner/core/tables.py",
            "from runner.cli.output import step",
            "runner.core is not allowed to import runner.cli",
        ),
        (
            "runner/core/sqltokens.py",
            "from runner.core.catalog import Catalog",
            "No import cycles among sibling packages and modules",
        ),
    ],
)
def test_a_forbidden_import_breaks_a_contract(copy: Path, module: str, added: str, broken: str):
    path = copy / module
    original = path.read_text()
    try:
        # inside a function: such imports count too
        path.write_text(original + f"\n\ndef _added() -> None:\n    {added}  # noqa: F401\n")
        result = lint_imports(copy)
    finally:
        path.write_text(original)
    assert result.returncode != 0
    assert broken in result.stdout, result.stdout


def imported_test_modules(source: str) -> list[str]:
    """The test modules (``tests.test_*``) that a module's source imports, inside functions too."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            module = ("tests." if node.level else "") + (node.module or "")
            names = [module, *(f"{module}.{alias.name}" for alias in node.names)]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        found += [name for name in names if name.startswith("tests.test_")]
    return found


def test_no_test_module_imports_another_one_helpers_are_shared_from_helper_modules():
    importing = {path.name: imported_test_modules(path.read_text()) for path in (ROOT / "tests").glob("*.py")}
    assert {name: found for name, found in importing.items() if found} == {}
    other = "tests.test_job"  # spelt apart, so that a search for such imports finds none here either
    breaches = (
        f"from {other} import run_once",
        f"def f():\n    import {other}",
        "from tests import test_job",
        "from .test_job import run_once",
    )
    assert all(imported_test_modules(breach) for breach in breaches)
