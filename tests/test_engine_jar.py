"""The runner's own jar (``jobs/java/engine/``, built by ``make jars``): named after its sources and the pyspark it is
compiled against, so that an edited source is never run from an older build, and on the Spark applications'
classpath once it is built."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from runner.core import jars


@pytest.fixture
def sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    copied = tmp_path / "engine"
    shutil.copytree(jars.ENGINE_SOURCES, copied)
    monkeypatch.setattr(jars, "ENGINE_SOURCES", copied)
    monkeypatch.setenv(jars.CACHE_ENV, str(tmp_path / "cache"))
    return copied


def test_an_edited_source_or_a_new_one_names_another_jar(sources: Path):
    first = jars.engine_jar()
    assert first == jars.engine_jar(), "the same sources name the same jar"
    aggregate = sources / "sqlrunner" / "engine" / "GroupAggregate.java"
    aggregate.write_text(aggregate.read_text() + "\n// edited\n")
    edited = jars.engine_jar()
    assert edited != first
    (sources / "sqlrunner" / "engine" / "Another.java").write_text("package sqlrunner.engine;\nclass Another {}\n")
    assert jars.engine_jar() not in (first, edited)
    assert jars.engine_jar().parent == Path(jars.cache_root()) / jars.ENGINE


def test_the_spark_classpath_has_the_jar_once_it_is_built(sources: Path):
    assert str(jars.engine_jar()) not in jars.classpath(jars.SPARK).split(":")
    jars.engine_jar().parent.mkdir(parents=True)
    jars.engine_jar().write_bytes(b"PK")
    assert jars.classpath(jars.SPARK).split(":")[-1] == str(jars.engine_jar())
    assert str(jars.engine_jar()) not in jars.classpath(jars.BROKER)
