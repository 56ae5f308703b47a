"""The Java the runner compiles in a driver's JVM (``jobs/java/``), checked before any JVM runs it.

Each file is compiled by javac against the jars of the pinned pyspark, without starting Spark: a method
Spark renamed, a wrong type or a typo fails here, with javac's message, instead of in a job that would
run without its batch-timestamp rule or refuse to start a query over a lookup table. Every file must hold
the public class it is named after, which is what ``jobs/jvm.py:compiled_class`` loads; every class the
Python asks for must have its file.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pyspark
import pytest

from jobs import batchtime, jvm
from jobs.lookup import rule

SOURCES = sorted(jvm.JAVA.glob("*.java"))


def test_every_class_the_runner_compiles_has_its_file_and_every_file_is_asked_for():
    asked = {batchtime.RULE_CLASS, rule.RULE_CLASS}
    assert {path.stem for path in SOURCES} == asked
    for path in SOURCES:
        assert re.search(rf"^public class {path.stem}\b", path.read_text(), re.MULTILINE), path


@pytest.mark.spark  # javac, a JVM
def test_every_java_source_compiles_against_the_pinned_sparks_jars(tmp_path: Path):
    javac = shutil.which("javac")
    if javac is None:
        pytest.fail("javac (Java 17's JDK) is needed to check jobs/java/; it is not on PATH")
    jars = Path(pyspark.__file__).parent / "jars"
    compiled = subprocess.run(
        [javac, "-proc:none", "-nowarn", "-Xlint:none", "-d", str(tmp_path), "-cp", f"{jars}/*", *map(str, SOURCES)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert compiled.returncode == 0, compiled.stderr
    assert {path.stem for path in SOURCES} <= {path.stem for path in tmp_path.glob("*.class")}
