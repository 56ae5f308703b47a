"""Commands for query authors: validate, preview, schema."""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

import click
from rich.table import Table

from runner.cli import options, requires
from runner.cli.output import line, out
from runner.core.errors import UserError
from runner.core.placeholders import Sources, Values

log = logging.getLogger(__name__)


@click.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@options.project
@options.placeholder_sources
@requires.exit_codes
def validate(
    paths: tuple[Path, ...], project: Path | None, parameters_prefix: str | None, aws_region: str | None
) -> None:
    """Check manifests and table DDL, and analyse each query against the declared tables.

    PATHS: manifests (.yaml) and DDL files (.sql); default: the whole project."""
    from runner.analysis.validate import validate_paths

    values = Values(dict(os.environ), Sources(parameters_prefix=parameters_prefix, region=aws_region))
    checked = validate_paths(list(paths), project, values)
    for item in checked:
        reads = ", ".join(t.name for t in item.analysed.reads) or "no tables"
        lookups = ", ".join(t.name for t in item.analysed.lookups)
        joins = f"; looks up {lookups}" if lookups else ""
        changes = ""
        if item.analysed.built.query.changelog is not None:
            why = item.analysed.recomputed
            changes = "; incremental" if why is None else f"; recomputed every micro-batch: {why}"
        line(f"ok  {item.manifest.name}: reads {reads}{joins}; writes {item.analysed.target.name}{changes}")
    if not checked:
        line("ok")


@click.command()
@click.argument("manifest", required=False, type=click.Path(path_type=Path))
@click.option("--sql", help="A SELECT over the declared tables instead of a manifest's query.")
@click.option("--limit", "-n", type=click.IntRange(min=1), default=20, show_default=True, help="Rows to show.")
@click.option(
    "--timeout", type=click.FloatRange(min=1), default=30.0, show_default=True, help="Seconds to wait for rows."
)
@click.option(
    "--local", is_flag=True, help="Start local Spark for the preview even when the team's session is running."
)
@options.deployment
@requires.exit_codes
def preview(manifest: Path | None, sql: str | None, limit: int, timeout: float, local: bool, **settings: Any) -> None:
    """Print the first rows a query produces from the live sources; changes no state.

    The team's running session answers (no new JVM, a second or two); without one, or with
    --local, the preview runs on local Spark in this process."""
    from runner.authoring.project import load_project, project_of
    from runner.cli.context import Context
    from runner.core.protocol.preview import PreviewRequest
    from runner.targets.session import SessionUnavailable

    if (manifest is None) == (sql is None):
        raise UserError.of("PREVIEW_NEEDS_ONE_QUERY")
    project = settings.pop("project")
    found = load_project(project or (project_of(manifest) if manifest is not None else None))
    loaded = found.load_manifest(manifest) if manifest is not None else None
    result = None
    if not local:
        ctx = Context(project=found.root, **settings)
        request = PreviewRequest(
            sql=sql,
            manifest=loaded,
            file=found.display(manifest) if manifest is not None else None,
            tables=found.catalog.tables,
            limit=limit,
            timeout=timeout,
        )
        try:
            answer = ctx.sessions.preview(request)
            log.info(f"answered by session {answer.session_run} in {answer.seconds:.2f}s")
            result = (answer.columns, answer.rows, answer.timed_out)
        except SessionUnavailable as why:
            log.info(f"{why}: previewing on local Spark")
    if result is None:
        from runner.analysis.preview import preview_query

        ran = preview_query(found, manifest=manifest, sql=sql, limit=limit, timeout=timeout)
        result = (ran.columns, [list(row) for row in ran.rows], ran.timed_out)
    columns, rows, timed_out = result
    table = Table(*columns, title=f"{len(rows)} row(s)")
    for row in rows:
        table.add_row(*["NULL" if v is None else str(v) for v in row])
    out.print(table)
    if timed_out and len(rows) < limit:
        out.print(f"(stopped after {timeout:.0f}s)")


@click.command()
def schema() -> None:
    """Print the JSON Schema of a manifest, for editors."""
    from runner.core.manifest import json_schema

    sys.stdout.write(json.dumps(json_schema(), indent=2) + "\n")
