"""What a test needs, as marks, and a guard that fails a test using something its marks do not say.

``make test-fast`` (``pytest --fast``) runs the tests that need neither a JVM nor a server: none of the marks in
``SLOW``; ``make test`` runs them all.
A mark comes from the fixture that provides what it names where there is one (``FROM_FIXTURES``, applied at
collection); the other marks are written on the tests. Either way the guard checks them while the test runs,
so a forgotten mark fails the test in ``make test`` too, instead of slowing ``make test-fast`` down unseen:

- ``spark``: any Spark JVM started while the test runs (the test's own SparkSession, a ``spark-submit``, a
  standalone cluster, in the test process or in a command it runs), seen through a ``spark-env.sh`` that
  every Spark launch script sources; and a SparkSession taken in the test process, even one that exists.
- ``kafka``, ``postgres``, ``yarn``: the run's broker, server or YARN cluster (tests/services.py), or a
  PostgreSQL server of the test's own.
- ``s3``: moto, in-process or its server (tests/motoserver.py).
- ``browser``: Chromium (tests/browser.py).
- ``e2e``: detached jobs the test deployed, found recorded in its state store when they are killed.
"""

from __future__ import annotations

import atexit
import itertools
import os
import shutil
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path
from unittest import mock

import pytest

NEEDS = {
    "spark": "a JVM: Spark (an in-process SparkSession, a spark-submit'ed job or session, a Spark cluster) or javac",
    "kafka": "the Kafka broker",
    "postgres": "a PostgreSQL server",
    "s3": "moto playing S3 (or other AWS services), in-process or as its server",
    "browser": "Chromium, driven by Playwright",
    "e2e": "several real processes end to end: the CLI deploying detached jobs or a session",
    "infra": "the infrastructure's tools: CDK for Terraform's synth, terraform, checkov, make's packaging",
    "yarn": "the run's YARN cluster (a real ResourceManager and NodeManager, demo/yarn_cluster.py)",
    "platform": "the platform applied on this machine: Terraform against the local AWS endpoint (infra/localaws.py)",
}
# What keeps a test out of ``--fast``: a JVM or a server. moto runs in the test process, as fast as the code it
# stands in front of.
SLOW = ("spark", "kafka", "postgres", "browser", "e2e", "infra", "yarn", "platform")


def fast(item: pytest.Item) -> bool:
    """Whether ``make test-fast`` runs the test: it needs none of the ``SLOW`` marks."""
    return not any(item.get_closest_marker(need) for need in SLOW)


# The fixtures that provide what a mark names: a test using one is marked at collection.
FROM_FIXTURES = {
    "spark": "spark",
    "kafka": "kafka",
    "topic": "kafka",
    "postgres": "postgres",
    "stacks": "infra",
    "yarn": "yarn",
}

SPARK_ENV = """\
# tests/tiers.py: every Spark launch script sources this; it records the launch for the test running now.
if [ -n "${SQL_RUNNER_TEST_SPARK_STARTS:-}" ]; then
  printf '%s\\n' "$*" >> "$SQL_RUNNER_TEST_SPARK_STARTS"
fi
"""

_current: pytest.Item | None = None
_unmarked_uses: list[str] = []
_spark_conf: Path | None = None
_tests = itertools.count()


def mark_from_fixtures(items: list[pytest.Item]) -> None:
    """Mark each test with what its fixtures provide."""
    for item in items:
        for fixture, need in FROM_FIXTURES.items():
            if fixture in getattr(item, "fixturenames", ()) and item.get_closest_marker(need) is None:
                item.add_marker(need)


def marked(need: str) -> bool:
    """Whether the running test is marked ``need`` (outside a test, e.g. in bench/: yes)."""
    return _current is None or _current.get_closest_marker(need) is not None


def require(need: str, what: str) -> None:
    """Note that the running test uses ``what``, which needs the mark ``need``; the test fails at its end
    without it."""
    if not marked(need):
        _unmarked_uses.append(f"{what} (mark it `{need}`: {NEEDS[need]})")


def _spark_conf_dir() -> Path:
    global _spark_conf
    if _spark_conf is None:
        _spark_conf = Path(tempfile.mkdtemp(prefix="sql-runner-tiers-"))
        atexit.register(shutil.rmtree, _spark_conf, True)  # one per test process, gone with it
        (_spark_conf / "spark-env.sh").write_text(SPARK_ENV)
    return _spark_conf


def _recording(target: object, name: str, need: str, what: str) -> mock._patch:
    original = getattr(target, name)

    def recorded(*args, **kwargs):
        require(need, what)
        return original(*args, **kwargs)

    return mock.patch.object(target, name, recorded)


class Watch:
    """While one test runs: what it uses that its marks do not say is noted (``require``)."""

    def __init__(self, item: pytest.Item):
        self.item = item
        self.patches = ExitStack()
        self.spark_starts: Path | None = None
        self.saved_env: dict[str, str | None] = {}

    def __enter__(self) -> Watch:
        global _current
        _current = self.item
        _unmarked_uses.clear()
        if not marked("spark"):
            self.spark_starts = _spark_conf_dir() / f"starts-{os.getpid()}-{next(_tests)}"
            self._setenv("SPARK_CONF_DIR", str(_spark_conf_dir()))
            self._setenv("SQL_RUNNER_TEST_SPARK_STARTS", str(self.spark_starts))
            session = sys.modules.get("pyspark.sql.session")
            if session is not None:  # not imported yet: a session taken would launch its JVM, seen above
                self.patches.enter_context(
                    _recording(session.SparkSession.Builder, "getOrCreate", "spark", "a SparkSession in the test")
                )
        if not marked("postgres"):
            from demo.postgres_server import PostgresServer

            self.patches.enter_context(_recording(PostgresServer, "start", "postgres", "a PostgreSQL server"))
        if not marked("s3"):
            from moto.core.models import MockAWS

            self.patches.enter_context(_recording(MockAWS, "start", "s3", "moto's AWS mock"))
        return self

    def _setenv(self, name: str, value: str) -> None:
        self.saved_env[name] = os.environ.get(name)
        os.environ[name] = value

    def unmarked_uses(self) -> list[str]:
        """What the test used that its marks do not say, so far."""
        found = list(_unmarked_uses)
        if self.spark_starts is not None and self.spark_starts.exists():
            launches = self.spark_starts.read_text().splitlines()
            found += [
                f"a Spark JVM: spark-class {launch[:160]} (mark it `spark`: {NEEDS['spark']})" for launch in launches
            ]
        return found

    def __exit__(self, *exc: object) -> None:
        global _current
        self.patches.close()
        for name, value in self.saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        _current = None
        _unmarked_uses.clear()


_watch: Watch | None = None


def watching(item: pytest.Item) -> Watch:
    global _watch
    _watch = Watch(item)
    return _watch


def verdict() -> None:
    """Fail the running test if it used something its marks do not say (called as it ends)."""
    if _watch is None:
        return
    found = _watch.unmarked_uses()
    if found:
        pytest.fail(
            f"{_watch.item.nodeid} uses what its marks do not say (make test-fast would run it):\n  "
            + "\n  ".join(dict.fromkeys(found)),
            pytrace=False,
        )
