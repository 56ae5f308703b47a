"""The deploy Lambda: a manifest pushed to (or deleted from) S3 becomes an EMR step.

S3 notifies this handler for ``manifests/`` only. For each record:

- a manifest created: read that object version, validate it (schema level, merged over
  the bucket's ``manifests/job-template.yaml``; no Spark here). Invalid: write
  ``errors/<name>.json`` with the problems and add no step. Valid: clear any earlier
  error report and add a step running ``sql-runner deploy --from-store`` for exactly that
  manifest and object version; a ``mode: session`` manifest gets no step, since the
  team's session watches ``manifests/`` and applies it within seconds;
- a manifest deleted: a step running ``sql-runner undeploy <name>``, unless its job runs
  in the session (its deployed record says so), which removes it by itself;
- a table DDL or the template changed: a step running ``sql-runner deploy --all --mode
  application``, since it can change any application-mode job (the session re-checks its
  own queries);
- anything outside ``manifests/`` (the runner's own writes): ignored.

Each S3 change gets exactly one step, whatever S3 or Lambda repeat. The change is
claimed with a create-if-absent write of ``deploy-requests/<name>/<version>.json``
(``pending``), the step is added, and only then is the claim marked with the step's id.
If adding the step fails (throttled, an EMR error), the claim is withdrawn and the error
raised, so Lambda's retry adds it. A repeated delivery finds the marked claim and adds
nothing; one that finds a fresh pending claim raises (another invocation is adding the
step; Lambda retries later); a pending claim older than the Lambda's timeout was left by
an invocation that died: if its step is on the cluster (found by its exact name) the
claim is marked, else it is taken over and the step added.

Steps run concurrently, so two pushes of one manifest can deploy in either order. Each
deploy step waits for the manifest's lease (``--lease-wait``) instead of standing down,
and deploys its object version only if it is still the newest; an older one stands down
(``runner/cli/deployments.py``), so the newest version is what ends up deployed.

Configuration (environment): ``CLUSTER_ID``, ``TEAM``, ``MANIFESTS_BUCKET``,
``CHECKPOINTS_BUCKET``, ``SAVEPOINTS_BUCKET``; optional ``RESOURCE_MANAGER`` (default
``http://localhost:8088``, the master's), ``SQL_RUNNER`` (default
``/usr/local/bin/sql-runner``), ``SPARK_SUBMIT`` (default ``/usr/bin/spark-submit``) and
``PARAMETERS_PREFIX`` (the team's SSM prefix, handed to the steps for ``${NAME}`` placeholders).
"""

from __future__ import annotations

import json
import os
import urllib.parse
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from runner.authoring.manifest_file import parse_manifest, parse_template
from runner.aws.steps import StepCommand
from runner.core import layout
from runner.core.bucket import PreconditionFailed, S3Bucket
from runner.core.errors import Problem, UserError
from runner.core.manifest import BUILT_IN_DEFAULTS
from runner.core.protocol.control import DeployError, write_deploy_error
from runner.core.protocol.deployed import DeploymentRecord
from runner.core.protocol.ownership import DeployClaim

PREFIX = layout.DESIRED_PREFIX
SESSION_APPLIES = "a session-mode manifest: the team's session applies it from manifests/ by itself"
TEMPLATE_KEY = f"{PREFIX}job-template.yaml"
PENDING_SECONDS = 120.0  # a pending claim older than this (twice the Lambda's timeout) was abandoned
STEP_LIST_PAGES = 5  # how far back the step of an abandoned claim is looked for (50 steps a page)


class ClaimPending(RuntimeError):
    """Another invocation is adding this change's step right now; Lambda retries this one later."""


@dataclass(frozen=True)
class LambdaSettings:
    cluster_id: str
    step: StepCommand

    @staticmethod
    def from_env(env: dict[str, str]) -> LambdaSettings:
        missing = [
            k
            for k in ("CLUSTER_ID", "TEAM", "MANIFESTS_BUCKET", "CHECKPOINTS_BUCKET", "SAVEPOINTS_BUCKET")
            if not env.get(k)
        ]
        if missing:
            raise RuntimeError(f"the deploy Lambda is missing configuration: {', '.join(missing)}")
        optional = {
            field: env[name]
            for name, field in (
                ("RESOURCE_MANAGER", "resource_manager"),
                ("SQL_RUNNER", "sql_runner"),
                ("SPARK_SUBMIT", "spark_submit"),
                ("PARAMETERS_PREFIX", "parameters_prefix"),
                ("AWS_REGION", "region"),  # set by Lambda's runtime: the team's region
            )
            if env.get(name)
        }
        return LambdaSettings(
            env["CLUSTER_ID"],
            StepCommand(
                env["TEAM"], env["MANIFESTS_BUCKET"], env["CHECKPOINTS_BUCKET"], env["SAVEPOINTS_BUCKET"], **optional
            ),
        )

    @property
    def manifests_bucket(self) -> str:
        return self.step.manifests_bucket


@dataclass(frozen=True)
class S3Event:
    bucket: str
    key: str
    created: bool
    version_id: str | None
    sequencer: str

    @staticmethod
    def parse(record: dict[str, Any]) -> S3Event:
        s3 = record["s3"]
        obj = s3["object"]
        return S3Event(
            bucket=s3["bucket"]["name"],
            key=urllib.parse.unquote_plus(obj["key"]),
            created=record["eventName"].startswith("ObjectCreated:"),
            version_id=obj.get("versionId") or None,
            sequencer=obj.get("sequencer", ""),
        )

    @property
    def event_id(self) -> str:
        """What identifies this change of the object: its version, else S3's sequencer."""
        return self.version_id or f"seq-{self.sequencer}"


def manifest_name(key: str) -> str | None:
    """``manifests/<name>.yaml`` -> name; None for the template, tables and other files."""
    rest = key[len(PREFIX) :]
    if "/" in rest or rest == "job-template.yaml":
        return None
    for suffix in (".yaml", ".yml"):
        if rest.endswith(suffix):
            return rest[: -len(suffix)]
    return None


class Handler:
    def __init__(self, settings: LambdaSettings, s3: Any, emr: Any, now: Any = None):
        self.settings = settings
        self.bucket = S3Bucket(settings.manifests_bucket, client=s3)
        self.emr = emr
        self.now = now or (lambda: datetime.now(UTC))

    def handle(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        return [self.one(S3Event.parse(record)) for record in event.get("Records", [])]

    def one(self, event: S3Event) -> dict[str, Any]:
        result = {"key": event.key, "version-id": event.version_id}
        if event.bucket != self.settings.manifests_bucket or not event.key.startswith(PREFIX):
            return {**result, "result": "ignored", "why": "not a manifest of this team"}
        name = manifest_name(event.key)
        if name is None:
            if not event.key.endswith((".yaml", ".yml", ".sql")):
                return {**result, "result": "ignored", "why": "not a manifest, template or table DDL"}
            return self._once(
                "_all",
                event,
                result,
                f"sql-runner deploy --all --mode application ({event.key} changed, {event.event_id})",
                self.settings.step.args("deploy", "--all", "--mode", "application"),
            )
        if not event.created:
            if self._runs_in_session(name):
                return {**result, "result": "session", "why": SESSION_APPLIES}
            return self._once(
                name,
                event,
                result,
                f"sql-runner undeploy {name} ({event.event_id})",
                self.settings.step.args("undeploy", name, submits=False),
            )
        checked = self._check(event, name)
        if checked is None:
            return {**result, "result": "ignored", "why": "that object version no longer exists"}
        problems, mode = checked
        if problems:
            self._report(name, event, problems)
            return {**result, "result": "invalid", "problems": problems}
        if mode == "session":
            self.bucket.delete(layout.deploy_error(name))
            return {**result, "result": "session", "why": SESSION_APPLIES}
        self.bucket.delete(layout.deploy_error(name))
        pinned = ["--object-version", event.version_id] if event.version_id else []
        return self._once(
            name,
            event,
            result,
            f"sql-runner deploy {name} ({event.event_id})",
            self.settings.step.args("deploy", *pinned, event.key),
        )

    def _check(self, event: S3Event, name: str) -> tuple[list[str], str | None] | None:
        """Validation messages (empty: valid) and the manifest's mode; None if the object version is gone."""
        blob = self.bucket.read(event.key, version_id=event.version_id)
        if blob is None:
            return None
        data = blob.data
        try:
            template = self._template()
            manifest = parse_manifest(data.decode("utf-8"), template, file=event.key)
        except UserError as error:
            return [p.render() for p in error.problems], None
        except UnicodeDecodeError:
            return [Problem.of("MANIFEST_NOT_UTF8", file=event.key).render()], None
        if manifest.name != name:
            return [
                Problem.of(
                    "MANIFEST_NAME_MISMATCH",
                    file=event.key,
                    field="name",
                    name=manifest.name,
                    file_name=f"{name}.yaml",
                    stem=name,
                ).render()
            ], None
        return [], manifest.mode

    def _runs_in_session(self, name: str) -> bool:
        """Whether the job deployed for ``name`` runs in the team's session (its deployed record's target)."""
        blob = self.bucket.read(layout.deployed(name))
        if blob is None:
            return False
        return DeploymentRecord.decode(blob.text).target == layout.SESSION_TARGET

    def _template(self) -> dict[str, Any]:
        blob = self.bucket.read(TEMPLATE_KEY)
        return BUILT_IN_DEFAULTS if blob is None else parse_template(blob.text, file=TEMPLATE_KEY)

    def _report(self, name: str, event: S3Event, problems: list[str]) -> None:
        report = DeployError(
            name=name, key=event.key, version_id=event.version_id, at=self.now().isoformat(), problems=problems
        )
        write_deploy_error(self.bucket, report)

    def _once(self, scope: str, event: S3Event, result: dict[str, Any], name: str, args: list[str]) -> dict[str, Any]:
        """Add the change's step exactly once (see the module's docstring); ``scope``: the manifest, or ``_all``."""
        key = layout.deploy_request(scope, event.event_id)
        claim = DeployClaim(
            key=event.key, version_id=event.version_id, created=event.created, step_name=name, state="pending", at=""
        )
        current = self.bucket.read(key)
        if current is None:
            try:
                etag = self.bucket.write(key, self._claim_body(claim, "pending"), if_absent=True)
            except PreconditionFailed:
                raise ClaimPending(f"{key}: claimed by another invocation a moment ago") from None
        else:
            found = DeployClaim.decode(current.text)
            if found.step_id:
                return {
                    **result,
                    "result": "duplicate",
                    "why": "this change was already handled",
                    "step": found.step_id,
                }
            age = (self.now() - datetime.fromisoformat(found.at)).total_seconds()
            if age < PENDING_SECONDS:
                raise ClaimPending(f"{key}: another invocation is adding its step (claimed {age:.0f}s ago)")
            existing = self._existing_step(name)
            if existing is not None:  # added by the invocation that died before marking its claim
                self._mark(key, current.etag, claim, existing)
                return {**result, "result": "duplicate", "why": "its step was already added", "step": existing}
            try:
                etag = self.bucket.write(key, self._claim_body(claim, "pending"), if_etag=current.etag)
            except PreconditionFailed:
                raise ClaimPending(f"{key}: taken over by another invocation") from None
        try:
            step = self._add_step(name, args)
        except Exception:
            self.bucket.delete(key, if_etag=etag)  # withdrawn: Lambda's retry adds the step
            raise
        self._mark(key, etag, claim, step)
        return {**result, "result": "step", "step": step}

    def _claim_body(self, claim: DeployClaim, state: str, step: str | None = None) -> bytes:
        return claim.model_copy(update={"state": state, "at": self.now().isoformat(), "step_id": step}).encode()

    def _mark(self, key: str, etag: str, claim: DeployClaim, step: str) -> None:
        """The claim now names its step; a repeated delivery adds nothing."""
        try:
            self.bucket.write(key, self._claim_body(claim, "added", step), if_etag=etag)
        except PreconditionFailed:  # someone took the abandoned claim over meanwhile: ours stands
            self.bucket.write(key, self._claim_body(claim, "added", step))

    def _existing_step(self, name: str) -> str | None:
        """The id of a step on the cluster with exactly this name (newest first), if any."""
        marker: dict[str, str] = {}
        for _ in range(STEP_LIST_PAGES):
            page = self.emr.list_steps(ClusterId=self.settings.cluster_id, **marker)
            for step in page.get("Steps", []):
                if step.get("Name") == name[:256]:
                    return step["Id"]
            if not page.get("Marker"):
                return None
            marker = {"Marker": page["Marker"]}
        return None

    def _add_step(self, name: str, args: list[str]) -> str:
        response = self.emr.add_job_flow_steps(
            JobFlowId=self.settings.cluster_id,
            Steps=[
                {
                    "Name": name[:256],
                    "ActionOnFailure": "CONTINUE",
                    "HadoopJarStep": {"Jar": "command-runner.jar", "Args": args},
                }
            ],
        )
        return response["StepIds"][0]


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """The Lambda entry point."""
    import boto3

    settings = LambdaSettings.from_env(dict(os.environ))
    results = Handler(settings, boto3.client("s3"), boto3.client("emr")).handle(event)
    for result in results:
        print(json.dumps(result))
    return {"results": results}
