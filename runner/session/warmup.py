"""Warming a new session before it reports itself up, so that its first query takes effect as fast as
the later ones.

A fresh JVM loads, verifies and compiles on first use every class that judging a query, starting a
streaming query and running its first micro-batches need, and Python starts the callback server a
``foreachBatch`` sink calls back through. Left to the first manifest, that took its time to effect
from about 2 s to about 11 s. :func:`warm` pays it at ``session start`` instead: a small query goes
through the very path a manifest takes, over a few rows in a throw-away folder:

1. judged on the session's analysis session, as the session's deployer judges a manifest
   (``runner/analysis/judge.py``);
2. built and started on a session of its own, as the host starts a hosted query
   (``runner/session/host.py``), processes its rows into a file sink (all that is available, then it
   stops) and is gone.

Nothing reaches the team's store: the spec names none, so no status, history or record is written.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

from pyspark.sql import SparkSession

from jobs import runtime
from jobs.build import build_job
from runner.analysis.judge import judge
from runner.authoring.ddl import parse_ddl
from runner.core.catalog import Catalog
from runner.core.manifest import Manifest, Meta
from runner.core.protocol.jobspec import JobSpec

log = logging.getLogger(__name__)

NAME = "session-warm-up"
METADATA = (
    "__create_timestamp TIMESTAMP(3), __query_name STRING, __query_description STRING, __query_id STRING, "
    "__query_version INT, __query_create_timestamp TIMESTAMP(3)"
)
ROWS = 20


def warm(spark: SparkSession, analysis: SparkSession, env: Mapping[str, str]) -> float:
    """Judge on ``analysis``, then run on a new session of ``spark``, a small query of the kind manifests hold;
    the seconds it took. A failure is logged, never raised: a session that could not warm up still runs."""
    began = time.monotonic()
    folder = Path(tempfile.mkdtemp(prefix="sql-runner-warm-up-"))
    try:
        catalog, manifest = _query(folder)
        judge(analysis, manifest, catalog, env, file=NAME)
        deployed = manifest.model_copy(
            update={"meta": Meta(query_id=NAME, query_version=1, query_create_timestamp=datetime.now(UTC))}
        )
        spec = JobSpec(
            manifest=deployed,
            catalog=catalog,
            checkpoint=str(folder / "checkpoint"),
            dead_letter=str(folder / "dead-letter"),
            once=True,
        )
        session = spark.newSession()
        built = build_job(session, deployed, catalog, env, live=True)
        queries = runtime.start(session, built, spec, env)
        runtime.wait(session, queries, once=True)
    except Exception as error:  # noqa: BLE001 - warming is an optimisation: the first query pays instead
        log.warning(f"warming up failed, the first query will start cold: {type(error).__name__}: {error}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return time.monotonic() - began


def _query(folder: Path) -> tuple[Catalog, Manifest]:
    """A JSON folder of ``ROWS`` events, a JSON folder to write to, and a filter with a cast over them."""
    events = folder / "events"
    events.mkdir()
    (events / "part-0.json").write_text(
        "".join(
            f'{{"id": "e{n}", "amount": {n * 7.5}, "ts": "2026-01-01T00:00:{n % 60:02d}.000Z"}}\n' for n in range(ROWS)
        )
    )
    tables = parse_ddl(
        f"CREATE TABLE `warm`.`events` (id STRING, amount DOUBLE, ts TIMESTAMP(3), "
        f"WATERMARK FOR ts AS ts - INTERVAL '5' SECOND) "
        f"WITH ('connector' = 'filesystem', 'path' = '{events}', 'format' = 'json');\n"
        f"CREATE TABLE `warm`.`out` (id STRING, amount DOUBLE, ts TIMESTAMP(3), {METADATA}) "
        f"WITH ('connector' = 'filesystem', 'path' = '{folder / 'out'}', 'format' = 'json');\n",
        file=NAME,
    )
    manifest = Manifest.model_validate(
        {
            "name": NAME,
            "description": "warms the session up",
            "target-table": "`warm`.`out`",
            "sql": "SELECT id, CAST(amount AS DOUBLE) AS amount, ts FROM `warm`.`events` WHERE amount > 10",
            "trigger-interval": "1 second",
        }
    )
    return Catalog(tuple(tables)), manifest
