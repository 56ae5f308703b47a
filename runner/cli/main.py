"""sql-runner: validate, preview, plan, deploy and operate streaming SQL manifests.

Exit codes: 0 success, 2 a problem the user can fix (in the manifests or tables, a
refused or failed submission, a deploy standing down; one line each), 1 an internal
failure (with its cause).
"""

from __future__ import annotations

import click

from runner.cli import author, deployments, operate
from runner.cli.console import console
from runner.cli.session import session
from runner.core import logs


@click.group(help=__doc__, context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """The command group; each command is registered below."""
    logs.configure()  # progress on stderr, one line per step: HH:MM:SS [job vN] message


for command in (
    author.validate,
    author.preview,
    author.schema,
    deployments.plan,
    deployments.deploy,
    deployments.undeploy,
    deployments.run,
    operate.status,
    operate.stop,
    operate.savepoint,
    operate.history,
    session,
    console,
):
    cli.add_command(command)


def main() -> None:
    """The ``sql-runner`` console script."""
    cli()
