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

Each event is claimed once with a create-if-absent write of
``deploy-requests/<name>/<version>.json``, so S3's repeated deliveries of one object
version add no second step.

Configuration (environment): ``CLUSTER_ID``, ``TEAM``, ``MANIFESTS_BUCKET``,
``CHECKPOINTS_BUCKET``, ``SAVEPOINTS_BUCKET``; optional ``RESOURCE_MANAGER`` (default
``http://localhost:8088``, the master's), ``SQL_RUNNER`` (default
``/usr/local/bin/sql-runner``) and ``SPARK_SUBMIT`` (default ``/usr/bin/spark-submit``).
"""

from __future__ import annotations

import json
import os
import urllib.parse
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import yaml

from runner.authoring.manifest_file import parse_manifest, parse_template
from runner.aws.steps import StepCommand
from runner.core import layout
from runner.core.bucket import PreconditionFailed, S3Bucket
from runner.core.errors import Problem, UserError
from runner.core.manifest import BUILT_IN_DEFAULTS

PREFIX = layout.DESIRED_PREFIX
SESSION_APPLIES = "a session-mode manifest: the team's session applies it from manifests/ by itself"
TEMPLATE_KEY = f"{PREFIX}job-template.yaml"


@dataclass(frozen=True)
class Settings:
    cluster_id: str
    step: StepCommand

    @staticmethod
    def from_env(env: dict[str, str]) -> Settings:
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
            )
            if env.get(name)
        }
        return Settings(
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
    def __init__(self, settings: Settings, s3: Any, emr: Any, now: Any = None):
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
            if not self._claim("_all", event):
                return {**result, "result": "duplicate", "why": "this change was already handled"}
            step = self._add_step(
                f"sql-runner deploy --all --mode application ({event.key} changed, {event.event_id})",
                self.settings.step.args("deploy", "--all", "--mode", "application"),
            )
            return {**result, "result": "step", "step": step}
        if not event.created:
            if self._runs_in_session(name):
                return {**result, "result": "session", "why": SESSION_APPLIES}
            if not self._claim(name, event):
                return {**result, "result": "duplicate", "why": "this deletion was already handled"}
            step = self._add_step(
                f"sql-runner undeploy {name} ({event.event_id})",
                self.settings.step.args("undeploy", name, submits=False),
            )
            return {**result, "result": "step", "step": step}
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
        if not self._claim(name, event):
            return {**result, "result": "duplicate", "why": "this object version was already handled"}
        self.bucket.delete(layout.deploy_error(name))
        pinned = ["--object-version", event.version_id] if event.version_id else []
        step = self._add_step(
            f"sql-runner deploy {name} ({event.event_id})", self.settings.step.args("deploy", *pinned, event.key)
        )
        return {**result, "result": "step", "step": step}

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
        record = yaml.safe_load(blob.text) or {}
        return record.get("deployment", {}).get("target") == layout.SESSION_TARGET

    def _template(self) -> dict[str, Any]:
        blob = self.bucket.read(TEMPLATE_KEY)
        return BUILT_IN_DEFAULTS if blob is None else parse_template(blob.text, file=TEMPLATE_KEY)

    def _report(self, name: str, event: S3Event, problems: list[str]) -> None:
        report = {
            "name": name,
            "key": event.key,
            "version-id": event.version_id,
            "at": self.now().isoformat(),
            "problems": problems,
            "result": "not deployed",
        }
        self.bucket.write(layout.deploy_error(name), json.dumps(report, indent=2).encode())

    def _claim(self, name: str, event: S3Event) -> bool:
        """Create-if-absent: True for the first delivery of this change, False for repeats."""
        body = json.dumps(
            {"key": event.key, "version-id": event.version_id, "created": event.created, "at": self.now().isoformat()}
        ).encode()
        try:
            self.bucket.write(layout.deploy_request(name, event.event_id), body, if_absent=True)
        except PreconditionFailed:
            return False
        return True

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

    settings = Settings.from_env(dict(os.environ))
    results = Handler(settings, boto3.client("s3"), boto3.client("emr")).handle(event)
    for result in results:
        print(json.dumps(result))
    return {"results": results}
