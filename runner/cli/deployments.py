"""Commands that decide and deploy: plan, deploy, undeploy, run."""

from __future__ import annotations

import logging
from pathlib import Path

import click

from runner.cli import options, render, requires
from runner.cli.context import Context
from runner.cli.output import line, out
from runner.core import layout, logs
from runner.core.errors import ProblemCollector, UserError
from runner.core.manifest import Manifest
from runner.core.protocol.control import DeployError, write_deploy_error
from runner.core.reasons import rendered
from runner.deploy.deployer import Decision, Deployer

log = logging.getLogger(__name__)


def decisions(ctx: Context, deployer: Deployer, paths: tuple[Path, ...], mode: str | None = None) -> list[Decision]:
    """The plan for the given manifests, or for the whole project (removals included) when none are given;
    with ``mode``, only the manifests and deployed jobs of that mode."""
    if mode is not None and paths:
        raise UserError.of("MODE_WITH_PATHS")
    chosen = [(ctx.desired_root / p).resolve() for p in paths] if paths else None
    other_mode: set[str] = set()
    if mode is not None:
        chosen = []
        for path in ctx.project.manifest_paths():
            manifest = _manifest(ctx, path)
            if manifest is None or manifest.mode == mode:
                chosen.append(path)
            else:
                other_mode.add(manifest.name)
    return deployer.decide_all(deployer.prepare_all(chosen), whole_project=not paths, mode=mode, other_mode=other_mode)


def _manifest(ctx: Context, path: Path) -> Manifest | None:
    """The manifest, read without Spark; None when it cannot be read (preparing it reports why)."""
    try:
        return ctx.project.load_manifest(path)
    except UserError:
        return None


lease_wait = click.option(
    "--lease-wait",
    type=click.FloatRange(min=0),
    default=0.0,
    show_default=True,
    help="Seconds to wait while another deploy of the same manifest holds its lease (0: stand down at once). "
    "EMR steps wait, so no pushed version is dropped.",
)


def newer_version(ctx: Context, key: str, version: str) -> str | None:
    """Why object ``version`` of ``key`` should not be deployed any more, if it should not: it is not the newest."""
    current = ctx.store.manifests.current_version(key)  # type: ignore[attr-defined] - pinned needs S3
    if current == version:
        return None
    if current is None:
        return f"{key} was deleted after version {version} was pushed; its undeploy step removes the job"
    return f"version {version} of {key} is no longer the newest ({current} is); that version's own step deploys it"


only_mode = click.option(
    "--mode",
    type=click.Choice(["application", "session"]),
    help="Only the project's manifests (and deployed jobs) of this mode; on EMR the first step deploys the "
    "application-mode ones and the session applies its own.",
)


@click.command()
@options.manifest_paths
@options.deployment
@options.from_store
@options.as_json("One JSON object per manifest.")
@only_mode
@requires.exit_codes
@requires.context()
def plan(ctx: Context, paths: tuple[Path, ...], as_json: bool, mode: str | None) -> None:
    """Show, per manifest (default: every manifest), what deploy would do and why. Changes nothing."""
    with ctx.deployer(command="plan") as deployer:
        planned = decisions(ctx, deployer, paths, mode)
    if as_json:
        for decision in planned:
            line(render.plan_json(decision))
        return
    out.print(render.plan_table(planned))


@click.command()
@options.manifest_paths
@click.option(
    "--all", "all_", is_flag=True, help="Every manifest of the project; deployed jobs without one are removed."
)
@click.option(
    "--object-version", help="With --from-store and one manifest: deploy exactly this S3 object version of it."
)
@options.deployment
@options.stop_timeout
@options.from_store
@options.spark_submit
@only_mode
@lease_wait
@requires.exit_codes
@requires.context()
def deploy(
    ctx: Context,
    paths: tuple[Path, ...],
    all_: bool,
    object_version: str | None,
    mode: str | None,
    lease_wait: float,
) -> None:
    """Carry the plan out: start, restore, stop with savepoint, remove. Prints the plan first.

    With --object-version (an EMR step for one push), that version is deployed only while it is the
    newest of its manifest: checked before and again once the manifest's lease is held."""
    if all_ and paths:
        raise UserError.of("DEPLOY_ALL_WITH_PATHS")
    superseded = None
    if object_version is not None:
        if not (ctx.from_store and len(paths) == 1):
            raise UserError.of("OBJECT_VERSION_NEEDS_ONE_MANIFEST")
        key = paths[0].as_posix()
        ctx.pinned = (key, object_version)
        reason = newer_version(ctx, key, object_version)
        if reason is not None:
            line(f"{paths[0].stem}: nothing to do: {reason}")
            return

        def superseded() -> str | None:
            return newer_version(ctx, key, object_version)

    with ctx.deployer(lease_wait=lease_wait, judge_in_jobs=True) as deployer:
        try:
            planned = decisions(ctx, deployer, paths, mode)
        except UserError as error:
            _report_refused(ctx, error, object_version)
            raise
        deployer.release_spark()  # carrying the plan out needs no Spark here
        out.print(render.plan_table(planned))
        failures = ProblemCollector()
        for decision in planned:
            try:
                result = deployer.carry_out(decision, superseded=superseded)
            except UserError as error:
                _report_refused(ctx, error, object_version)
                failures.capture(error)
                continue
            if decision.prepared is not None:
                _clear_refused(ctx, decision.name)  # deployed: no longer refused
            line(f"{decision.name}: {result.summary} -> {render.outcome(result.outcome)}")
        failures.raise_if_any()


def _report_refused(ctx: Context, error: UserError, object_version: str | None) -> None:
    """With --from-store (an EMR step) the author is not watching the step's output: each refused manifest's
    problems go to ``errors/<name>.json`` in the manifests bucket, where the deploy Lambda and the session put
    the problems they find themselves."""
    if not ctx.from_store:
        return
    refused: dict[str, tuple[str, list[str]]] = {}
    for problem in error.problems:
        if problem.file and problem.file.endswith((".yaml", ".yml")):
            refused.setdefault(Path(problem.file).stem, (problem.file, []))[1].append(problem.render())
    for name, (file, problems) in refused.items():
        report = DeployError(name=name, key=file, version_id=object_version, problems=problems)
        write_deploy_error(ctx.store.manifests, report)


def _clear_refused(ctx: Context, name: str) -> None:
    """With --from-store, remove ``errors/<name>.json`` if there is one (a delete where there is nothing would
    leave a delete marker in the versioned bucket)."""
    refused = layout.deploy_error(name)
    if ctx.from_store and ctx.store.manifests.read(refused) is not None:
        ctx.store.manifests.delete(refused)


@click.command()
@click.argument("name")
@options.deployment
@options.stop_timeout
@options.from_store
@lease_wait
@requires.exit_codes
@requires.context()
def undeploy(ctx: Context, name: str, lease_wait: float) -> None:
    """Carry out the deletion of NAME's manifest: stop with a savepoint, mark removed (the state is kept)."""
    present = [p for p in ctx.project.manifest_paths() if p.stem == name]
    if present:
        raise UserError.of("MANIFEST_STILL_PRESENT", name=name, manifest=ctx.project.display(present[0]))
    with ctx.deployer(with_project=False, lease_wait=lease_wait, command="undeploy") as deployer:
        result = deployer.carry_out(deployer.decide(name, None), purpose="undeploy")
    _clear_refused(ctx, name)  # the manifest is gone: why it was refused no longer matters
    line(f"{name}: {result.summary} -> {render.outcome(result.outcome)}")


@click.command()
@click.argument("manifest", type=click.Path(path_type=Path))
@click.option("--once", is_flag=True, help="Process the input available now, then exit.")
@options.project
@options.state
@options.team
@requires.exit_codes
def run(manifest: Path, once: bool, project: Path | None, state: Path | None, team: str) -> int:
    """Deploy one MANIFEST and run its job in the foreground (local Spark), then exit with the job's exit code."""
    from runner.authoring.project import project_of
    from runner.targets import LocalTarget
    from runner.targets.foreground import ForegroundTarget

    ctx = Context(project=project or project_of(manifest), state=state, team=team)
    assert isinstance(ctx.target, LocalTarget)
    foreground = ForegroundTarget(ctx.target)
    with ctx.deployer(foreground, once=once, judge_in_jobs=True, command="run") as deployer:
        decision = decisions(ctx, deployer, (manifest,))[0]
        deployer.release_spark()  # only when its job could not judge it: the analysis JVM does not wait beside it
        log.info(
            f"{decision.action.summary}: {'; '.join(rendered(decision.action.reasons))}", extra=logs.job(decision.name)
        )
        result = deployer.carry_out(decision, purpose="run")
    if foreground.exit_code is None:
        line(f"{decision.name}: {result.summary}; nothing to run")
        return 0
    return foreground.exit_code
