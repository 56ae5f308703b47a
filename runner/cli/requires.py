"""Preconditions and postconditions every command shares, as decorators.

``exit_codes``: a command's problems become exit codes in one place (0 success, 2 a
problem the user can fix, printed one line each, 1 an internal failure with its cause;
``SQL_RUNNER_DEBUG=1`` shows the traceback instead). A command that returns an integer
exits with it. ``context``: the shared options (runner/cli/options.py) become one
:class:`~runner.cli.context.Context`, passed as the command's first argument.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

import click

from runner.cli.context import OPTIONS, Context
from runner.cli.output import err
from runner.core.errors import UserError


def exit_codes(command: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> None:
        try:
            result = command(*args, **kwargs)
        except UserError as error:
            for problem in error.problems:
                err.print(problem.render(), markup=False, highlight=False, soft_wrap=True)
            raise click.exceptions.Exit(error.exit_code) from None
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except Exception as error:  # noqa: BLE001 - an internal failure: exit 1 with the cause
            if os.environ.get("SQL_RUNNER_DEBUG"):
                raise
            err.print(f"internal error: {type(error).__name__}: {error}", markup=False)
            raise click.exceptions.Exit(1) from None
        if isinstance(result, int) and result:
            raise click.exceptions.Exit(result)

    return run


def context(*, need_project: bool = True) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Build the command's Context from the shared options it takes; ``need_project``: fail without a project."""

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(command)
        def run(**kwargs: Any) -> Any:
            settings = {name: kwargs.pop(name) for name in OPTIONS if name in kwargs}
            return command(Context(**settings, need_project=need_project), **kwargs)

        return run

    return decorate
