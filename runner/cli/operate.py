"""Commands for operating deployed jobs: status, stop, savepoint, history."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import click

from runner.cli import options, render, requires, status_layout
from runner.cli.context import Context
from runner.cli.output import err, line, out
from runner.core.errors import UserError


@click.command()
@options.deployment
@click.option(
    "-o",
    "--output",
    type=click.Choice(["wide", "json"]),
    help="wide: every column, however narrow the terminal; json: one JSON object per job. "
    "Default: at a terminal, the columns that fit it; piped, one plain line per job with every column.",
)
@click.option("--json", "output", flag_value="json", help="One JSON object per job (the same as -o json).")
@requires.exit_codes
@requires.context(need_project=False)
def status(ctx: Context, output: str | None) -> None:
    """Every deployed job: version, target, state, progress, watermark, latest savepoint, and why when unwell."""
    from runner.deploy.status import job_status
    from runner.state.records import deployed_names

    rows = [job_status(ctx.store, ctx.targets, ctx.team, name) for name in deployed_names(ctx.store.manifests)]
    if output == "json":
        for row in rows:
            line(json.dumps(row))
        return
    health = ctx.sessions.health()
    if health is not None or any(row["target"] == "session" for row in rows):
        line(render.session_health(health, ctx.sessions.attempt()))
    if not rows:
        err.print("no jobs deployed")
        return
    status_layout.show(out, rows, wide=output == "wide", at=datetime.now(UTC))


@click.command()
@click.argument("name")
@click.option("--no-savepoint", is_flag=True, help="Stop without taking a savepoint.")
@options.deployment
@options.stop_timeout
@requires.exit_codes
@requires.context(need_project=False)
def stop(ctx: Context, name: str, no_savepoint: bool) -> None:
    """Stop the running job NAME at a micro-batch boundary, with a savepoint unless told otherwise."""
    result = ctx.deployer(with_project=False).stop(name, savepoint=not no_savepoint)
    line(f"{name}: stopped; {render.outcome(result.outcome)}")


@click.command()
@click.argument("name")
@options.deployment
@options.stop_timeout
@options.spark_submit
@requires.exit_codes
@requires.context(need_project=False)
def savepoint(ctx: Context, name: str) -> None:
    """Take a savepoint of the running job NAME: a short stop at a batch boundary, snapshot, restart from it."""
    result = ctx.deployer(with_project=False).savepoint(name)
    line(f"{name}: {render.outcome(result.outcome)}")


@click.command()
@click.argument("name")
@click.option(
    "--limit", "-n", type=click.IntRange(min=1), default=20, show_default=True, help="Newest records to show."
)
@options.project
@options.store
@options.as_json("The records as JSON.")
@requires.exit_codes
@requires.context(need_project=False)
def history(ctx: Context, name: str, limit: int, as_json: bool) -> None:
    """Every deploy decision about the job NAME: when, what, why, and how it went."""
    from runner.core.protocol.history import read_history

    entries = read_history(ctx.store.manifests, name)[-limit:]
    if not entries:
        raise UserError.of("NO_HISTORY", name=name)
    if as_json:
        line(
            json.dumps([entry.model_dump(mode="json", by_alias=True, exclude_none=True) for entry in entries], indent=2)
        )
        return
    out.print(render.history_table(name, entries))
