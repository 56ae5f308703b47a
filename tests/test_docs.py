"""What the README tells a reader to type exists: every `make` target it names is one the Makefile has, and
every error code it names is registered."""

from __future__ import annotations

import re
from pathlib import Path

from runner.core.error_catalogue import CATALOGUE

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_every_make_target_the_readme_names_is_in_the_makefile():
    defined = set(re.findall(r"^([a-z][a-z-]*):", (ROOT / "Makefile").read_text(), flags=re.MULTILINE))
    named = set(re.findall(r"`make ([a-z][a-z-]*)", README)) | set(re.findall(r"^make ([a-z][a-z-]*)", README, re.M))
    assert {"run", "test", "jars", "kafka", "bench", "package"} <= named, "the README names its targets"
    assert named <= defined, f"named in the README but not in the Makefile: {sorted(named - defined)}"


# Upper-case words in backticks that are not error codes: environment variables, types, Kafka's protocols.
NOT_CODES = ("AWS_", "SQL_RUNNER_", "KAFKA_BOOTSTRAP", "MSK_", "SPARK_", "PYSPARK_", "TIMESTAMP_", "SASL_")


def test_every_error_code_the_readme_names_is_registered():
    spelt = set(re.findall(r"`([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)`", README))
    named = {word for word in spelt if not word.startswith(NOT_CODES)}
    assert {"KAFKA_CONNECTOR_MISSING", "KAFKA_PROTOCOL_MISMATCH", "S3_CONNECTOR_MISSING"} <= named
    assert named <= set(CATALOGUE), f"named in the README, registered nowhere: {sorted(named - set(CATALOGUE))}"
