"""A deploy to YARN has the team's running session judge new and changed manifests (``POST /judge``), and what it
does with each answer, without Spark: the session's answer comes from a stand-in (``AnsweringSession``, which
answers as the endpoint would), and a Spark the deploy would start raises if it is asked for. The session on a real
YARN judging a deploy is in tests/test_yarn_session.py.

Bad inputs tried: a manifest the session finds problems in, an analysis that fails in the session, no session to
ask (the deploy judges on a Spark of its own then)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from runner.authoring.project import load_project
from runner.core.bucket import LocalBucket
from runner.core.errors import Problem, UserError
from runner.core.protocol.document import now
from runner.core.protocol.launch import JudgeRequest, Verdict
from runner.deploy.inputs import Preparer
from runner.state.store import Store
from runner.targets.session import SessionUnavailable
from tests.conftest import HIGH_VALUE_MANIFEST, TRANSACTIONS_DDL, ProjectDir


class AnsweringSession:
    """Stands in for the team's session target: answers each judge request with what it was given (or raises)."""

    def __init__(self, answer: Verdict | Exception):
        self.answer = answer
        self.asked: list[JudgeRequest] = []

    def judge(self, request: JudgeRequest) -> Verdict:
        self.asked.append(request)
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


class SparkWanted(Exception):
    """The deploy asked for a Spark of its own."""


def no_spark():
    raise SparkWanted


def preparer(project: ProjectDir, tmp_path, session: AnsweringSession) -> Preparer:
    project.ddl("tables", TRANSACTIONS_DDL)
    project.manifest("high-value", HIGH_VALUE_MANIFEST)
    store = Store(*(LocalBucket(tmp_path / "state" / role) for role in ("manifests", "checkpoints", "savepoints")))
    clock = lambda: datetime(2026, 11, 27, tzinfo=UTC)  # noqa: E731
    return Preparer(load_project(project.root), store, {}, no_spark, clock, None, session)  # type: ignore[arg-type]


def verdict(**found) -> Verdict:
    return Verdict(launch_id="session-run-20261127T120000Z-abcdef", at=now(), seconds=0.4, **found)


def test_a_new_manifest_judged_by_the_session_needs_no_spark_of_the_deploys_own(project: ProjectDir, tmp_path):
    tables = load_project_tables(project, tmp_path)
    session = AnsweringSession(verdict(tables=tables))
    prepared = preparer(project, tmp_path, session).prepare(project.root / "manifests" / "high-value.yaml")
    [asked] = session.asked
    assert asked.manifest.name == "high-value" and asked.judging.file == "manifests/high-value.yaml"
    assert asked.judging.deployed is None  # nothing deployed to compare with
    assert {t.name for t in asked.tables} == {t.name for t in tables}  # the project's tables, as the caller sees them
    assert prepared.tables == tables and prepared.diff is None
    assert prepared.judged_by == "the team's session (session-run-20261127T120000Z-abcdef, 0.4 s of analysis)"


def test_the_problems_the_session_finds_refuse_the_manifest(project: ProjectDir, tmp_path):
    problem = Problem.of("SQL_ANALYSIS_ERROR", file="manifests/high-value.yaml", reason="column nope not found")
    session = AnsweringSession(verdict(problems=(problem,)))
    with pytest.raises(UserError) as refused:
        preparer(project, tmp_path, session).prepare(project.root / "manifests" / "high-value.yaml")
    assert refused.value.problems == [problem]


def test_an_analysis_that_fails_in_the_session_is_said_to_have_failed_there(project: ProjectDir, tmp_path):
    session = AnsweringSession(verdict(failure="Py4JError: the session's JVM is busy"))
    with pytest.raises(UserError) as refused:
        preparer(project, tmp_path, session).prepare(project.root / "manifests" / "high-value.yaml")
    [problem] = refused.value.problems
    assert problem.code == "SESSION_JUDGING_FAILED"
    assert "high-value: the team's session could not judge the manifest (Py4JError" in problem.render()


def test_without_a_session_to_ask_the_deploy_judges_on_a_spark_of_its_own(project: ProjectDir, tmp_path):
    session = AnsweringSession(SessionUnavailable("no session of team t is running"))
    with pytest.raises(SparkWanted):
        preparer(project, tmp_path, session).prepare(project.root / "manifests" / "high-value.yaml")
    assert len(session.asked) == 1


def load_project_tables(project: ProjectDir, tmp_path):
    """The tables Spark would find the manifest uses: its source and its target, the project's only two."""
    project.ddl("tables", TRANSACTIONS_DDL)
    tables = tuple(load_project(project.root).catalog.tables)
    assert len(tables) == 2
    return tables
