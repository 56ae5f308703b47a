"""``sql-runner console``: the web console over the team's state store (local folder or S3)."""

from __future__ import annotations

import os
import threading

import click

from runner.cli import options, requires
from runner.cli.context import Context
from runner.cli.output import line
from runner.console.http import Server


@click.command()
@options.deployment
@options.from_store
@options.stop_timeout
@options.spark_submit
@click.option(
    "--address",
    default="127.0.0.1",
    show_default=True,
    help="Where to listen; e.g. the EMR master's private address. Every request needs a console token.",
)
@click.option("--port", type=click.IntRange(min=0, max=65535), default=8099, show_default=True, help="0: any free.")
@click.option(
    "--allow-actions",
    is_flag=True,
    help="Allow stopping with a savepoint, taking a savepoint and deploying the desired manifest from the "
    "console (each confirmed, and recorded in history under the token's name); read-only without it.",
)
@click.option(
    "--token-name",
    default="operator",
    show_default=True,
    help="The token --print-token makes or --revoke-token removes; actions are recorded under its name.",
)
@click.option(
    "--print-token",
    is_flag=True,
    help="Make a new token named --token-name, print it once and exit. The state store keeps only its "
    "SHA-256; it replaces that name's earlier token, which stops working (its browsers are signed out).",
)
@click.option(
    "--revoke-token",
    is_flag=True,
    help="Remove the token named --token-name and exit: it opens nothing any more, its browsers are signed out.",
)
@click.option(
    "--sign-in-hours",
    type=click.FloatRange(min=0.01, max=24 * 30),
    default=12.0,
    show_default=True,
    help="How long a browser's sign-in lasts (it also ends after two idle hours, or when signing out).",
)
@click.option(
    "--stalled-after",
    type=click.FloatRange(min=0.1),
    default=10.0,
    show_default=True,
    help="A running query with no committed micro-batch for this many trigger intervals is shown as stalled...",
)
@click.option(
    "--stalled-min-seconds",
    type=click.FloatRange(min=0),
    default=60.0,
    show_default=True,
    help="...and for at least this many seconds.",
)
@requires.exit_codes
@requires.context(need_project=False)
def console(
    ctx: Context,
    address: str,
    port: int,
    allow_actions: bool,
    token_name: str,
    print_token: bool,
    revoke_token: bool,
    sign_in_hours: float,
    stalled_after: float,
    stalled_min_seconds: float,
) -> None:
    """Serve the web console: every query's state, its plan's verdict and history, live previews, /metrics.

    Until Ctrl-C. A token is required for every request: `--print-token` makes one (a browser signs in with
    it once and keeps only a sign-in; Prometheus sends it as a bearer token)."""
    from runner.core.errors import UserError
    from runner.core.protocol import console as access

    if print_token and revoke_token:
        raise click.UsageError("give --print-token or --revoke-token, not both")
    try:
        if print_token:
            line(access.issue_token(ctx.store.manifests, token_name))
            return
        if revoke_token:
            removed = access.revoke_token(ctx.store.manifests, token_name)
            line(f"token {token_name} {'removed' if removed else 'did not exist'}")
            return
    except ValueError as error:
        raise UserError.of("CONSOLE_TOKEN_NAME", name=token_name, reason=str(error)) from None
    access.scrub(ctx.store.manifests)
    stall = (stalled_after, stalled_min_seconds)
    served = serve(
        ctx, address=address, port=port, allow_actions=allow_actions, stall=stall, sign_in_hours=sign_in_hours
    )
    line(f"console on {served.url}/ ({'actions allowed' if allow_actions else 'read-only'}); Ctrl-C to stop")
    line("sign in with a token: sql-runner console --print-token [--token-name NAME] makes one")
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        served.stop()


def serve(
    ctx: Context,
    *,
    address: str,
    port: int,
    allow_actions: bool,
    stall: tuple[float, float],
    sign_in_hours: float = 12.0,
) -> Server:
    """Start serving the console over the command's store and targets (on a thread); returns the server.

    Verdicts, validation and previews without a session take one local Spark, started when first needed;
    a preview goes to the team's session when one runs (its rows stream through), else to that Spark."""
    from runner.analysis.session import local_session
    from runner.console import previews
    from runner.console.app import Console, console_routes, not_found_page, session_log
    from runner.console.http import application
    from runner.console.overview import Stall
    from runner.console.signin import SignIns
    from runner.state.desired import Desired
    from runner.targets.session import SessionUnavailable

    spark_lock = threading.Lock()
    local: list = []

    def spark():
        with spark_lock:
            if not local:
                local.append(local_session("sql-runner-console"))
            return local[0]

    def deployer(project, requested_by):
        return ctx.deployer(project=project, with_project=False, spark=spark, requested_by=requested_by)

    env = dict(os.environ)

    def preview(request, run) -> None:
        try:
            for chunk in ctx.sessions.preview_stream(request):
                run.answered_by = f"session {chunk.session_run}" if chunk.session_run else run.answered_by
                run.take(chunk)
            return
        except SessionUnavailable:
            pass
        run.answered_by = "local Spark"
        previews.answer(spark(), request, env=env, build_timeout=60.0, emit=run.take)

    desired = Desired(bucket=ctx.store.manifests) if ctx.from_store else Desired(folder=ctx.project.root)
    console = Console(
        ctx.store,
        ctx.targets,
        ctx.team,
        desired=desired,
        deployer=deployer,
        preview=preview,
        allow_actions=allow_actions,
        stall=Stall(*stall),
        session_log=session_log(ctx.target, ctx.team),
        sign_ins=SignIns(lifetime=sign_in_hours * 3600),
    )
    app = application(console_routes(console), console.access(), not_found_page(console))
    server = Server(app, address=address, port=port, name="console")
    server.start()
    return server
