"""Where a team's state lives inside its three buckets.

manifests bucket
  manifests/<name>.yaml                      desired manifests, pushed by users
  deployed/<name>.yaml                       what is deployed: merged manifest + meta + deployment
  history/<name>/<timestamp>.json            one record per deploy decision (or refused restore)
  locks/<name>.json                          a deploy in progress (lease)
  control/<name>/stop.json                   a request to stop at a micro-batch boundary
  control/<name>/stopped.json                the job's answer: stopped between batches
  control/<name>/start.json                  a request to the session to start a job spec (its answer:
  control/<name>/started.json                started.json)
  session/health.json                        the session application's health, published while it runs
  session/stop.json, session/stopped.json    a request to stop the session, and its answer
  session/held.json                          session queries held stopped until their manifest changes
  session/control.json                       where the session's control endpoint listens, and its token
  console/access.json                        the console's tokens, each with a name its actions are recorded under
  status/<name>.json                         the running job's latest progress
  jobs/<name>.json                           how to find the running job on its target
  launches/<name>/<launch-id>/               a job judging its own manifest before it starts: the spec it
                                             judges (spec.json), its verdict (verdict.json) and the
                                             runner's answer (release.json)
  errors/<name>.json                         why the deploy Lambda refused a pushed manifest
  deploy-requests/<name>/<version>.json      S3 changes the deploy Lambda turned into EMR steps
checkpoints bucket
  checkpoints/<name>/<version>/<run-id>/     Spark checkpoint of one run
  continue/<name>/<version>/<table>.json     where a new version's sources start
  dead-letter/<name>/<source-table>/         rejected records (JSON lines)
savepoints bucket
  savepoints/<name>/<version>/savepoint-<timestamp>-<id>/
"""

from __future__ import annotations

from pathlib import Path

DEFAULT_STATE_DIR = ".sql-runner"
DESIRED_PREFIX = "manifests/"
DEPLOYED_PREFIX = "deployed/"
DEPLOY_ERRORS_PREFIX = "errors/"
DEPLOY_REQUESTS_PREFIX = "deploy-requests/"
CONTROL_PREFIX = "control/"
LAUNCHES_PREFIX = "launches/"
# The session application's job name: manifest names cannot begin with "_", so it never
# shares a job record with a query.
SESSION_JOB = "_session"
SESSION_TARGET = "session"  # the target recorded for a job hosted by the team's session
SESSION_HEALTH = "session/health.json"
SESSION_STOP = "session/stop.json"
SESSION_STOPPED = "session/stopped.json"
SESSION_HELD = "session/held.json"
SESSION_CONTROL = "session/control.json"
SESSION_RUNS_PREFIX = "session/runs/"
CONSOLE_ACCESS = "console/access.json"


def session_config(run_id: str) -> str:
    """Where a session run's configuration is, which its application (and YARN's later attempts of it) reads."""
    return f"{SESSION_RUNS_PREFIX}{run_id}.json"


def deployed(name: str) -> str:
    return f"{DEPLOYED_PREFIX}{name}.yaml"


def history(name: str) -> str:
    return f"history/{name}/"


def lock(name: str) -> str:
    return f"locks/{name}.json"


def stop_request(name: str) -> str:
    return f"control/{name}/stop.json"


def stop_acknowledged(name: str) -> str:
    return f"control/{name}/stopped.json"


def start_request(name: str) -> str:
    return f"control/{name}/start.json"


def start_answer(name: str) -> str:
    return f"control/{name}/started.json"


def status(name: str) -> str:
    return f"status/{name}.json"


def job_record(name: str) -> str:
    return f"jobs/{name}.json"


def job_specs(name: str) -> str:
    return f"specs/{name}/"


def job_spec(name: str, run_id: str) -> str:
    """The spec one run of a job starts from (its command line names only this key)."""
    return f"{job_specs(name)}{run_id}.json"


def launch(name: str, launch_id: str) -> str:
    """Where a job judged in its own driver and the runner meet (``runner/core/protocol/launch.py``)."""
    return f"{LAUNCHES_PREFIX}{name}/{launch_id}/"


def launch_spec(name: str, launch_id: str) -> str:
    """The spec a judged launch starts from: the desired manifest, the tables, what to compare it with."""
    return f"{launch(name, launch_id)}spec.json"


def launch_verdict(name: str, launch_id: str) -> str:
    return f"{launch(name, launch_id)}verdict.json"


def launch_release(name: str, launch_id: str) -> str:
    return f"{launch(name, launch_id)}release.json"


def deploy_error(name: str) -> str:
    """Why the deploy Lambda refused a pushed manifest."""
    return f"{DEPLOY_ERRORS_PREFIX}{name}.json"


def deploy_request(name: str, event_id: str) -> str:
    """One S3 change the deploy Lambda turned into an EMR step (claimed once)."""
    return f"{DEPLOY_REQUESTS_PREFIX}{name}/{event_id}.json"


def version_checkpoints(name: str, version: int) -> str:
    return f"checkpoints/{name}/{version}/"


def checkpoint(name: str, version: int, run_id: str) -> str:
    return f"checkpoints/{name}/{version}/{run_id}/"


def continuation(name: str, version: int) -> str:
    return f"continue/{name}/{version}/"


def dead_letter(name: str) -> str:
    return f"dead-letter/{name}/"


def version_savepoints(name: str, version: int) -> str:
    return f"savepoints/{name}/{version}/"


def savepoint(name: str, version: int, savepoint_id: str) -> str:
    return f"savepoints/{name}/{version}/{savepoint_id}/"


def state_dir(project_root: Path) -> Path:
    """Where local state goes when ``--state`` is not given: ``.sql-runner/`` inside the project."""
    return (project_root / DEFAULT_STATE_DIR).resolve()
