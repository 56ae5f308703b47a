"""The in-process local Spark session used by ``validate`` and ``preview``."""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

from jobs import localfs
from jobs.jvm import check_spark_version, end_local_gateway
from jobs.logs import java_options, quiet_python_logs
from runner.core import platform

# This JVM analyses queries and previews a few rows, then exits: compiling with C1 only and the
# serial collector start it 1-1.5 s sooner (3.6-3.9 s against 4.7-5.5 s on a 2-core machine) and
# run its first work faster too; a long-running job's JVM keeps the defaults.
SHORT_LIVED_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def local_session(app: str = "sql-runner") -> SparkSession:
    """A small local session (2 cores, 2 shuffle partitions, no UI); reused if one exists. UserError when the
    installed pyspark is not of a supported Spark line."""
    check_spark_version()
    quiet_python_logs()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder
    # previews checkpoint to a local temporary folder; the jar set and S3A as every application here has them
    for key, value in {**platform.properties(os.environ), **localfs.properties("")}.items():
        builder = builder.config(key, value)
    session = (
        builder.master("local[2]")
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.log.level", "ERROR")
        .config("spark.driver.extraJavaOptions", f"{java_options()} {SHORT_LIVED_JVM}")
        .getOrCreate()
    )
    return session


def close_local_session(session: SparkSession) -> None:
    """Stop ``session`` and end its JVM now. pyspark keeps the gateway JVM it launched until this Python
    process exits; a command that has finished analysing (``deploy``, ``run`` while its job runs) gives the
    memory back instead. The JVM exits when its stdin closes."""
    session.stop()
    end_local_gateway()
