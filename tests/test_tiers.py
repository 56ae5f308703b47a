"""The marks are checked, not trusted: a test that starts a JVM without saying so fails (tests/tiers.py).

The probe runs in a pytest of its own with this suite's conftest as a plugin, so the check is the one every test
here runs under."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

PROBE = """
import subprocess
from pathlib import Path

import pyspark
import pytest

SUBMIT = str(Path(pyspark.__file__).parent / "bin" / "spark-submit")


def test_starts_a_jvm_unmarked():
    subprocess.run([SUBMIT, "--version"], capture_output=True, check=True)


def test_needs_nothing():
    assert True


@pytest.mark.spark
def test_starts_a_jvm_marked():
    subprocess.run([SUBMIT, "--version"], capture_output=True, check=True)
"""


@pytest.mark.spark  # the probe starts spark-submit
def test_a_test_that_starts_spark_unmarked_fails_and_fast_leaves_out_the_marked_one(tmp_path: Path):
    (tmp_path / "test_probe.py").write_text(PROBE)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("SQL_RUNNER_TEST_RUN", None)  # the probe's run is its own (tests/services.py)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-q", "-rf", "--fast", "-p", "no:cacheprovider"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = run.stdout
    assert run.returncode == 1, out + run.stderr
    # the unmarked one fails as it ends; the one needing nothing passes; --fast leaves the marked one out
    assert "2 passed, 1 deselected, 1 error" in out and "ERROR at teardown of test_starts_a_jvm_unmarked" in out, out
    assert "test_probe.py::test_starts_a_jvm_unmarked uses what its marks do not say" in out, out
    assert "a Spark JVM: spark-class" in out and "mark it `spark`" in out, out
