"""``spark-submit`` entry point of a streaming job.

    spark-submit ... jobs/entry.py --spec-uri s3://<manifests>/specs/<name>/<run-id>.json

The spec is read from the state store, so the command line carries no part of it (and
a YARN cluster-mode driver on any node finds it). Placeholders in the spec's engine
properties and table options are resolved here, from this process's environment and the
sources the spec names (SSM Parameter Store, Secrets Manager), and never written anywhere.

A query that fails at run time is restarted from the latest checkpoint by the manifest's
``restart-strategy``, as the run's restart state machine (``runner/core/restart_machine.py``)
says; the failures are kept in the job's status, so a new application attempt of the same
run (YARN) counts on from them.

Exit codes: 0 done (or stopped), 2 a problem in the manifest or tables (one line each
on stderr), 1 a failure of the job itself (restarts used up, or Spark refused the state).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path

if __package__ in (None, ""):
    # spark-submit runs this file as a script; make the project's packages importable
    # when they are not installed (an installed wheel takes precedence anyway).
    sys.path.append(str(Path(__file__).resolve().parents[1]))

from jobs.pythonpath import installed_pyspark_first  # noqa: E402

installed_pyspark_first()  # before pyspark is imported

from pyspark import SparkConf  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402

from jobs import localfs, runtime  # noqa: E402
from jobs.build import build_job  # noqa: E402
from jobs.control import JobControl, failure_reason, refused_restore  # noqa: E402
from jobs.jvm import check_spark_version, jvm_gone  # noqa: E402
from jobs.logs import quiet_python_logs  # noqa: E402
from runner.core import logs  # noqa: E402
from runner.core.bucket import read_uri  # noqa: E402
from runner.core.errors import UserError  # noqa: E402
from runner.core.placeholders import Values, driver_properties  # noqa: E402
from runner.core.protocol.jobspec import JobSpec  # noqa: E402
from runner.core.protocol.status import JobStatus, read_status  # noqa: E402
from runner.core.restart_machine import Turn  # noqa: E402

log = logging.getLogger("jobs.entry")


def previous_attempt(control: JobControl) -> JobStatus | None:
    """What an earlier application attempt of this very launch published (YARN re-attempts), if any."""
    if control.bucket is None or not control.spec.launch_id:
        return None
    try:
        status = read_status(control.bucket, control.spec.manifest.name)
    except Exception:  # noqa: BLE001 - nothing to count on
        return None
    return status if status is not None and status.launch_id == control.spec.launch_id else None


class Job:
    """One run of a job: start its queries, wait, and restart them after a failure as its restart state machine
    (``control.machine``) says."""

    def __init__(self, spark: SparkSession, spec: JobSpec, values: Values, control: JobControl):
        self.spark, self.spec, self.values, self.control = spark, spec, values, control
        self.machine = control.machine
        self.queries: list = []
        self.counts = runtime.Counts()
        self.ending = threading.Event()  # SIGTERM or a stop request: no more restarts
        # spark-submit's JVM (on YARN the ApplicationMaster's) runs this driver as its child: while it lives, it is
        # this process's parent
        self.parent = os.getppid()
        self.signalled_with_jvm = False  # a SIGTERM came while the JVM still ran (a stop, not a clean-up)
        self.earlier = previous_attempt(control)

    def start(self, first: bool) -> None:
        spec = self.spec
        if first:
            log.info(f"building the query over {len(spec.catalog.tables)} declared tables")
        built = build_job(self.spark, spec.manifest, spec.catalog, self.values, live=True, starts=spec.starts)
        if first:
            for role, tables in spec.starts.items():
                for table, start in tables.items():
                    log.info(f"{table} ({role}) continues the previous version: {start.kind}")
        self.spark.streams.resetTerminated()
        self.queries.extend(runtime.start(self.spark, built, spec, self.values, self.counts))
        self.machine.started()
        if first:
            log.info(
                f"started: writing to {built.target.name}, checkpoint {spec.checkpoint}"
                + (" (once: stops when the available input is processed)" if spec.once else "")
            )

    def run(self) -> int:
        """Run until done or stopped (0), or until a failure the strategy gives up on (1)."""
        if self.earlier is not None:
            if self.earlier.state_refused:  # an earlier attempt of this run: Spark refused its state; it would again
                log.info(
                    f"Spark refused this run's restored state before: {self.earlier.state_refused}; not starting again"
                )
                return 1
            if self.machine.continue_from(self.earlier) is not None:
                log.info("an earlier attempt of this run used up its restarts; not starting again")
                return 1
        pause = self.machine.wait_before_start()
        if pause > 0:
            log.info(f"an earlier attempt of this run failed: starting in {pause:.0f}s")
            if self._pause(pause):
                return self._stopped()
        first = True
        while True:
            try:
                self.start(first)
                if first:  # from now on a stop request stops the queries (and any restart)
                    self.control.watch(self.queries)
                first = False
                if self._asked_to_stop():  # while a restart was being built: the watcher found no queries
                    runtime.stop_all(self.queries)
                    return self._stopped()
                runtime.wait(self.spark, self.queries, once=self.spec.once)
                return self._finished()
            except UserError as problem:  # first start: the manifest's; later: e.g. a secret store hiccup
                if first or self.spec.once:
                    raise
                error: BaseException = problem
            except KeyboardInterrupt:
                log.info("interrupted: stopping")
                runtime.stop_all(self.queries)
                return self._finished()
            except Exception as failure:  # noqa: BLE001 - judged below
                if refused_restore(failure) is not None or self.spec.once:
                    raise
                if jvm_gone(failure):  # not the query's failure: none counted against its strategy
                    return self._stopped() if self._stop_took_the_jvm() else ended_with_jvm(failure)
                error = failure
            runtime.stop_all(self.queries)
            self.control.publish_progress(self.queries)  # where the failed run got to
            self.queries.clear()
            if self._asked_to_stop():
                return self._stopped()
            reason = failure_reason(error.problems[0].render() if isinstance(error, UserError) else str(error))
            judged = self.machine.failed(reason)
            if judged.turn == Turn.GAVE_UP:
                log.info(f"failed {judged.counted} times within the failure window: giving up ({reason})")
                return 1
            delay = judged.delay or 0.0
            log.info(f"failed ({reason}); restarting from the latest checkpoint in {delay:.0f}s")
            if self._pause(delay):
                return self._stopped()
            restart = self.machine.restarting()
            log.info(f"restart {restart.standing.restarts} from the latest checkpoint")

    def _asked_to_stop(self) -> bool:
        return self.ending.is_set() or self.control.stop_requested.is_set()

    def _stop_took_the_jvm(self) -> bool:
        """Whether the JVM, found gone, ended because this job was asked to stop: a stop request, or a SIGTERM that
        reached the JVM and this driver together (the local target's stop, a kill through YARN). Not the SIGTERM
        a NodeManager sends to what is left of a container whose JVM was killed: the job was lost, not stopped."""
        return self.control.stop_requested.is_set() or (self.ending.is_set() and self.signalled_with_jvm)

    def _pause(self, seconds: float) -> bool:
        """Wait ``seconds`` before a (re)start; True if a stop (signal or request) came meanwhile."""
        deadline = time.monotonic() + seconds
        while not self._asked_to_stop():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self.ending.wait(min(left, 0.5))
        return True

    def _finished(self) -> int:
        log.info(
            f"finished: {self.counts.written} rows written, {self.counts.dead_lettered} malformed records dead-lettered"
        )
        return self._stopped()

    def _stopped(self) -> int:
        reason = "stop requested" if self._asked_to_stop() else "finished"
        # its last micro-batches, before it says it stopped (a JVM gone first leaves none to read: nothing is said)
        self.control.publish_progress(self.queries)
        self.machine.stopped(reason)
        return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="jobs/entry.py", description=__doc__)
    parser.add_argument("--spec-uri", required=True, help="where the job spec JSON is (a local path or s3://)")
    args = parser.parse_args(argv)
    spec = JobSpec.decode(read_uri(args.spec_uri))
    logs.configure(spec.label)  # every line of this driver says which job and version it is
    quiet_python_logs()
    control = JobControl(spec)
    values = Values(os.environ, spec.placeholders)
    try:
        spark = session(spec, values)
    except UserError as error:
        return _user_error(control, error)
    return run(spark, spec, values, control)


def session(spec: JobSpec, values: Values) -> SparkSession:
    """The driver's SparkSession, with the manifest's engine properties resolved here; UserError when one
    cannot be (a placeholder not set) or this is not the Spark the runner was built for."""
    check_spark_version()
    properties = {
        **localfs.missing_from(SparkConf(), spec.checkpoint),
        **driver_properties(spec.manifest.spark_properties, values),
    }
    builder = SparkSession.builder  # named by spark-submit --name (the job's exact identity)
    for key, value in properties.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def run(spark: SparkSession, spec: JobSpec, values: Values, control: JobControl | None = None) -> int:
    """Run ``spec``'s job on ``spark`` until it is done, stopped or given up on; its exit code. Stops ``spark``."""
    control = control or JobControl(spec)
    job = Job(spark, spec, values, control)

    def on_signal(signum: int, _frame: object) -> None:
        log.info(f"received signal {signum}: stopping the query")
        job.signalled_with_jvm = os.getppid() == job.parent  # not reparented: the JVM had not ended before it
        job.ending.set()
        # Not from the handler: it runs on the main thread, which may be inside a Py4J call (waiting on
        # the queries), and a call from it would re-enter that call's connection.
        queries = list(job.queries)
        threading.Thread(target=runtime.stop_all, args=(queries,), name="stop-on-signal", daemon=True).start()

    signal.signal(signal.SIGTERM, on_signal)
    try:
        return job.run()
    except UserError as error:
        return _user_error(control, error)
    except Exception as error:  # noqa: BLE001 - report the cause and exit 1
        if jvm_gone(error):  # a SIGTERM reaches spark-submit's JVM too, which may end before this process
            return job._stopped() if job._stop_took_the_jvm() else ended_with_jvm(error)
        refusal = refused_restore(error)
        if refusal is not None:
            log.error(f"Spark refused the restored state: {refusal}")
            control.refused(refusal)
            return 1
        log.error(f"job failed: {type(error).__name__}: {error}")
        control.publish_progress(job.queries)
        control.machine.fatal(f"{type(error).__name__}: {error}")
        return 1
    finally:
        control.finish_stop()
        control.close()
        runtime.stop_all(job.queries)
        try:
            spark.stop()
        except Exception as error:  # noqa: BLE001 - its JVM may be gone already
            if not jvm_gone(error):
                raise


def ended_with_jvm(error: BaseException) -> int:
    """The driver's JVM is gone (killed, out of memory, its container lost): nothing can restart from this process,
    which ends with it. On YARN the application's next attempt starts a new driver, which resumes the checkpoint."""
    log.error(f"the driver's JVM is gone ({failure_reason(str(error))}): this driver ends with it")
    return 1


def _user_error(control: JobControl, error: UserError) -> int:
    for problem in error.problems:
        log.error(problem.render())
    control.machine.fatal("; ".join(p.render() for p in error.problems))
    control.close()
    return 2


if __name__ == "__main__":
    sys.exit(main())
