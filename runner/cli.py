"""``sql-runner``: validate, run, preview streaming SQL manifests; print their schema.

Exit codes: 0 success, 2 a problem in the user's manifests or tables (one line each),
1 an internal failure (with its cause).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from runner import lifecycle_cli
from runner.authoring.project import load_project
from runner.core.errors import Problem, UserError
from runner.core.manifest import json_schema

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__, pretty_exceptions_enable=False)
out = Console(highlight=False)
err = Console(stderr=True, highlight=False)

ProjectOption = Annotated[
    Path | None, typer.Option("--project", help="Project folder (holds manifests/); default: found from here up.")
]


def step(message: str) -> None:
    """One timestamped progress line on stderr."""
    err.print(f"{time.strftime('%H:%M:%S')} {message}", markup=False, highlight=False, soft_wrap=True)


def _report(error: UserError) -> None:
    for problem in error.problems:
        err.print(problem.render(), markup=False, highlight=False, soft_wrap=True)


def _guard(action):  # noqa: ANN001, ANN202 - wraps a command body
    try:
        return action()
    except UserError as error:
        _report(error)
        raise typer.Exit(2) from None


@app.command()
def validate(
    paths: Annotated[list[Path] | None, typer.Argument(help="Manifests (.yaml) and DDL (.sql); default: the project.")]
    = None,
    project: ProjectOption = None,
) -> None:
    """Check manifests and table DDL, and analyse each query against the declared tables."""

    def body() -> None:
        from runner.analysis.validate import validate_paths

        checked = validate_paths(list(paths or []), project, step)
        for item in checked:
            reads = ", ".join(t.name for t in item.analysed.reads) or "no tables"
            out.print(f"ok  {item.manifest.name}: reads {reads}; writes {item.analysed.target.name}", markup=False,
                      soft_wrap=True)
        if not checked:
            out.print("ok")

    _guard(body)


def _project_of(path: Path) -> Path | None:
    """The project a manifest belongs to: the folder above its manifests/ folder."""
    for parent in path.resolve().parents:
        if parent.name == "manifests":
            return parent.parent
    return None


@app.command()
def preview(
    manifest: Annotated[Path | None, typer.Argument(help="Manifest whose query to preview.")] = None,
    sql: Annotated[str | None, typer.Option("--sql", help="A SELECT over the declared tables instead.")] = None,
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, help="Rows to show.")] = 20,
    timeout: Annotated[float, typer.Option("--timeout", min=1, help="Seconds to wait for rows.")] = 30.0,
    project: ProjectOption = None,
) -> None:
    """Print the first rows a query produces from the live sources; changes no state."""
    from jobs.build import build_query, sql_preview_query
    from runner.analysis.preview import preview as run_preview
    from runner.analysis.session import local_session

    def body() -> None:
        if (manifest is None) == (sql is None):
            raise UserError(Problem("PREVIEW_NEEDS_ONE_QUERY", "give either a MANIFEST or --sql, not both or neither"))
        proj = load_project(project or (_project_of(manifest) if manifest is not None else None))
        step("starting local Spark for the preview")
        spark = local_session("sql-runner-preview")
        if manifest is not None:
            loaded = proj.load_manifest(manifest)
            query = build_query(spark, loaded, proj.catalog, os.environ, streaming=True, file=proj.display(manifest))
        else:
            query = sql_preview_query(spark, sql or "", proj.catalog, os.environ)
        step(f"reading {', '.join(t.name for t in query.sources.values())} (up to {limit} rows, {timeout:.0f}s)")
        result = run_preview(query, limit=limit, timeout=timeout)
        table = Table(*result.columns, title=f"{len(result.rows)} row(s)")
        for row in result.rows:
            table.add_row(*["NULL" if v is None else str(v) for v in row])
        out.print(table)
        if result.timed_out and len(result.rows) < limit:
            out.print(f"(stopped after {timeout:.0f}s)")

    _guard(body)


@app.command()
def schema() -> None:
    """Print the JSON Schema of a manifest, for editors."""
    sys.stdout.write(json.dumps(json_schema(), indent=2) + "\n")


lifecycle_cli.register(app)


def main() -> None:
    try:
        app()
    except SystemExit:
        raise
    except Exception as error:  # noqa: BLE001 - internal failure: exit 1 with the cause
        if os.environ.get("SQL_RUNNER_DEBUG"):
            raise
        err.print(f"internal error: {type(error).__name__}: {error}", markup=False)
        sys.exit(1)


