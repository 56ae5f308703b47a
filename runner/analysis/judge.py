"""Judging a desired manifest: Spark's checks (as ``validate`` runs them) and its comparison with the
deployed query, on whichever Spark is at hand.

The runner's own Spark (``plan``, or a target whose jobs cannot judge themselves), the team's session,
and a job's own driver before it starts (``runner/analysis/driver.py``) all judge through :func:`judge`,
so the decision does not depend on where it was made.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass

from pyspark.sql import SparkSession

from jobs.build import BuiltJob
from runner.analysis.query_diff import compare, deployed_build, diff_queries
from runner.analysis.validate import analyse
from runner.core.catalog import Catalog
from runner.core.errors import UserError
from runner.core.manifest import Manifest
from runner.core.protocol.document import now
from runner.core.protocol.jobspec import Judging
from runner.core.protocol.launch import Verdict
from runner.core.querydiff import QueryDiff, same_query, same_text
from runner.core.starts import SourceTable
from runner.core.tables import TableDef

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Judged:
    """A desired manifest that Spark found deployable."""

    tables: tuple[TableDef, ...]  # every table read or written
    sources: tuple[SourceTable, ...]  # the tables read as streams
    diff: QueryDiff | None  # against the deployed query; None when nothing is deployed


def judge(
    spark: SparkSession,
    manifest: Manifest,
    catalog: Catalog,
    env: Mapping[str, str],
    *,
    file: str,
    deployed: Manifest | None = None,
    deployed_tables: tuple[TableDef, ...] = (),
) -> Judged:
    """Analyse ``manifest`` over ``catalog`` and compare it with ``deployed`` (over ``deployed_tables``);
    UserError if it is not deployable.

    When the deployed query's text differs, the deployed query is analysed first and the desired one
    over the same frames, so that one analysis serves both the checks and the comparison."""
    before = _deployed_build(spark, deployed, deployed_tables, manifest, env)
    analysed = analyse(spark, manifest, catalog, env, file=file, reuse=before.query if before is not None else None)
    tables = analysed.tables
    sources = tuple(
        SourceTable(table=t.name, connector=t.connector, changelog=bool(t.changelog)) for t in analysed.reads
    )
    diff = None
    if deployed is not None:
        if same_text(deployed, deployed_tables, manifest, tables):
            diff = QueryDiff(changed=False, state_compatible=True)
        elif before is not None:
            diff = compare(before, analysed.built, deployed, manifest, list(deployed_tables), catalog)
        else:
            diff = diff_queries(spark, deployed, list(deployed_tables), manifest, catalog, env)
    return Judged(tables, sources, diff)


def _deployed_build(
    spark: SparkSession,
    deployed: Manifest | None,
    tables: tuple[TableDef, ...],
    manifest: Manifest,
    env: Mapping[str, str],
) -> BuiltJob | None:
    """The deployed query's analysis when the desired query's text or target differs from it; None
    otherwise, or when it does not build (the desired query is then checked first, as without this
    shortcut, and the comparison builds the deployed one again and reports what failed)."""
    if deployed is None or same_query(deployed, manifest):
        return None
    try:
        return deployed_build(spark, deployed, list(tables), env)
    except Exception:  # noqa: BLE001 - reported by the comparison, after the desired query's own checks
        return None


def verdict(
    spark: SparkSession, manifest: Manifest, catalog: Catalog, env: Mapping[str, str], judging: Judging, launch_id: str
) -> Verdict:
    """:func:`judge` as a :class:`Verdict` (a judging driver's, or the team's session's answer): the problems that make
    the manifest undeployable, the analysis's own failure (not the manifest's fault), or what Spark found."""
    began = time.monotonic()

    def said(**found) -> Verdict:
        return Verdict(launch_id=launch_id, at=now(), seconds=round(time.monotonic() - began, 3), **found)

    try:
        judged = judge(
            spark,
            manifest,
            catalog,
            env,
            file=judging.file,
            deployed=judging.deployed,
            deployed_tables=judging.deployed_tables,
        )
    except UserError as error:
        return said(problems=tuple(error.problems))
    except Exception as error:  # noqa: BLE001 - the analysis itself failed: the runner reports it
        log.error(f"judging failed: {type(error).__name__}: {error}")
        return said(failure=f"{type(error).__name__}: {error}")
    return said(tables=judged.tables, sources=judged.sources, diff=judged.diff)
