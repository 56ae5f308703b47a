"""``spark-submit`` command lines for jobs, built as argument lists (never shell strings)."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

import jobs
from jobs import localfs
from jobs.logs import java_options
from runner.core import platform
from runner.core.placeholders import split_properties
from runner.core.platform import spark_submit_path
from runner.core.protocol.jobspec import JobSpec

# Quiet, predictable defaults for a job; any of them can be overridden in sparkProperties.
DEFAULT_PROPERTIES = {
    "spark.ui.showConsoleProgress": "false",
    "spark.log.level": "WARN",
}


def entry_point() -> Path:
    return Path(jobs.__file__).parent / "entry.py"


def launch_properties(spec: JobSpec, *, this_machine: bool = True) -> dict[str, str]:
    """Our defaults (see jobs/localfs.py for the file I/O ones: on YARN, the driver sets those), then the
    manifest's sparkProperties that hold no placeholder: what goes on the command line. Those with one are
    resolved in the driver."""
    plain, _ = split_properties(spec.manifest.spark_properties)
    files = localfs.properties(spec.checkpoint) if this_machine else {}
    return {**DEFAULT_PROPERTIES, **files, **plain}


def command(
    spec: JobSpec,
    spec_uri: str,
    *,
    master: str,
    env: Mapping[str, str],
    app_name: str | None = None,
    options: list[str] | None = None,
    spark_submit: str | None = None,
    this_machine: bool = True,
) -> list[str]:
    """The full argument list of a job: spark-submit, its options, the entry point and where its spec is."""
    return application_command(
        entry_point(),
        ["--spec-uri", spec_uri],
        master=master,
        env=env,
        app_name=app_name or f"sql-runner:{spec.manifest.name}:v{spec.manifest.version}",
        properties=launch_properties(spec, this_machine=this_machine),
        options=options,
        spark_submit=spark_submit,
        this_machine=this_machine,
    )


def application_command(
    entry: Path,
    entry_args: list[str],
    *,
    master: str,
    env: Mapping[str, str],
    app_name: str,
    properties: Mapping[str, str],
    options: list[str] | None = None,
    spark_submit: str | None = None,
    this_machine: bool = True,
) -> list[str]:
    """``spark-submit`` of a Python ``entry`` file: master, target options, name, properties, then the entry.

    ``this_machine``: the driver and executors run here or beside it (local, standalone), not on EMR, so
    they get this interpreter, the jar set and S3 through S3A (``runner/core/platform.py``)."""
    args = [
        spark_submit or str(spark_submit_path()),
        "--master",
        master,
        *(options or []),
        "--name",
        app_name,
        "--driver-java-options",
        java_options(this_machine=this_machine),
    ]
    for key, value in (platform.merged(properties, env) if this_machine else properties).items():
        args += ["--conf", f"{key}={value}"]
    if this_machine:
        args += [
            "--conf",
            f"spark.pyspark.python={sys.executable}",
            "--conf",
            f"spark.pyspark.driver.python={sys.executable}",
        ]
    return [*args, str(entry), *entry_args]


def environment(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment for a local job: this interpreter for Python, loopback for Spark's driver."""
    env = dict(base if base is not None else os.environ)
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    env["PYSPARK_PYTHON"] = sys.executable
    env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    return env
