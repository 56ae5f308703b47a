"""``spark-submit`` entry point of a job that judges its own manifest before it starts.

    spark-submit ... runner/analysis/driver.py --spec-uri <manifests>/launches/<name>/<launch-id>/spec.json

The runner launches a new or changed query's job at once instead of starting a Spark of its own
to analyse the query (``runner/deploy/launches.py``). This driver judges the manifest on its own
Spark, as ``validate`` and ``plan`` would (``runner/analysis/judge.py``), writes the verdict into
the state store, and waits for the runner's answer (``runner/core/protocol/launch.py``):

- released: it reads the run's final spec (meta, checkpoint, where the sources start) and runs the
  job on the same Spark (``jobs/entry.py``), as a job the runner started directly would;
- sent away, or no answer within the spec's wait: it exits, having written nothing but its verdict.

Exit codes: those of ``jobs/entry.py``; 2 also when the manifest was refused, 0 when sent away.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    # spark-submit runs this file as a script; make the project's packages importable
    # when they are not installed (an installed wheel takes precedence anyway).
    sys.path.append(str(Path(__file__).resolve().parents[2]))

from jobs import entry  # noqa: E402
from jobs.logs import quiet_python_logs  # noqa: E402
from runner.analysis.judge import verdict  # noqa: E402
from runner.core import logs  # noqa: E402
from runner.core.bucket import Bucket, bucket_from, read_uri  # noqa: E402
from runner.core.errors import UserError  # noqa: E402
from runner.core.placeholders import Values  # noqa: E402
from runner.core.protocol.document import now  # noqa: E402
from runner.core.protocol.jobspec import JobSpec  # noqa: E402
from runner.core.protocol.launch import (  # noqa: E402
    Release,
    Verdict,
    clear_launch,
    poll,
    read_release,
    write_verdict,
)

log = logging.getLogger("runner.analysis.driver")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="runner/analysis/driver.py", description=__doc__)
    parser.add_argument("--spec-uri", required=True, help="where the launch's spec JSON is (a local path or s3://)")
    args = parser.parse_args(argv)
    spec = JobSpec.decode(read_uri(args.spec_uri))
    assert spec.judging is not None and spec.store is not None, "a judging launch's spec says what to judge"
    logs.configure(spec.label)
    quiet_python_logs()
    bucket = bucket_from(spec.store["manifests"])
    values = Values(os.environ, spec.placeholders)
    try:
        spark = entry.session(spec, values)
    except UserError as error:
        _say(bucket, spec, Verdict(launch_id=spec.launch_id, at=now(), seconds=0.0, problems=tuple(error.problems)))
        return 2
    try:
        verdict = _judge(spark, spec, values)
        _say(bucket, spec, verdict)
        if not verdict.ok:
            return 2
        release = _wait(bucket, spec)
    except BaseException:
        spark.stop()
        raise
    if release is None or not release.start:
        why = release.reason if release is not None else f"no answer from the runner within {spec.judging.wait:.0f} s"
        log.info(f"not started: {why}")
        spark.stop()
        return 0
    written = bucket.read(release.spec_key) if release.spec_key else None
    if written is None:
        log.error(f"released, but its spec {release.spec_key} is not there: not started")
        spark.stop()
        return 1
    final = JobSpec.decode(written.text)
    clear_launch(bucket, spec.manifest.name, spec.launch_id)
    logs.configure(final.label)
    return entry.run(spark, final, values)


def _judge(spark, spec: JobSpec, values: Values) -> Verdict:
    """The verdict on the spec's manifest, judged on ``spark``."""
    assert spec.judging is not None
    log.info(f"judging the manifest over {len(spec.catalog.tables)} declared tables")
    return verdict(spark, spec.manifest, spec.catalog, values, spec.judging, spec.launch_id)


def _say(bucket: Bucket, spec: JobSpec, verdict: Verdict) -> None:
    for problem in verdict.problems:
        log.error(problem.render())
    write_verdict(bucket, spec.manifest.name, verdict)
    if verdict.ok:
        log.info(f"judged in {verdict.seconds:.1f} s; waiting for the runner's decision")


def _wait(bucket: Bucket, spec: JobSpec) -> Release | None:
    """The runner's answer, or None after the spec's wait."""
    assert spec.judging is not None
    every = 0.05 if bucket.describe().kind == "local" else 0.25
    found = poll(
        lambda: read_release(bucket, spec.manifest.name, spec.launch_id),
        deadline=time.monotonic() + spec.judging.wait,
        every=every,
        alive=lambda: True,
    )
    return found if isinstance(found, Release) else None


if __name__ == "__main__":
    sys.exit(main())
