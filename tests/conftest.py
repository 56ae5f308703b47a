"""Shared fixtures: one local SparkSession per test process, and throw-away projects."""

from __future__ import annotations

import contextlib
import os
import textwrap
from pathlib import Path

import pytest

from jobs.jvm import scala_list
from tests import tiers

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

METADATA_DDL = """,
  __create_timestamp TIMESTAMP(3),
  __query_name STRING,
  __query_description STRING,
  __query_id STRING,
  __query_version INT,
  __query_create_timestamp TIMESTAMP(3)"""


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--fast",
        action="store_true",
        help="only the tests that need no JVM and no server (make test-fast; tests/tiers.py)",
    )


def pytest_configure(config: pytest.Config) -> None:
    for need, what in tiers.NEEDS.items():
        config.addinivalue_line("markers", f"{need}: {what}")
    if hasattr(config, "workerinput"):
        return  # a test process: it inherits what the controlling one set up before starting it
    from tests.services import make_run_folder

    # this run's own folder for what it starts (a broker, a server), even inside another run's test: it stops
    # and removes only what is its own
    make_run_folder()
    if config.getoption("fast"):
        return  # no Spark starts: its class-data archive is not needed
    if "SPARK_SUBMIT_OPTS" not in os.environ:
        # Every JVM spark-submit starts (jobs, sessions, the test processes' own Spark) starts in half
        # the CPU (tests/jvmcds.py).
        from tests.jvmcds import spark_options

        os.environ["SPARK_SUBMIT_OPTS"] = spark_options()


# The modules whose tests run longest (minutes of jobs, kills and restarts), longest first. make test splits
# the tests between its processes in collection order and lets an idle one take over half of another's
# remaining tests: with these first, the long tests spread over all of them from the start instead of one
# finishing alone at the end.
# (The platform's journey, ten minutes, runs in a pytest of its own beside them: tests/suite.py.)
LONG_FIRST = (
    "test_yarn_restarts",
    "test_yarn_deploys",
    "test_yarn_session",
    "test_changelog_kills",
    "test_lookup_e2e",
    "test_lifecycle",
    "test_s3_state",
    "test_kafka_jobs",
    "test_state_safety",
    "test_session",
    "test_restarts",
    "test_secrets",
    "test_dead_letters",
    "test_changelog",
    "test_lookup",
    "test_lookup_outage",
    "test_console",
    "test_console_actions",
)


# A test on the run's YARN cluster shares its containers with the others' applications and the journey's, which
# on a loaded machine took it past the suite's 10 minutes (pyproject.toml) while each of its steps kept within
# its own limit: those limits (e.g. YARN_STEP) catch a stuck application; this one a stuck test.
ON_YARN_TIMEOUT = 1200


@pytest.hookimpl(tryfirst=True)  # before -m deselects by the marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tiers.mark_from_fixtures(items)
    if config.getoption("fast"):
        slow = [item for item in items if not tiers.fast(item)]
        if slow:
            config.hook.pytest_deselected(items=slow)
            items[:] = [item for item in items if tiers.fast(item)]

    for item in items:
        if "yarn" in getattr(item, "fixturenames", ()) and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(ON_YARN_TIMEOUT))

    def rank(item: pytest.Item) -> int:
        module = item.module.__name__.rsplit(".", 1)[-1] if item.module else ""
        return LONG_FIRST.index(module) if module in LONG_FIRST else len(LONG_FIRST)

    items.sort(key=rank)  # stable: each module's tests keep their order


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    with tiers.watching(item):
        return (yield)


@pytest.fixture(autouse=True)
def _uses_only_what_its_marks_say():
    """A test that used what its marks do not say fails as it ends (tests/tiers.py)."""
    yield
    tiers.verdict()


def pytest_unconfigure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):
        from tests.services import stop_shared

        stop_shared()


@pytest.fixture(scope="session")
def kafka():
    """A client of the test run's Kafka broker (one per run, shared by the test processes; topics per test)."""
    from tests.services import shared_broker

    return shared_broker()


@pytest.fixture(scope="session")
def yarn():
    """The test run's YARN cluster (one per run, shared by the test processes; an application per test)."""
    from tests.services import shared_yarn

    return shared_yarn()


@pytest.fixture(scope="session")
def postgres():
    """The test run's PostgreSQL server (one per run, shared by the test processes; tables per test)."""
    from tests.services import shared_postgres

    return shared_postgres()


@pytest.fixture
def pg_table(postgres):
    """A function making a PostgreSQL table unique to the test, with the metadata columns; returns its name:
    ``pg_table("accountid TEXT, n BIGINT", key="accountid")``."""
    import uuid

    from tests.tablehelpers import PG_METADATA

    def make(columns: str, key: str) -> str:
        name = f"t_{uuid.uuid4().hex[:10]}"
        postgres.execute(f"CREATE TABLE {name} ({columns}{PG_METADATA}, PRIMARY KEY ({key}))")
        return name

    return make


@pytest.fixture
def topic(kafka, request):
    """A function making topics unique to the test: ``topic("in", partitions=3)``."""
    import re
    import uuid

    prefix = re.sub(r"[^a-zA-Z0-9]+", "-", request.node.name)[:60]

    def make(name: str, partitions: int = 1) -> str:
        return kafka.create_topic(f"{prefix}-{name}-{uuid.uuid4().hex[:6]}", partitions)

    return make


@pytest.fixture(scope="session", autouse=True)
def _s3_conditional_writes_atomic():
    """moto's conditional writes made atomic, as S3's are (tests/motoserver.py), for every test."""
    from tests.motoserver import atomic_conditional_writes

    with atomic_conditional_writes():
        yield


@pytest.fixture(scope="session")
def spark():
    from runner.analysis.session import local_session

    session = local_session("sql-runner-tests")
    # The tests' own streaming queries run with the default trigger, which looks for new input every 10 ms while
    # idle; a file source lists its folder and builds two Hadoop configurations each time, so eleven idle queries
    # took half the CPU of the test that runs them. A tenth of a second is as prompt for a test that writes input
    # and then waits for it to be processed.
    session.conf.set("spark.sql.streaming.pollingDelay", "100ms")
    yield session
    session.stop()


@pytest.fixture
def rocksdb(spark):
    """The test process's Spark set up, as a job's is while its changelog query starts, for queries that keep
    their state in RocksDB (the incremental operators, ``jobs/java/engine/``); as it was after the test."""
    from jobs.changelog.incremental import STATE_SETTINGS
    from runner.core import jars

    assert jars.engine_jar().is_file(), "make jars builds the runner's jar"
    # one state store per partition and operator, and few of them
    settings = {**STATE_SETTINGS, "spark.sql.shuffle.partitions": "1"}
    kept = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    yield spark
    for key, value in kept.items():
        if value is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, value)


class ProjectDir:
    """A project folder on disk: manifests/, manifests/tables/, data folders."""

    def __init__(self, root: Path):
        self.root = root
        (root / "manifests" / "tables").mkdir(parents=True)

    def manifest(self, name: str, body: str) -> Path:
        path = self.root / "manifests" / f"{name}.yaml"
        path.write_text(textwrap.dedent(body).lstrip(), encoding="utf-8")
        return path

    def ddl(self, name: str, body: str) -> Path:
        path = self.root / "manifests" / "tables" / f"{name}.sql"
        path.write_text(textwrap.dedent(body).lstrip(), encoding="utf-8")
        return path

    def template(self, body: str) -> Path:
        path = self.root / "manifests" / "job-template.yaml"
        path.write_text(textwrap.dedent(body).lstrip(), encoding="utf-8")
        return path


def kill_recorded_jobs(state: Path) -> None:
    """Kill every detached job a test started (their records are in the state store)."""
    from runner.core.bucket import LocalBucket

    kill_jobs_recorded_in(LocalBucket(state / "manifests"))


def kill_jobs_recorded_in(manifests) -> None:
    """Kill every detached job recorded in a manifests bucket (``jobs/<name>.json``), local or on S3."""
    import json
    import signal

    for key in manifests.keys("jobs/"):
        blob = manifests.read(key)
        if blob is None:
            continue
        tiers.require("e2e", f"a detached job it deployed ({key})")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(json.loads(blob.text)["pid"], signal.SIGKILL)


@pytest.fixture
def project(tmp_path: Path):
    folder = ProjectDir(tmp_path / "project")
    yield folder
    kill_recorded_jobs(folder.root / ".sql-runner")


TRANSACTIONS_DDL = (
    """
CREATE TABLE `demo`.`card-transactions` (
  transaction_id STRING,
  account_id     STRING NOT NULL,
  payee          STRING,
  amount         DOUBLE,
  ts             TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = 'data/in', 'format' = 'json');

CREATE TABLE `demo`.`high-value-tx` (
  transaction_id STRING,
  account_id STRING,
  amount DOUBLE,
  ts TIMESTAMP(3)"""
    + METADATA_DDL
    + """
) WITH ('connector' = 'filesystem', 'path' = 'data/out', 'format' = 'json');
"""
)

HIGH_VALUE_MANIFEST = """
name: high-value
description: "Card transactions above 500"
target-table: "`demo`.`high-value-tx`"
sql: |
  SELECT transaction_id, account_id, amount, ts
  FROM `demo`.`card-transactions`
  WHERE amount > 500
"""


@pytest.fixture
def demo_project(project: ProjectDir) -> ProjectDir:
    """A project with the transactions source, a high-value sink and its manifest."""
    project.ddl("tables", TRANSACTIONS_DDL)
    project.manifest("high-value", HIGH_VALUE_MANIFEST)
    return project


def plan_nodes(plan) -> list[str]:
    """The class names of a physical plan's nodes (py4j SparkPlan), root first."""
    names, pending = [], [plan]
    while pending:
        node = pending.pop()
        names.append(node.getClass().getSimpleName())
        pending.extend(scala_list(node.children()))
    return names
