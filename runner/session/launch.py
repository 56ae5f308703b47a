"""Starting and stopping a team's session application from the command line.

``start`` submits ``runner/session/app.py`` to the application target (local, standalone
or yarn; on YARN with several application attempts, so YARN restarts a session that
dies) and returns once the session publishes its health. ``stop`` asks the session to
stop every query with a savepoint and waits for the application to end.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from jobs import localfs
from runner.core import layout
from runner.core.errors import UserError
from runner.core.identity import JobIdentity
from runner.core.placeholders import Sources
from runner.core.protocol.control import SessionStop, read_session_stopped, write_session_stop
from runner.core.protocol.session import SessionState, read_health
from runner.core.protocol.session_config import Application, Protection, SessionConfig
from runner.deploy import submit
from runner.state.savepoints import new_run_id
from runner.state.store import Store
from runner.targets.base import Launch, RunningJob, Target
from runner.targets.session import SessionTarget

log = logging.getLogger(__name__)

APP = Path(__file__).with_name("app.py")
# The session's own Spark settings: FAIR pools so one query's batches do not queue behind another's.
SESSION_PROPERTIES = {
    "spark.scheduler.mode": "FAIR",
    "spark.ui.showConsoleProgress": "false",
    "spark.log.level": "WARN",
    "spark.sql.streaming.stopTimeout": "60s",
}
# YARN restarts a session application that dies (a failed attempt), up to this many times an hour.
YARN_ATTEMPTS = {"spark.yarn.maxAppAttempts": "4", "spark.yarn.am.attemptFailuresValidityInterval": "1h"}


@dataclass(frozen=True)
class Started:
    job: RunningJob
    seconds: float
    already: bool = False


def start(
    store: Store,
    application: Target,
    *,
    team: str,
    project: Path | None,
    application_settings: Application,
    env: Mapping[str, str],
    properties: Mapping[str, str],
    poll: float,
    stop_timeout: float,
    protection: Protection,
    spark_submit: str | None,
    control: tuple[str, int] = ("127.0.0.1", 0),
    console_actions: bool = False,
    placeholders: Sources | None = None,
    timeout: float = 180.0,
) -> Started:
    """Start the team's session (or find it running) and wait until it publishes its health."""
    began = time.monotonic()
    sessions = SessionTarget(store.manifests, application, team)
    running = sessions.application_job()
    if running is not None:
        return Started(running, 0.0, already=True)
    run_id = new_run_id(datetime.now(UTC))
    config = SessionConfig(
        team=team,
        run_id=run_id,
        store=store.describe(),
        application=application_settings,
        project=str(project) if project is not None else None,
        poll=poll,
        stop_timeout=stop_timeout,
        protection=protection,
        control_address=control[0],
        control_port=control[1],
        console_actions=console_actions,
        placeholders=placeholders or Sources(),
    )
    store.manifests.delete(layout.SESSION_STOP)
    # read from the store, not the command line: YARN's launch script takes "}}" for the end of a variable
    config_key = layout.session_config(run_id)
    store.manifests.write(config_key, config.encode())
    identity = JobIdentity(team=team, name=layout.SESSION_JOB, version=1, run_id=run_id)
    options = application.submit_options(identity)
    merged = {
        **SESSION_PROPERTIES,
        # on YARN the session's driver sets the file I/O ones (jobs/localfs.py)
        **(localfs.properties(store.checkpoints.uri("checkpoints/")) if application.kind != "yarn" else {}),
        **(YARN_ATTEMPTS if application.kind == "yarn" else {}),
        **properties,
    }
    args = submit.application_command(
        APP,
        ["--config-uri", store.manifests.uri(config_key)],
        master=application.master(),
        env=env,
        app_name=f"sql-runner:{team}:session",
        properties=merged,
        options=options,
        spark_submit=spark_submit,
        this_machine=application.kind != "yarn",
    )
    log.info(f"starting the session of team {team} on {application.kind} ({application.master()})")
    job = None
    try:
        job = application.submit(Launch(identity, None, args, submit.environment(env)))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            health = read_health(store.manifests)
            if health is not None and health.run_id == run_id and health.state == SessionState.RUNNING:
                return Started(job, time.monotonic() - began)
            if application.find(team, layout.SESSION_JOB) is None:
                raise UserError.of("SESSION_DID_NOT_START", detail=job.detail)
            time.sleep(0.2)
        raise UserError.of("SESSION_DID_NOT_START", detail=f"no health within {timeout:.0f}s; {job.detail}")
    except UserError:
        if job is None or application.find(team, layout.SESSION_JOB) is None:  # no attempt of it will read it
            store.manifests.delete(config_key)
        raise


def stop(store: Store, application: Target, *, team: str, timeout: float) -> float | None:
    """Stop the session's queries with savepoints and end it; seconds taken, None if none was running."""
    began = time.monotonic()
    job = application.find(team, layout.SESSION_JOB)
    if job is None:
        return None
    request = SessionStop(run_id=job.identity.run_id)
    write_session_stop(store.manifests, request)
    log.info(f"asked session {job.identity.run_id} to stop every query with a savepoint (waiting up to {timeout:.0f}s)")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and application.find(team, layout.SESSION_JOB) is not None:
        time.sleep(0.3)
    if application.find(team, layout.SESSION_JOB) is not None:
        log.info("the session did not stop in time: killing it (its queries restore from their latest checkpoints)")
        application.stop(job, force=True)
    else:
        answer = read_session_stopped(store.manifests)
        if answer is None or answer.id != request.id:
            log.info("the session ended without answering: its queries restore from their latest checkpoints")
    store.manifests.delete(layout.SESSION_STOP)
    if job.identity.run_id:  # none when found by the tags of a release that wrote no such file
        store.manifests.delete(layout.session_config(job.identity.run_id))
    return time.monotonic() - began
