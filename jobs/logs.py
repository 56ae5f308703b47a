"""How a Spark driver started by the runner logs: quietly, in one line per problem.

Used by the job's own driver (``jobs/entry.py``), by the ``spark-submit`` command that
starts it, and by the local Spark the control plane analyses queries on.
"""

from __future__ import annotations

import logging
from pathlib import Path

from runner.core import classdata

LOG_CONFIG = Path(__file__).parent / "log4j2.properties"


def java_options(*, this_machine: bool = True) -> str:
    """Driver JVM options: the project's quiet log configuration; for a driver on this machine, also the
    drivers' class-data archive, when there is one (``runner/core/classdata.py``)."""
    logging_config = f"-Dlog4j2.configurationFile={LOG_CONFIG.as_uri()}"
    shared = classdata.options() if this_machine else ""
    return f"{logging_config} {shared}".strip()


def quiet_python_logs() -> None:
    """pyspark logs every analysis error as a JSON blob; we report them ourselves, one line each."""
    for name in ("DataFrameQueryContextLogger", "SQLQueryContextLogger"):
        logging.getLogger(name).setLevel(logging.CRITICAL + 1)
