"""A session query whose build outlives its timeout is parked, and the queries its build starts later are
stopped at once: they would otherwise run unsupervised beside a query the session says is failed.

In this process, over its Spark: the session's query host (``runner/session/host.py``) with a build timeout
of 2 s, and a ``code`` manifest whose snippet takes 6 s before it returns its streaming frame.
"""

from __future__ import annotations

import logging
import time
import uuid
from pathlib import Path

import pytest

from jobs import runtime
from runner.authoring.project import load_project
from runner.core.errors import UserError
from runner.core.identity import JobIdentity
from runner.core.manifest import Meta
from runner.core.protocol.jobspec import JobSpec
from runner.core.protocol.session_config import Protection
from runner.core.protocol.status import JobState
from runner.session.host import QueryHost
from runner.targets.base import Launch
from tests.clihelpers import START, wait_for
from tests.conftest import METADATA_DDL, ProjectDir

pytestmark = pytest.mark.spark


def test_a_build_that_outlives_its_timeout_never_leaves_its_queries_running(
    spark, project: ProjectDir, tmp_path: Path, monkeypatch, caplog
):
    data, done = project.root / "data", tmp_path / "built"
    project.ddl(
        "tables",
        f"""
        CREATE TABLE `demo`.`events` (id STRING)
        WITH ('connector' = 'filesystem', 'path' = '{data / "in"}', 'format' = 'json');
        CREATE TABLE `demo`.`out` (id STRING{METADATA_DDL})
        WITH ('connector' = 'filesystem', 'path' = '{data / "out"}', 'format' = 'json');
        """,
    )
    project.manifest(
        "slow",
        f"""
        name: slow
        target-table: "`demo`.`out`"
        trigger-interval: 1 second
        code: |
          import pathlib, time
          time.sleep(6)
          execution_output = table("`demo`.`events`")
          pathlib.Path({str(done)!r}).touch()
        """,
    )
    started: list = []
    real_start = runtime.start
    monkeypatch.setattr(runtime, "start", lambda *args, **kw: started.extend(real_start(*args, **kw)) or started)

    proj = load_project(project.root)
    manifest = proj.load_manifest(project.root / "manifests" / "slow.yaml")
    meta = Meta(query_id=str(uuid.uuid4()), query_version=1, query_create_timestamp=START)
    manifest = manifest.model_copy(update={"meta": meta})
    spec = JobSpec(
        manifest=manifest,
        catalog=proj.catalog,
        checkpoint=str(tmp_path / "checkpoint"),
        dead_letter=str(tmp_path / "dead-letter"),
    )
    host = QueryHost(spark, "run-late", Protection(build_timeout=2.0))
    with caplog.at_level(logging.INFO, logger="runner.session.host"):
        began = time.monotonic()
        with pytest.raises(UserError) as refused:
            host.submit(Launch(JobIdentity(team="local", name="slow", version=1, run_id="run-1"), spec))
        assert refused.value.problems[0].code == "SESSION_QUERY_BUILD_TIMEOUT" and time.monotonic() - began < 5
        assert host.hosted["slow"].state == JobState.FAILED  # parked: building it again would take as long
        wait_for(done.exists, "the slow build to finish after its timeout", 60)
        wait_for(lambda: any("outlived its timeout" in r.getMessage() for r in caplog.records), "the late start", 60)
    assert started and not any(query.isActive for query in started)  # started late, and stopped at once
    assert host.hosted["slow"].queries == [] and host.hosted["slow"].state == JobState.FAILED
