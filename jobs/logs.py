"""How a Spark driver started by the runner logs: quietly, in one line per problem.

Used by the job's own driver (``jobs/entry.py``), by the ``spark-submit`` command that
starts it, and by the local Spark the control plane analyses queries on.
"""

from __future__ import annotations

import logging
from pathlib import Path

LOG_CONFIG = Path(__file__).parent / "log4j2.properties"


def java_options() -> str:
    """Driver JVM options: the project's quiet log configuration."""
    return f"-Dlog4j2.configurationFile={LOG_CONFIG.as_uri()}"


def quiet_python_logs() -> None:
    """pyspark logs every analysis error as a JSON blob; we report them ourselves, one line each."""
    for name in ("DataFrameQueryContextLogger", "SQLQueryContextLogger"):
        logging.getLogger(name).setLevel(logging.CRITICAL + 1)
