"""The deployment commands: plan, deploy, run, status, stop, savepoint, history.

Where state lives: ``--state PATH`` (default ``.sql-runner/`` in the project) for every
bucket not named with ``--manifests-bucket`` / ``--checkpoints-bucket`` /
``--savepoints-bucket`` (S3; the endpoint comes from boto3's settings, e.g.
``AWS_ENDPOINT_URL``). Where jobs run: ``--target local|standalone|yarn``.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from runner.authoring.project import Project, find_root, load_project
from runner.core import layout
from runner.core.bucket import S3Bucket
from runner.core.errors import Problem, ProblemCollector, UserError
from runner.deploy.deployer import Decision, Deployer, Prepared, Settings
from runner.deploy.plan import Action
from runner.state import records, savepoints
from runner.state.store import Store, open_store
from runner.targets import LocalTarget, StandaloneTarget, YarnTarget
from runner.targets.base import Target
from runner.targets.foreground import ForegroundTarget

Paths = Annotated[list[Path] | None, typer.Argument(help="Manifests to consider; default: every manifest.")]
Project_ = Annotated[Path | None, typer.Option("--project", help="Project folder; default: found from here up.")]
State = Annotated[Path | None, typer.Option("--state", envvar="SQL_RUNNER_STATE",
                                             help="Local state folder; default: .sql-runner/ in the project.")]
ManifestsBucket = Annotated[str | None, typer.Option("--manifests-bucket", envvar="SQL_RUNNER_MANIFESTS_BUCKET",
                                                     help="S3 bucket for manifests, deployed records, history.")]
CheckpointsBucket = Annotated[str | None, typer.Option("--checkpoints-bucket",
                                                       envvar="SQL_RUNNER_CHECKPOINTS_BUCKET",
                                                       help="S3 bucket for checkpoints.")]
SavepointsBucket = Annotated[str | None, typer.Option("--savepoints-bucket", envvar="SQL_RUNNER_SAVEPOINTS_BUCKET",
                                                      help="S3 bucket for savepoints.")]
TargetKind = Annotated[str, typer.Option("--target", envvar="SQL_RUNNER_TARGET",
                                         help="Where jobs run: local, standalone or yarn.")]
Master = Annotated[str | None, typer.Option("--master", envvar="SQL_RUNNER_MASTER",
                                            help="Standalone master URL, e.g. spark://127.0.0.1:7077.")]
WebUi = Annotated[str | None, typer.Option("--master-web-ui", envvar="SQL_RUNNER_MASTER_WEB_UI",
                                           help="Standalone master's web UI; default http://<host>:8080.")]
ResourceManager = Annotated[str | None, typer.Option("--resource-manager", envvar="SQL_RUNNER_RESOURCE_MANAGER",
                                                     help="YARN ResourceManager URL, e.g. http://master:8088.")]
Team = Annotated[str, typer.Option("--team", envvar="SQL_RUNNER_TEAM", help="Team the jobs belong to.")]
StopTimeout = Annotated[float, typer.Option("--stop-timeout", min=1,
                                            help="Seconds to wait for a stop at a batch boundary.")]
SparkSubmit = Annotated[str | None, typer.Option("--spark-submit", envvar="SQL_RUNNER_SPARK_SUBMIT",
                                                 help="The spark-submit to run (e.g. EMR's /usr/bin/spark-submit); "
                                                      "default: the installed pyspark's.")]
FromStore = Annotated[bool, typer.Option("--from-store",
                                         help="Take the desired manifests and tables from the manifests bucket.")]
ObjectVersion = Annotated[str | None, typer.Option("--object-version",
                                                   help="With --from-store and one manifest: deploy exactly this "
                                                        "S3 object version of it.")]


class Context:
    """Everything one command needs: the project, the store and the target."""

    def __init__(self, *, project: Path | None, state: Path | None, manifests_bucket: str | None,
                 checkpoints_bucket: str | None, savepoints_bucket: str | None, target: str, master: str | None,
                 web_ui: str | None, resource_manager: str | None, team: str, stop_timeout: float = 90.0,
                 from_store: bool = False, need_project: bool = True, spark_submit: str | None = None,
                 pinned: tuple[str, str] | None = None):
        from runner.cli import step

        self.log = step
        if state is not None:
            state_root = state.resolve()
        elif project is not None:
            state_root = layout.state_dir(project.resolve(), None)
        else:
            try:
                state_root = layout.state_dir(find_root(), None)
            except UserError:
                if need_project:
                    raise
                state_root = layout.state_dir(Path.cwd(), None)
        self.store: Store = open_store(state_root, manifests_bucket=manifests_bucket,
                                       checkpoints_bucket=checkpoints_bucket, savepoints_bucket=savepoints_bucket)
        self.state_root = state_root
        self.team = team
        self.target: Target = self._target(target, master, web_ui, resource_manager)
        self.stop_timeout = stop_timeout
        self.spark_submit = spark_submit
        self.project_dir = project
        self.from_store = from_store
        self.pinned = pinned  # (key, S3 version id) of one manifest to deploy exactly
        self._project: Project | None = None
        self._tmp: tempfile.TemporaryDirectory | None = None

    def _target(self, kind: str, master: str | None, web_ui: str | None, resource_manager: str | None) -> Target:
        logs = self.state_root / "logs"
        if kind == "local":
            return LocalTarget(self.store.manifests, logs)
        if kind == "standalone":
            if not master:
                raise UserError(Problem("TARGET_NEEDS_MASTER", "--target standalone needs --master spark://host:port"))
            return StandaloneTarget(self.store.manifests, logs, master, web_ui)
        if kind == "yarn":
            if not resource_manager:
                raise UserError(Problem("TARGET_NEEDS_RESOURCE_MANAGER",
                                        "--target yarn needs --resource-manager http://host:8088"))
            return YarnTarget(resource_manager)
        raise UserError(Problem("UNKNOWN_TARGET", f"target '{kind}' is not known",
                                hint="one of: local, standalone, yarn"))

    @property
    def project(self) -> Project:
        if self._project is None:
            if self.from_store:
                self._tmp = tempfile.TemporaryDirectory(prefix="sql-runner-manifests-")
                root = Path(self._tmp.name)
                for key in self.store.manifests.keys("manifests/"):
                    blob = self.store.manifests.read(key)
                    if blob is not None:
                        (root / key).parent.mkdir(parents=True, exist_ok=True)
                        (root / key).write_bytes(blob.data)
                if self.pinned is not None:
                    self._pin(root, *self.pinned)
                (root / "manifests").mkdir(exist_ok=True)
                self._project = load_project(root)
            else:
                self._project = load_project(self.project_dir)
        return self._project

    def _pin(self, root: Path, key: str, version_id: str) -> None:
        bucket = self.store.manifests
        if not isinstance(bucket, S3Bucket):
            raise UserError(Problem("OBJECT_VERSION_NEEDS_S3", "--object-version needs --manifests-bucket (S3)"))
        blob = bucket.read(key, version_id=version_id)
        if blob is None:
            raise UserError(Problem("OBJECT_VERSION_NOT_FOUND", f"s3://{bucket.bucket}/{key} has no version "
                                    f"'{version_id}'", hint="the version may have been deleted; push it again"))
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_bytes(blob.data)

    @property
    def desired_root(self) -> Path:
        """Where paths given on the command line are resolved (the bucket's copy with --from-store)."""
        return self.project.root if self.from_store else Path.cwd()

    def deployer(self, target: Target | None = None, once: bool = False, *, with_project: bool = True) -> Deployer:
        settings = Settings(self.store, target or self.target, self.team, dict(os.environ), self.stop_timeout,
                            spark_submit=self.spark_submit, once=once)
        return Deployer(self.project if with_project else None, settings, self.log)


def _prepare_all(ctx: Context, deployer: Deployer, paths: list[Path] | None) -> tuple[dict[str, Prepared], bool]:
    """Desired manifests, all checked first; with no paths the whole project (removals included)."""
    project = ctx.project
    chosen = [(ctx.desired_root / p).resolve() for p in paths] if paths else project.manifest_paths()
    collector = ProblemCollector()
    for path in chosen:
        if not path.exists():
            collector.add(Problem("FILE_NOT_FOUND", "no such manifest", file=str(path)))
    collector.raise_if_any()
    prepared: dict[str, Prepared] = {}
    for path in chosen:
        try:
            item = deployer.prepare(path)
        except UserError as error:
            collector.capture(error)
            continue
        if item.manifest.name in prepared:
            collector.add(Problem("MANIFEST_DUPLICATE_NAME", f"name '{item.manifest.name}' is used twice",
                                  file=item.file, field="name"))
        prepared[item.manifest.name] = item
    collector.raise_if_any()
    return prepared, not paths


def _decisions(ctx: Context, deployer: Deployer, paths: list[Path] | None) -> list[Decision]:
    prepared, whole_project = _prepare_all(ctx, deployer, paths)
    names = set(prepared)
    if whole_project:
        names |= set(records.deployed_names(ctx.store.manifests))
    return [deployer.decide(name, prepared.get(name)) for name in sorted(names)]


def plan_table(decisions: list[Decision]) -> Table:
    table = Table(title="plan", title_justify="left", show_lines=True)
    for column in ("manifest", "decision", "why", "sources"):
        table.add_column(column, overflow="fold")
    for decision in decisions:
        action: Action = decision.action
        sources = "\n".join(f"{s.table}: {s.detail}" for s in action.sources) or "-"
        table.add_row(decision.name, action.summary, "\n".join(action.reasons), sources)
    return table


def plan(paths: Paths = None, project: Project_ = None, state: State = None, manifests_bucket: ManifestsBucket = None,
         checkpoints_bucket: CheckpointsBucket = None, savepoints_bucket: SavepointsBucket = None,
         target: TargetKind = "local", master: Master = None, master_web_ui: WebUi = None,
         resource_manager: ResourceManager = None, team: Team = "local", from_store: FromStore = False,
         as_json: Annotated[bool, typer.Option("--json", help="One JSON object per manifest.")] = False) -> None:
    """Show, per manifest, what deploy would do and why. Changes nothing."""
    from runner.cli import _guard, out

    def body() -> None:
        ctx = Context(project=project, state=state, manifests_bucket=manifests_bucket,
                       checkpoints_bucket=checkpoints_bucket, savepoints_bucket=savepoints_bucket, target=target,
                       master=master, web_ui=master_web_ui, resource_manager=resource_manager, team=team,
                       from_store=from_store)
        decisions = _decisions(ctx, ctx.deployer(), paths)
        if as_json:
            for decision in decisions:
                action = decision.action
                out.print(json.dumps({"name": decision.name, "decision": action.kind, "summary": action.summary,
                                      "version": action.version, "reasons": list(action.reasons),
                                      "sources": [{"table": s.table, "how": s.how, "detail": s.detail}
                                                  for s in action.sources]}), markup=False, soft_wrap=True)
            return
        out.print(plan_table(decisions))

    _guard(body)


def deploy(paths: Paths = None, all_: Annotated[bool, typer.Option("--all", help="Every manifest of the project; "
                                                                   "deployed jobs without one are removed.")] = False,
           project: Project_ = None, state: State = None, manifests_bucket: ManifestsBucket = None,
           checkpoints_bucket: CheckpointsBucket = None, savepoints_bucket: SavepointsBucket = None,
           target: TargetKind = "local", master: Master = None, master_web_ui: WebUi = None,
           resource_manager: ResourceManager = None, team: Team = "local", stop_timeout: StopTimeout = 90.0,
           from_store: FromStore = False, spark_submit: SparkSubmit = None,
           object_version: ObjectVersion = None) -> None:
    """Carry the plan out: start, restore, stop with savepoint, remove. Prints the plan first."""
    from runner.cli import _guard, out

    def body() -> None:
        if all_ and paths:
            raise UserError(Problem("DEPLOY_ALL_WITH_PATHS", "give manifests or --all, not both"))
        if object_version is not None and not (from_store and paths and len(paths) == 1):
            raise UserError(Problem("OBJECT_VERSION_NEEDS_ONE_MANIFEST", "--object-version pins one manifest: "
                                    "give --from-store and exactly one manifests/<name>.yaml"))
        pinned = (paths[0].as_posix(), object_version) if object_version is not None and paths else None
        ctx = Context(project=project, state=state, manifests_bucket=manifests_bucket,
                       checkpoints_bucket=checkpoints_bucket, savepoints_bucket=savepoints_bucket, target=target,
                       master=master, web_ui=master_web_ui, resource_manager=resource_manager, team=team,
                       stop_timeout=stop_timeout, from_store=from_store, spark_submit=spark_submit, pinned=pinned)
        deployer = ctx.deployer()
        decisions = _decisions(ctx, deployer, paths)
        out.print(plan_table(decisions))
        failures = ProblemCollector()
        for decision in decisions:
            try:
                result = deployer.carry_out(decision)
            except UserError as error:
                failures.capture(error)
                continue
            out.print(f"{decision.name}: {result['summary']} -> {_outcome(result['outcome'])}", markup=False,
                      soft_wrap=True)
        failures.raise_if_any()

    _guard(body)


def undeploy(name: Annotated[str, typer.Argument(help="The job whose manifest was deleted.")],
             project: Project_ = None, state: State = None, manifests_bucket: ManifestsBucket = None,
             checkpoints_bucket: CheckpointsBucket = None, savepoints_bucket: SavepointsBucket = None,
             target: TargetKind = "local", master: Master = None, master_web_ui: WebUi = None,
             resource_manager: ResourceManager = None, team: Team = "local", stop_timeout: StopTimeout = 90.0,
             from_store: FromStore = False) -> None:
    """Carry out one manifest's deletion: stop with a savepoint, mark removed (the state is kept)."""
    from runner.cli import _guard, out

    def body() -> None:
        ctx = Context(project=project, state=state, manifests_bucket=manifests_bucket,
                       checkpoints_bucket=checkpoints_bucket, savepoints_bucket=savepoints_bucket, target=target,
                       master=master, web_ui=master_web_ui, resource_manager=resource_manager, team=team,
                       stop_timeout=stop_timeout, from_store=from_store)
        present = [p for p in ctx.project.manifest_paths() if p.stem == name]
        if present:
            raise UserError(Problem("MANIFEST_STILL_PRESENT", f"'{name}' has a manifest again "
                                    f"({ctx.project.display(present[0])}); nothing undeployed",
                                    hint="deploy it instead, or delete the manifest first"))
        deployer = ctx.deployer(with_project=False)
        decision = deployer.decide(name, None)
        result = deployer.carry_out(decision, purpose="undeploy")
        out.print(f"{name}: {result['summary']} -> {_outcome(result['outcome'])}", markup=False, soft_wrap=True)

    _guard(body)


def _outcome(outcome: dict) -> str:
    parts = [outcome.get("result", "ok")]
    if "job" in outcome:
        parts.append(f"job {outcome['job']}")
    if "savepoint" in outcome:
        sp = outcome["savepoint"]
        parts.append(f"savepoint {sp['key']} ({'graceful' if sp['graceful'] else 'after kill'})")
    return ", ".join(parts)


def run(manifest: Annotated[Path, typer.Argument(help="The manifest to run.")],
        once: Annotated[bool, typer.Option("--once", help="Process the input available now, then exit.")] = False,
        project: Project_ = None, state: State = None, team: Team = "local") -> None:
    """Deploy one manifest and run its job in the foreground (local Spark), then exit."""
    from runner.cli import _guard, _project_of, out

    def body() -> int:
        ctx = Context(project=project or _project_of(manifest), state=state, manifests_bucket=None,
                       checkpoints_bucket=None, savepoints_bucket=None, target="local", master=None, web_ui=None,
                       resource_manager=None, team=team)
        assert isinstance(ctx.target, LocalTarget)
        foreground = ForegroundTarget(ctx.target)
        deployer = ctx.deployer(foreground, once=once)
        decision = _decisions(ctx, deployer, [manifest])[0]
        ctx.log(f"[{decision.name}] {decision.action.summary}: {'; '.join(decision.action.reasons)}")
        result = deployer.carry_out(decision, purpose="run")
        if foreground.exit_code is None:
            out.print(f"{decision.name}: {result['summary']}; nothing to run", markup=False)
            return 0
        return foreground.exit_code

    raise typer.Exit(_guard(body))


def _job_context(project: Path | None, state: Path | None, manifests_bucket: str | None,
                 checkpoints_bucket: str | None, savepoints_bucket: str | None, target: str, master: str | None,
                 web_ui: str | None, resource_manager: str | None, team: str, stop_timeout: float = 90.0,
                 spark_submit: str | None = None) -> Context:
    return Context(project=project, state=state, manifests_bucket=manifests_bucket,
                   checkpoints_bucket=checkpoints_bucket, savepoints_bucket=savepoints_bucket, target=target,
                   master=master, web_ui=web_ui, resource_manager=resource_manager, team=team,
                   stop_timeout=stop_timeout, need_project=False, spark_submit=spark_submit)


def stop(name: Annotated[str, typer.Argument(help="The job to stop.")],
         no_savepoint: Annotated[bool, typer.Option("--no-savepoint", help="Stop without taking a savepoint.")]
         = False,
         project: Project_ = None, state: State = None, manifests_bucket: ManifestsBucket = None,
         checkpoints_bucket: CheckpointsBucket = None, savepoints_bucket: SavepointsBucket = None,
         target: TargetKind = "local", master: Master = None, master_web_ui: WebUi = None,
         resource_manager: ResourceManager = None, team: Team = "local", stop_timeout: StopTimeout = 90.0) -> None:
    """Stop a running job at a micro-batch boundary, with a savepoint unless told otherwise."""
    from runner.cli import _guard, out

    def body() -> None:
        ctx = _job_context(project, state, manifests_bucket, checkpoints_bucket, savepoints_bucket, target, master,
                           master_web_ui, resource_manager, team, stop_timeout)
        result = ctx.deployer(with_project=False).stop(name, savepoint=not no_savepoint)
        outcome = result["outcome"]
        out.print(f"{name}: stopped; {_outcome(outcome)}", markup=False, soft_wrap=True)

    _guard(body)


def savepoint(name: Annotated[str, typer.Argument(help="The running job to take a savepoint of.")],
              project: Project_ = None, state: State = None, manifests_bucket: ManifestsBucket = None,
              checkpoints_bucket: CheckpointsBucket = None, savepoints_bucket: SavepointsBucket = None,
              target: TargetKind = "local", master: Master = None, master_web_ui: WebUi = None,
              resource_manager: ResourceManager = None, team: Team = "local",
              stop_timeout: StopTimeout = 90.0, spark_submit: SparkSubmit = None) -> None:
    """Take a savepoint of a running job: a short stop at a batch boundary, snapshot, restart from it."""
    from runner.cli import _guard, out

    def body() -> None:
        ctx = _job_context(project, state, manifests_bucket, checkpoints_bucket, savepoints_bucket, target, master,
                           master_web_ui, resource_manager, team, stop_timeout, spark_submit)
        result = ctx.deployer(with_project=False).savepoint(name)
        out.print(f"{name}: {_outcome(result['outcome'])}", markup=False, soft_wrap=True)

    _guard(body)


def status(project: Project_ = None, state: State = None, manifests_bucket: ManifestsBucket = None,
           checkpoints_bucket: CheckpointsBucket = None, savepoints_bucket: SavepointsBucket = None,
           target: TargetKind = "local", master: Master = None, master_web_ui: WebUi = None,
           resource_manager: ResourceManager = None, team: Team = "local",
           as_json: Annotated[bool, typer.Option("--json", help="One JSON object per job instead of a table.")]
           = False) -> None:
    """One line per deployed job: version, target, state, progress, watermark, latest savepoint."""
    from runner.cli import _guard, out

    def body() -> None:
        ctx = _job_context(project, state, manifests_bucket, checkpoints_bucket, savepoints_bucket, target, master,
                           master_web_ui, resource_manager, team)
        rows = [job_status(ctx, name) for name in records.deployed_names(ctx.store.manifests)]
        if as_json:
            for row in rows:
                out.print(json.dumps(row), markup=False, soft_wrap=True)
            return
        table = Table(title="status", title_justify="left")
        columns = ("name", "version", "target", "state", "last progress", "input rows/s", "batch ms", "watermark",
                   "latest savepoint")
        for column in columns:
            table.add_column(column, overflow="fold")
        for row in rows:
            table.add_row(*[str(row[c]) if row[c] is not None else "-" for c in columns])
        out.print(table)

    _guard(body)


def job_status(ctx: Context, name: str) -> dict:
    record, _ = records.read_deployed(ctx.store.manifests, name)
    assert record is not None
    job = ctx.target.find(ctx.team, name)
    blob = ctx.store.manifests.read(layout.status(name))
    published = json.loads(blob.text) if blob else {}
    progress = published.get("progress") or {} if published.get("version") == record.version else {}
    if record.removed:
        state = "removed" + (" (still running)" if job else "")
    elif job is not None:
        state = "running"
    elif published.get("version") == record.version and published.get("state") in ("failed", "stopped"):
        state = published["state"]
    else:
        state = "not running"
    latest = savepoints.savepoints(ctx.store, name, record.version)
    rate = progress.get("input-rows-per-second")
    return {"name": name, "version": record.version, "target": record.target, "state": state,
            "last progress": progress.get("timestamp"), "input rows/s": None if rate is None else round(rate, 1),
            "batch ms": progress.get("batch-duration-ms"), "watermark": progress.get("watermark"),
            "latest savepoint": latest[-1].key.rstrip("/").rsplit("/", 1)[-1] if latest else None,
            "job": job.job_id if job else None, "detail": job.detail if job else None}


def history(name: Annotated[str, typer.Argument(help="The job whose decisions to show.")],
            project: Project_ = None, state: State = None, manifests_bucket: ManifestsBucket = None,
            limit: Annotated[int, typer.Option("--limit", "-n", min=1, help="Newest records to show.")] = 20,
            as_json: Annotated[bool, typer.Option("--json", help="The records as JSON.")] = False) -> None:
    """Every deploy decision about a job: when, what, why, and how it went."""
    from runner.cli import _guard, out

    def body() -> None:
        ctx = _job_context(project, state, manifests_bucket, None, None, "local", None, None, None, "local")
        entries = records.read_history(ctx.store.manifests, name)[-limit:]
        if not entries:
            raise UserError(Problem("NO_HISTORY", f"no decisions recorded for '{name}'"))
        if as_json:
            out.print(json.dumps(entries, indent=2), markup=False, soft_wrap=True)
            return
        table = Table(title=f"history of {name}", title_justify="left", show_lines=True)
        for column in ("at", "decision", "version", "why", "sources", "outcome", "seconds"):
            table.add_column(column, overflow="fold")
        for entry in entries:
            sources = "\n".join(f"{s['table']}: {s['detail']}" for s in entry.get("sources", []))
            outcome = entry.get("outcome", {})
            detail = _outcome(outcome) + ("\n" + outcome["error"] if "error" in outcome else "")
            if outcome.get("continuation"):
                detail += "\n" + "\n".join(outcome["continuation"])
            table.add_row(entry["at"][:19], entry.get("summary", entry["decision"]), str(entry.get("version")),
                          "\n".join(entry.get("reasons", [])), sources or "-", detail, str(entry.get("seconds")))
        out.print(table)

    _guard(body)


def register(app: typer.Typer) -> None:
    for command in (plan, deploy, undeploy, run, status, stop, savepoint, history):
        app.command()(command)
