"""Jobs on YARN (EMR): ``spark-submit --master yarn --deploy-mode cluster``.

The application carries tags for team, name and version; it is found through the
ResourceManager's REST API by those exact tags (never by a substring of its name), and
stopped or killed there (``PUT /ws/v1/cluster/apps/<id>/state``).
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import UTC, datetime

from runner.core import restarts
from runner.core.bucket import Bucket
from runner.core.errors import UserError
from runner.core.identity import JobIdentity, run_from_tag
from runner.core.restarts import RestartStrategy
from runner.targets.base import Attempt, Ended, Launch, RunningJob
from runner.targets.stop_request import request_stop

ACTIVE_STATES = "NEW,NEW_SAVING,SUBMITTED,ACCEPTED,RUNNING"
ENDED_STATES = "FINISHED,FAILED,KILLED"
# The most application attempts a job asks YARN for; the team's EMR cluster allows this many
# (yarn.resourcemanager.am.max-attempts, infra/stack.py), YARN's own default is 2.
YARN_MAX_ATTEMPTS = 10
# The ResourceManager's answers that mean "not now, ask again": retried for a while before they are an error.
RETRIED_STATUSES = frozenset({502, 503, 504})


_CAUSE = re.compile(r"^(Exception in thread \S+ |Caused by: )?[\w.$]+(Exception|Error)\b:?")


def submit_failure(output: str) -> str:
    """What to quote of a failed spark-submit's output: the exception and its root cause (a JVM's stack trace
    and its shutdown logging come after them), or its last lines when it threw nothing."""
    lines = [line.strip() for line in output.strip().splitlines() if line.strip()]
    causes = [line for line in lines if _CAUSE.match(line)]
    if causes:
        quoted = [causes[0]] if causes[0] == causes[-1] else [causes[0], causes[-1]]
        return " | ".join(quoted)
    return " | ".join(lines[-5:]) or "no output"


_STAMP = re.compile(r"^(Failing this attempt\.\s*Diagnostics:\s*)?(\[[^\]]*\]\s*)?")
_NOISE = ("For more detailed output", "Then click on links", ".", "Failing the application")


def _diagnosis(text: str) -> str:
    """YARN's diagnostics of an attempt or application in one line: what ended it and what the NodeManager said of
    its container ("Container killed on request. Exit code is 137"), without timestamps and links to logs."""
    said: list[str] = []
    for line in text.splitlines():
        line = " ".join(_STAMP.sub("", line.strip()).split())
        if line and not line.startswith(_NOISE) and line not in said:
            said.append(line)
    joined = "; ".join(said[:3])
    return joined if len(joined) <= 400 else joined[:399] + "…"


_UNKNOWN_QUEUE = re.compile(r"unknown queue: (\S+)")
_TOO_LARGE = re.compile(r"Required (AM|executor) memory \((\d+)\+(\d+) MB\) is above the max threshold \((\d+) MB\)")


def refusal(status: int, output: str) -> UserError:
    """A failed submission as an error naming the setting at fault where YARN's refusal says which: a queue the
    scheduler does not have, a container larger than any node (in cluster mode the ApplicationMaster's container
    holds the driver); otherwise spark-submit's own words."""
    quoted = submit_failure(output)
    queue = _UNKNOWN_QUEUE.search(output)
    if queue is not None:
        return UserError.of("YARN_QUEUE_UNKNOWN", queue=queue.group(1).rstrip(".,"), output=quoted)
    large = _TOO_LARGE.search(output)
    if large is not None:
        kind, memory, overhead, largest = large.groups()
        container, setting = (
            ("driver", "spark.driver.memory") if kind == "AM" else ("executor", "spark.executor.memory")
        )
        asked = int(memory) + int(overhead)
        return UserError.of(
            "YARN_CONTAINER_TOO_LARGE",
            container=container,
            asked=asked,
            setting=setting,
            largest=largest,
            output=quoted,
        )
    return UserError.of("SUBMIT_FAILED", status=status, output=quoted)


def _said(error: urllib.error.HTTPError) -> str:
    """What the ResourceManager's error answer says (``{"RemoteException": {"exception": ..., "message": ...}}``;
    its web services answer any exception they did not expect with 503), as ``": <exception>: <message>"`` on
    one line and clipped; empty when the answer carries nothing."""
    try:
        body = json.loads(error.read() or b"{}")
    except (ValueError, OSError):
        return ""
    remote = (body.get("RemoteException") or {}) if isinstance(body, dict) else {}
    said = " ".join(": ".join(str(remote[part]) for part in ("exception", "message") if remote.get(part)).split())
    said = said if len(said) <= 300 else said[:297] + "..."
    return f": {said}" if said else ""


class YarnTarget:
    kind = "yarn"
    judges = False  # the driver runs in a YARN container: the runner judges on its own Spark, or the session's

    def __init__(
        self, resource_manager: str, records: Bucket, *, submit_timeout: float = 300.0, retry_for: float = 30.0
    ):
        self.records = records  # the manifests bucket, where stop requests and answers go
        self.resource_manager = resource_manager.rstrip("/")
        self.submit_timeout = submit_timeout
        self.retry_for = retry_for

    def master(self) -> str:
        return "yarn"

    def submit_options(self, identity: JobIdentity, restart: RestartStrategy | None = None) -> list[str]:
        """Cluster mode, the job's tags, and application attempts from its restart strategy: the driver
        restarts failed queries itself; a new attempt replaces a driver that died (a lost node, out of
        memory) and counts on from the failures the run published, within the same failure window."""
        strategy = restart or restarts.DEFAULT
        limit = strategy.limit
        attempts = YARN_MAX_ATTEMPTS if limit is None else max(1, min(limit + 1, YARN_MAX_ATTEMPTS))
        window = int(strategy.seconds("failure_window"))
        return [
            "--deploy-mode",
            "cluster",
            "--conf",
            f"spark.yarn.tags={','.join(identity.tags)}",
            "--conf",
            "spark.yarn.submit.waitAppCompletion=false",
            "--conf",
            f"spark.yarn.maxAppAttempts={attempts}",
            "--conf",
            f"spark.yarn.am.attemptFailuresValidityInterval={window}s",
        ]

    def submit(self, launch: Launch) -> RunningJob:
        """Run spark-submit until YARN accepted the application, then look it up by its tags."""
        identity = launch.identity
        completed = subprocess.run(
            launch.args, env=launch.env, capture_output=True, text=True, timeout=self.submit_timeout, check=False
        )
        if completed.returncode != 0:
            raise refusal(completed.returncode, completed.stderr or completed.stdout)
        job = self.find(identity.team, identity.name)
        if job is None or job.identity.version != identity.version:
            raise UserError.of("SUBMITTED_APP_NOT_FOUND", tags=", ".join(identity.tags))
        return job

    def _answer(self, request: urllib.request.Request | str) -> bytes:
        """The ResourceManager's answer to ``request``. An answer that says "try again" (502, 503, 504: a busy or
        restarting ResourceManager, or a proxy in front of it) is asked again with a growing pause, for at most
        ``retry_for`` seconds; any other error answer, or one that outlasts that, is raised."""
        deadline, pause = time.monotonic() + self.retry_for, 0.25
        while True:
            try:
                with urllib.request.urlopen(request, timeout=10) as response:
                    return response.read()
            except urllib.error.HTTPError as error:
                if error.code not in RETRIED_STATUSES or time.monotonic() + pause >= deadline:
                    raise
                time.sleep(pause)
                pause = min(pause * 2, 4.0)

    def _get(self, path: str) -> dict:
        """GET ``path`` from the ResourceManager (busy answers asked again); an error answer is the user's error
        with the ResourceManager's own message."""
        try:
            return json.loads(self._answer(f"{self.resource_manager}{path}"))
        except urllib.error.HTTPError as error:
            raise UserError.of(
                "RESOURCE_MANAGER_ERROR",
                url=self.resource_manager,
                status=error.code,
                request=f"GET {path.split('?')[0]}",
                said=_said(error),
            ) from None
        except (urllib.error.URLError, OSError) as error:
            reason = getattr(error, "reason", error)
            raise UserError.of(
                "RESOURCE_MANAGER_UNREACHABLE", url=self.resource_manager, purpose="", reason=reason
            ) from None

    def applications(self, team: str, name: str, states: str = ACTIVE_STATES) -> list[dict]:
        """Applications in ``states`` (by default the active ones) whose tags are exactly this team's and name's."""
        query = urllib.parse.urlencode({"applicationTags": f"sql-runner-name:{name}", "states": states})
        apps = (self._get(f"/ws/v1/cluster/apps?{query}").get("apps") or {}).get("app") or []
        wanted = {"sql-runner", f"sql-runner-team:{team}", f"sql-runner-name:{name}"}
        return [a for a in apps if wanted <= set(filter(None, a.get("applicationTags", "").split(",")))]

    def find(self, team: str, name: str) -> RunningJob | None:
        apps = self.applications(team, name)
        if not apps:
            return None
        app = max(apps, key=lambda a: a.get("startedTime", 0))
        tags = set(app.get("applicationTags", "").split(","))
        version = next((int(t.split(":", 1)[1]) for t in tags if t.startswith("sql-runner-version:")), 0)
        detail = f"{app.get('state')} in queue {app.get('queue')}; {app.get('trackingUrl', '')}".strip()
        identity = JobIdentity(team=team, name=name, version=version, run_id=run_from_tag(tags))
        return RunningJob(identity, self.kind, app["id"], detail, self.attempt(app["id"]))

    def attempts(self, app_id: str) -> list[dict]:
        """The application's attempts, first to latest, as the ResourceManager lists them."""
        found = (self._get(f"/ws/v1/cluster/apps/{app_id}/appattempts").get("appAttempts") or {}).get("appAttempt")
        return sorted(found or [], key=lambda attempt: int(attempt.get("id", 0)))

    def attempt(self, app_id: str) -> Attempt | None:
        """Which attempt of ``app_id`` runs, and why the one before it ended (a driver killed, out of memory, its
        node lost: YARN started the next one, up to ``spark.yarn.maxAppAttempts``)."""
        attempts = self.attempts(app_id)
        if not attempts:
            return None
        if len(attempts) == 1:
            return Attempt(1)
        # the attempts' list carries no diagnostics; the attempt itself does
        before = self._get(f"/ws/v1/cluster/apps/{app_id}/appattempts/{attempts[-2].get('appAttemptId')}")
        return Attempt(len(attempts), _diagnosis(before.get("diagnosticsInfo", "")) or "YARN gave no diagnostics")

    def ended(self, team: str, name: str) -> Ended | None:
        """How the job's latest application ended, when none of its applications is active: its final state,
        its attempts and YARN's diagnostics (the ResourceManager keeps finished applications for a while)."""
        apps = self.applications(team, name, ENDED_STATES)
        if not apps:
            return None
        app = max(apps, key=lambda a: a.get("startedTime", 0))
        count = len(self.attempts(app["id"]))  # none: refused before any container ran (an unknown queue)
        said = _diagnosis(app.get("diagnostics", ""))
        ended = f"{app['id']} {app.get('state')} ({app.get('finalStatus')}) after {count} attempt{'s' * (count != 1)}"
        return Ended(
            f"{ended}: {said}" if said else ended,
            failed=app.get("state") == "FAILED" and count > 0,
            clean=(app.get("state"), app.get("finalStatus")) == ("FINISHED", "SUCCEEDED"),
            at=datetime.fromtimestamp(app["finishedTime"] / 1000, UTC) if app.get("finishedTime") else None,
        )

    def stop_gracefully(self, job: RunningJob, timeout: float) -> bool:
        return request_stop(self.records, self, job, timeout)

    def stop(self, job: RunningJob, *, force: bool) -> None:
        """Kill the application through the ResourceManager (YARN has no gentler stop)."""
        body = json.dumps({"state": "KILLED"}).encode()
        request = urllib.request.Request(
            f"{self.resource_manager}/ws/v1/cluster/apps/{job.job_id}/state",
            data=body,
            method="PUT",
            headers={"Content-Type": "application/json"},
        )
        try:
            self._answer(request)  # killing twice kills once: a busy answer can be asked again
        except urllib.error.HTTPError as error:
            raise UserError.of("KILL_REFUSED", app=job.job_id, status=error.code, said=_said(error)) from None
        except (urllib.error.URLError, OSError) as error:
            reason = getattr(error, "reason", error)
            raise UserError.of(
                "RESOURCE_MANAGER_UNREACHABLE",
                url=self.resource_manager,
                purpose=f" to kill {job.job_id}",
                reason=reason,
            ) from None
