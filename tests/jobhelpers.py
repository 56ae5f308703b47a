"""A manifest's query run in the test process, on the test's SparkSession, as its job's driver runs it.

Each run is the manifest at version 1 with a fixed query id on one checkpoint under the ``state`` folder a
test gives, so a second run resumes the first. ``run_once`` and ``run_published`` keep the checkpoint and
the dead letters under ``checkpoints/<name>`` and ``dead-letter/<name>`` (``Run`` says where);
``start_query`` and ``run_changelog`` under ``checkpoint`` and ``dead-letter``.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from pyspark.errors import AnalysisException

from jobs import runtime
from jobs.build import build_job
from jobs.control import JobControl
from jobs.entry import Job
from runner.authoring.project import load_project
from runner.core.bucket import LocalBucket
from runner.core.manifest import Manifest, Meta
from runner.core.placeholders import Values
from runner.core.protocol.jobspec import JobSpec
from tests.conftest import ProjectDir

CREATED = datetime(2026, 1, 1, tzinfo=UTC)  # every run's query-create-timestamp


def _versioned(project: ProjectDir, name: str):
    """The project's catalog and its manifest ``name`` at version 1."""
    proj = load_project(project.root)
    manifest = proj.load_manifest(project.root / "manifests" / f"{name}.yaml")
    meta = Meta(query_id=str(uuid.uuid5(uuid.NAMESPACE_URL, name)), query_version=1, query_create_timestamp=CREATED)
    return proj.catalog, manifest.model_copy(update={"meta": meta})


@dataclass(frozen=True)
class Run:
    manifest: Manifest  # with meta
    checkpoint: Path
    dead_letter: Path


def prepare(project: ProjectDir, manifest_name: str, state: Path, **fields) -> tuple[Run, JobSpec]:
    """A manifest's run at version 1 on one checkpoint under ``state`` (reruns resume it), and its job spec
    (``fields``: the spec's other fields)."""
    catalog, manifest = _versioned(project, manifest_name)
    prepared = Run(manifest, state / "checkpoints" / manifest_name, state / "dead-letter" / manifest_name)
    return prepared, JobSpec(
        manifest=prepared.manifest,
        catalog=catalog,
        checkpoint=str(prepared.checkpoint),
        dead_letter=str(prepared.dead_letter),
        **fields,
    )


def run_once(spark, project: ProjectDir, manifest_name: str, state: Path, *, once: bool = True):
    """Run a manifest in this process at version 1 on one checkpoint (reruns resume it)."""
    prepared, spec = prepare(project, manifest_name, state, once=once)
    built = build_job(spark, spec.manifest, spec.catalog, {}, live=True)
    queries = runtime.start(spark, built, spec, {})
    if once:
        runtime.wait(spark, queries, once=True)
    return prepared, queries


def run_published(spark, project: ProjectDir, manifest_name: str, state: Path) -> tuple[Run, dict, list]:
    """Run a manifest once in this process as its job's driver runs it (``jobs/entry.py``), publishing its
    status to a state store under ``state``: the run, its status as published (``status/<name>.json``, what
    ``sql-runner status`` and the console read) and its query."""
    store = LocalBucket(state / "manifests")
    prepared, spec = prepare(project, manifest_name, state, once=True, store={"manifests": store.describe()})
    control = JobControl(spec)
    job = Job(spark, spec, Values({}), control)
    try:
        assert job.run() == 0
    finally:
        control.close()
    return prepared, json.loads((state / "manifests" / "status" / f"{manifest_name}.json").read_text()), job.queries


def output_rows(spark, path: Path) -> list:
    """Committed rows of a file sink (Spark reads only files in its _spark_metadata log)."""
    try:
        return spark.read.json(str(path)).collect()
    except AnalysisException:  # no committed file yet
        return []


def start_query(spark, project: ProjectDir, name: str, state: Path, env: dict[str, str], *, once: bool = False):
    """Start a manifest's query in this process, at version 1 on one checkpoint (a restart resumes it): until
    stopped, or ``once`` over the input there is."""
    catalog, manifest = _versioned(project, name)
    spec = JobSpec(
        manifest=manifest,
        catalog=catalog,
        checkpoint=str(state / "checkpoint"),
        dead_letter=str(state / "dead-letter"),
        once=once,
    )
    built = build_job(spark, manifest, catalog, env, live=True)
    return runtime.start(spark, built, spec, env)


def run_changelog(spark, project: ProjectDir, name: str, state: Path, env: dict[str, str]) -> None:
    """Run a manifest once, in this process, at version 1 on one checkpoint (reruns resume it)."""
    runtime.wait(spark, start_query(spark, project, name, state, env, once=True), once=True)


def operator_states(checkpoint: Path) -> list[set[str]]:
    """The state variables of each stateful operator in ``checkpoint``, in operator order, as Spark's operator
    metadata has them."""
    found = []
    for metadata in sorted(checkpoint.glob("state/*/_metadata/v2/0"), key=lambda p: int(p.parts[-4])):
        operator = json.loads(metadata.read_text().split("\n", 1)[1])
        found.append({v["stateName"] for v in json.loads(operator["operatorPropertiesJson"])["stateVariables"]})
    return found


def join_states(checkpoint: Path) -> list[set[str]]:
    """The state variables of each join in ``checkpoint``, in operator order."""
    return [names for names in operator_states(checkpoint) if names & {"left", "leftRow", "leftSource"}]
