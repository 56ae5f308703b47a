"""``spark-submit`` entry point of a streaming job.

    spark-submit ... jobs/entry.py --spec-json '{"manifest": ..., "tables": [...], ...}'

Exit codes: 0 done (or stopped), 2 a problem in the manifest or tables (one line each
on stderr), 1 a failure of the job itself.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    # spark-submit runs this file as a script; make the project's packages importable
    # when they are not installed (an installed wheel takes precedence anyway).
    sys.path.append(str(Path(__file__).resolve().parents[1]))

from pyspark.sql import SparkSession  # noqa: E402

from jobs import runtime  # noqa: E402
from jobs.build import build_job  # noqa: E402
from jobs.control import JobControl, StatusPublisher, refused_restore  # noqa: E402
from jobs.logs import quiet_python_logs  # noqa: E402
from runner.core.errors import UserError  # noqa: E402
from runner.core.jobspec import JobSpec  # noqa: E402


def log(spec: JobSpec, message: str) -> None:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
    print(f"{stamp} [{spec.label}] {message}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="jobs/entry.py", description=__doc__)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--spec-json", help="the job spec as JSON")
    source.add_argument("--spec-file", help="a file holding the job spec JSON")
    args = parser.parse_args(argv)
    text = args.spec_json if args.spec_json is not None else Path(args.spec_file).read_text(encoding="utf-8")
    spec = JobSpec.from_json(text)
    quiet_python_logs()
    spark = SparkSession.builder.getOrCreate()  # named by spark-submit --name (the job's exact identity)
    queries: list = []
    control = JobControl(spec, lambda message: log(spec, message))

    def on_signal(signum: int, _frame: object) -> None:
        log(spec, f"received signal {signum}: stopping after the current micro-batch")
        runtime.stop_all(queries)

    signal.signal(signal.SIGTERM, on_signal)
    try:
        log(spec, f"building the query over {len(spec.catalog.tables)} declared tables")
        built = build_job(spark, spec.manifest, spec.catalog, os.environ, live=True, starts=spec.starts)
        for role, tables in spec.starts.items():
            for table, start in tables.items():
                log(spec, f"{table} ({role}) continues the previous version: {start.kind}")
        counts = runtime.Counts()
        spark.streams.addListener(StatusPublisher(control, runtime.query_name(spec)))
        queries.extend(runtime.start(spark, built, spec, os.environ, counts))
        control.publish("running")
        control.watch(queries)
        log(
            spec,
            f"started: writing to {built.target.name}, checkpoint {spec.checkpoint}"
            + (" (once: stops when the available input is processed)" if spec.once else ""),
        )
        try:
            runtime.wait(spark, queries, once=spec.once)
        except KeyboardInterrupt:
            log(spec, "interrupted: stopping")
            runtime.stop_all(queries)
        written, dead = runtime.totals(queries) if spec.once else (counts.written, counts.dead_lettered)
        log(spec, f"finished: {written} rows written, {dead} malformed records dead-lettered")
        control.publish("stopped", reason="stop requested" if control.stop_requested.is_set() else "finished")
        return 0
    except UserError as error:
        for problem in error.problems:
            print(problem.render(), file=sys.stderr, flush=True)
        control.publish("failed", error="; ".join(p.render() for p in error.problems))
        return 2
    except Exception as error:  # noqa: BLE001 - report the cause and exit 1
        refusal = refused_restore(error)
        if refusal is not None:
            print(f"[{spec.label}] Spark refused the restored state: {refusal}", file=sys.stderr, flush=True)
            control.refused(refusal)
            return 1
        print(f"[{spec.label}] job failed: {type(error).__name__}: {error}", file=sys.stderr, flush=True)
        control.publish("failed", error=f"{type(error).__name__}: {error}")
        return 1
    finally:
        control.close()
        runtime.stop_all(queries)
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
