"""pyspark's internals are reached in one module (jobs/jvm.py), and a Spark outside the line they were
checked on is refused with one clear line before anything runs."""

from __future__ import annotations

import ast
from pathlib import Path

import pyspark
import pytest

from jobs.jvm import SUPPORTED, check_spark_version
from runner.core.errors import UserError

ROOT = Path(__file__).resolve().parents[1]
PRIVATE = {"_jvm", "_jsparkSession", "_jdf", "_jsq", "_jsc", "_gateway", "_gateway_client", "_jconf"}


def test_only_jobs_jvm_touches_pysparks_private_attributes():
    found = []
    for path in sorted(p for package in ("runner", "jobs") for p in (ROOT / package).rglob("*.py")):
        if path == ROOT / "jobs" / "jvm.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Attribute) and node.attr in PRIVATE:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: .{node.attr}")
    assert not found, "reach pyspark's internals through jobs/jvm.py:\n" + "\n".join(found)


def test_the_installed_pyspark_is_supported():
    check_spark_version()
    assert tuple(int(p) for p in pyspark.__version__.split(".")[:2]) in SUPPORTED


@pytest.mark.parametrize("version", ["3.5.1", "4.1.0", "5.0.0", "dev"])
def test_another_spark_line_is_refused_naming_the_supported_one(version: str):
    with pytest.raises(UserError) as raised:
        check_spark_version(version)
    (problem,) = raised.value.problems
    assert problem.code == "SPARK_VERSION_UNSUPPORTED" and raised.value.exit_code == 2
    assert f"pyspark {version} is not" in problem.render() and "4.0.x" in problem.render()
