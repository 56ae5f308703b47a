"""``sql-runner session start | stop | status``: the team's long-running session application."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

import click

from runner.cli import options, render, requires, status_layout
from runner.cli.context import Context
from runner.cli.output import line, out
from runner.core.errors import UserError


@click.group()
def session() -> None:
    """One Spark application per team that hosts every `mode: session` query and applies manifest changes in seconds."""


def _properties(values: tuple[str, ...]) -> dict[str, str]:
    properties = {}
    for value in values:
        key, sep, setting = value.partition("=")
        if not sep or not key.strip():
            raise UserError.of("SESSION_BAD_CONF", value=value)
        properties[key.strip()] = setting
    return properties


@session.command()
@options.deployment
@options.stop_timeout
@options.spark_submit
@options.from_store
@click.option("--conf", "conf", multiple=True, metavar="KEY=VALUE", help="A Spark property of the session application.")
@click.option(
    "--poll", type=click.FloatRange(min=0.1), default=0.5, show_default=True, help="Seconds between looks for changes."
)
@click.option(
    "--max-failures",
    type=click.IntRange(min=1),
    default=5,
    show_default=True,
    help="Consecutive run-time failures after which a query is parked until its manifest changes.",
)
@click.option(
    "--batch-timeout",
    type=click.FloatRange(min=1),
    default=300.0,
    show_default=True,
    help="Seconds a micro-batch's tasks may run (waiting for cores does not count) before it is cancelled "
    "and counts as a failure.",
)
@click.option(
    "--build-timeout",
    type=click.FloatRange(min=1),
    default=60.0,
    show_default=True,
    help="Seconds building a query (running its code snippet) may take.",
)
@click.option(
    "--control-address",
    default="127.0.0.1",
    show_default=True,
    help="Where the control endpoint (live previews and the web console) listens; e.g. 0.0.0.0 on EMR's private "
    "network. Every request needs the session's token or a console token from the state store.",
)
@click.option(
    "--control-port", type=click.IntRange(min=0, max=65535), default=0, show_default=True, help="0: any free port."
)
@click.option(
    "--console-allow-actions",
    is_flag=True,
    help="The web console the session serves on its control endpoint may stop queries, take savepoints and "
    "deploy (each confirmed, and recorded under the asking token's name); read-only without it.",
)
@requires.exit_codes
@requires.context()
def start(
    ctx: Context,
    conf: tuple[str, ...],
    poll: float,
    max_failures: int,
    batch_timeout: float,
    build_timeout: float,
    control_address: str,
    control_port: int,
    console_allow_actions: bool,
) -> None:
    """Start the team's session (in the background) and return once it is up; it applies the manifests by itself."""
    from runner.core.protocol.session_config import Protection
    from runner.session import launch

    project = None if ctx.from_store else ctx.project.root
    started = launch.start(
        ctx.store,
        ctx.target,
        team=ctx.team,
        project=project,
        application_settings=ctx.application_settings,
        env=dict(os.environ),
        properties=_properties(conf),
        poll=poll,
        stop_timeout=ctx.stop_timeout,
        protection=Protection(max_failures=max_failures, batch_timeout=batch_timeout, build_timeout=build_timeout),
        spark_submit=ctx.spark_submit,
        control=(control_address, control_port),
        console_actions=console_allow_actions,
        placeholders=ctx.placeholders,
    )
    if started.already:
        line(f"session already running: {started.job.job_id} ({started.job.identity.run_id})")
        return
    watched = "the manifests bucket" if project is None else str(Path(project) / "manifests")
    line(
        f"session {started.job.identity.run_id} up in {started.seconds:.1f}s ({started.job.job_id}); watching {watched}"
    )


@session.command()
@options.deployment
@options.stop_timeout
@requires.exit_codes
@requires.context(need_project=False)
def stop(ctx: Context) -> None:
    """Stop every session query at a batch boundary with a savepoint, then end the session."""
    from runner.session import launch

    # Each query may take up to the stop timeout; the session as a whole gets a generous multiple.
    seconds = launch.stop(ctx.store, ctx.target, team=ctx.team, timeout=ctx.stop_timeout * 3)
    if seconds is None:
        line("no session running")
        return
    line(f"session stopped in {seconds:.1f}s")


@session.command()
@options.deployment
@options.as_json("The session's health as one JSON object.")
@requires.exit_codes
@requires.context(need_project=False)
def status(ctx: Context, as_json: bool) -> None:
    """The session's health (uptime, queries running / failing / parked) and its queries."""
    from runner.deploy.status import job_status
    from runner.state.records import deployed_names

    health = ctx.sessions.health()
    if as_json:
        line(health.encode().decode() if health is not None else json.dumps({"state": "not running"}))
        return
    line(render.session_health(health, ctx.sessions.attempt()))
    rows = [job_status(ctx.store, ctx.targets, ctx.team, name) for name in deployed_names(ctx.store.manifests)]
    rows = [row for row in rows if row["target"] == "session"]
    if rows:
        status_layout.show(out, rows, wide=False, at=datetime.now(UTC))
