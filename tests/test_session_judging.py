"""A deploy to YARN has the team's running session judge new and changed manifests (``POST /judge``), and what it
does with each answer, without Spark: the session's answer comes from a stand-in (``AnsweringSession``, which
answers as the endpoint would), and a Spark the deploy would start raises if it is asked for. The session on a real
YARN judging a deploy is in tests/test_yarn_session.py.

Bad inputs tried: a manifest the session finds problems in, an analysis that fails in the session, no session to
ask (the deploy judges on a Spark of its own then, and asks no more), and what the session's endpoint may answer:
a busy session, one of an earlier release without ``/judge``, an answer that is not a verdict, a node gone."""

from __future__ import annotations

import http.server
import socket
import threading
import time
from datetime import UTC, datetime

import pytest

from runner.authoring.project import load_project
from runner.core import layout
from runner.core.bucket import LocalBucket
from runner.core.errors import Problem, UserError
from runner.core.identity import JobIdentity
from runner.core.protocol.document import now
from runner.core.protocol.jobspec import Judging
from runner.core.protocol.launch import JudgeRequest, Verdict
from runner.core.protocol.preview import PreviewRefusal
from runner.core.protocol.session import SessionControl, SessionHealth, SessionState, write_control, write_health
from runner.deploy.deployer import Deployer
from runner.deploy.inputs import Preparer
from runner.deploy.settings import Settings
from runner.state.store import Store
from runner.targets.base import RunningJob
from runner.targets.modes import Targets
from runner.targets.session import SessionTarget, SessionUnavailable
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


def test_an_analysis_that_fails_in_the_session_is_judged_again_on_a_spark_of_the_deploys_own(
    project: ProjectDir, tmp_path
):
    # not the manifest's fault (the session's JVM going down between attempts, say): judged here instead
    session = AnsweringSession(verdict(failure="Py4JError: the session's JVM is gone"))
    with pytest.raises(SparkWanted):
        preparer(project, tmp_path, session).prepare(project.root / "manifests" / "high-value.yaml")


def test_without_a_session_to_ask_the_deploy_judges_on_a_spark_of_its_own(project: ProjectDir, tmp_path):
    session = AnsweringSession(SessionUnavailable("no session of team t is running"))
    prepare = preparer(project, tmp_path, session)
    with pytest.raises(SparkWanted):
        prepare.prepare(project.root / "manifests" / "high-value.yaml")
    with pytest.raises(SparkWanted):
        prepare.prepare(project.root / "manifests" / "high-value.yaml")
    assert len(session.asked) == 1, "a session that could not be asked is not asked again by the same deploy"


def load_project_tables(project: ProjectDir, tmp_path):
    """The tables Spark would find the manifest uses: its source and its target, the project's only two."""
    project.ddl("tables", TRANSACTIONS_DDL)
    tables = tuple(load_project(project.root).catalog.tables)
    assert len(tables) == 2
    return tables


# ---- what the session's endpoint may answer, as SessionTarget.judge reads it -------------------------------------

RUN = "run-20261127T120000Z-abcdef"


class SessionApplication:
    """Stands in for the application target the session runs on: it finds the session's run, nothing else."""

    kind = "yarn"

    def find(self, team: str, name: str) -> RunningJob | None:
        identity = JobIdentity(team=team, name=name, version=1, run_id=RUN)
        return RunningJob(identity, self.kind, "application_1_0001") if name == layout.SESSION_JOB else None


class Endpoint(http.server.BaseHTTPRequestHandler):
    """A control endpoint answering ``POST /judge`` with the answers queued in ``answers`` (status, body), one each."""

    answers: list[tuple[int, bytes]] = []
    asked = 0

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers["Content-Length"]))
        type(self).asked += 1
        status, body = type(self).answers.pop(0)
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args) -> None:
        pass


@pytest.fixture
def endpoint(tmp_path):
    """The session's target over a state store whose running session publishes an endpoint answering as told."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Endpoint)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    records = LocalBucket(tmp_path / "records")
    write_health(records, SessionHealth(state=SessionState.RUNNING, run_id=RUN, team="t"))
    write_control(records, SessionControl(run_id=RUN, url=f"http://127.0.0.1:{server.server_port}", token="x"))
    Endpoint.answers, Endpoint.asked = [], 0
    yield SessionTarget(records, SessionApplication(), "t"), records  # type: ignore[arg-type]
    server.shutdown()


def request(project: ProjectDir) -> JudgeRequest:
    project.ddl("tables", TRANSACTIONS_DDL)
    project.manifest("high-value", HIGH_VALUE_MANIFEST)
    found = load_project(project.root)
    manifest = found.load_manifest(project.root / "manifests" / "high-value.yaml")
    judging = Judging(file="manifests/high-value.yaml")
    return JudgeRequest(manifest=manifest, tables=found.catalog.tables, judging=judging)


def refusal(status: int, error: str) -> tuple[int, bytes]:
    return status, PreviewRefusal(error=error).encode()


def test_a_busy_session_is_asked_again_and_its_verdict_read(endpoint, project: ProjectDir, monkeypatch):
    monkeypatch.setattr(time, "sleep", lambda _seconds: None)
    session, _ = endpoint
    Endpoint.answers = [refusal(429, "2 previews or judgements are running"), (200, verdict(problems=()).encode())]
    assert session.judge(request(project)).ok and Endpoint.asked == 2
    Endpoint.answers = [refusal(429, "busy")] * 3
    with pytest.raises(SessionUnavailable, match="stayed busy for 3 tries"):
        session.judge(request(project))


def test_a_session_that_cannot_judge_leaves_the_judgement_to_the_deploy(endpoint, project: ProjectDir):
    session, records = endpoint
    Endpoint.answers = [refusal(404, "not found")]  # a session of a release without /judge
    with pytest.raises(SessionUnavailable, match=r"did not judge \(HTTP 404\)"):
        session.judge(request(project))
    Endpoint.answers = [(200, b"<html>a proxy's page</html>")]
    with pytest.raises(SessionUnavailable, match="was not a verdict"):
        session.judge(request(project))
    # its node gone: the endpoint the attempt published no longer answers, and is not waited on
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        gone = f"http://127.0.0.1:{closed.getsockname()[1]}"
    write_control(records, SessionControl(run_id=RUN, url=gone, token="x"))
    began = time.monotonic()
    with pytest.raises(SessionUnavailable, match="cannot be reached"):
        session.judge(request(project))
    assert time.monotonic() - began < 10


def test_only_a_deploy_to_yarn_with_no_spark_of_its_own_asks_the_session(tmp_path):
    # the session's own deployer has its Spark (it would ask itself); local and standalone jobs judge themselves
    store = Store(*(LocalBucket(tmp_path / role) for role in ("manifests", "checkpoints", "savepoints")))
    sessions = SessionTarget(store.manifests, SessionApplication(), "t")  # type: ignore[arg-type]
    project = load_project_root(tmp_path)
    for kind, spark, asks in (("yarn", None, True), ("local", None, False), ("yarn", no_spark, False)):
        application = SessionApplication()
        application.kind = kind
        settings = Settings(store, Targets(application, sessions), "t")  # type: ignore[arg-type]
        deployer = Deployer(None, settings, spark=spark)
        assert (deployer.preparer(project).session is sessions) == asks, (kind, spark)


def load_project_root(tmp_path):
    folder = ProjectDir(tmp_path / "gate")
    folder.ddl("tables", TRANSACTIONS_DDL)
    return load_project(folder.root)
