"""The micro-batch's timestamp, held where Spark's generated code does not change from batch to batch.

In a streaming query Spark replaces ``current_timestamp()`` (and ``current_date()``,
``localtimestamp()``) by the micro-batch's timestamp, and its generated code writes that
value into the Java source as a constant. Every micro-batch's code is therefore new: Spark
compiles it again (tens of milliseconds on the driver) and the JVM's JIT compilers start
over on it, which on a busy executor takes CPU from the tasks. Every job has such a
column (``__create_timestamp``, ``jobs/metadata.py``), so every job paid this once per
micro-batch and per stage that computes it.

``install`` adds one rule to a session's optimizer (Spark's ``experimental`` rules, run
after its own): the batch's timestamp becomes the only element of an array literal,
read by position. Spark's code for an array literal refers to the value instead of
writing it out, so a micro-batch's code is the same as the one before, compiled once and
kept compiled. The value is the same, and so is every row's: the rule changes where the
code finds the value, not what it is.

The rule is a small Java class (``jobs/java/SqlRunnerStableBatchTimestamp.java``) compiled in
the driver's JVM by Janino (the compiler Spark itself uses for its generated code), so it
needs no jar on any machine; it runs on the driver only, and the plans it leaves use Spark's
own expressions. If it cannot be compiled or added (a Spark whose API differs), the job says
so once and runs as before.
"""

from __future__ import annotations

import logging
from typing import Any

from pyspark.sql import SparkSession

from jobs.control import failure_reason
from jobs.jvm import add_optimizer_rule, compiled_class, gateway_key, jvm_of, optimizer_rule
from runner.core import logs

RULE_CLASS = "SqlRunnerStableBatchTimestamp"


WITHOUT = "micro-batch code is compiled anew each batch: the batch-timestamp rule"

log = logging.getLogger(__name__)
_WARNED: set[Any] = set()  # per JVM: the rule could not be had there, and a job said so


def install(spark: SparkSession, name: str, version: int) -> bool:
    """Add the rule to ``spark``'s optimizer, unless it is there already; False (logged for job ``name``,
    once per JVM) if it cannot be."""
    if optimizer_rule(spark, RULE_CLASS) is not None:
        return True
    try:
        rule_class = compiled_class(spark, RULE_CLASS)
    except Exception as error:  # noqa: BLE001 - the job runs without it
        return _without(spark, f"failed to compile ({failure_reason(str(error))})", name, version)
    try:
        add_optimizer_rule(spark, rule_class.newInstance())
    except Exception as error:  # noqa: BLE001 - the job runs without it
        return _without(spark, f"was not added ({failure_reason(str(error))})", name, version)
    return True


def _without(spark: SparkSession, why: str, name: str, version: int) -> bool:
    key = gateway_key(jvm_of(spark))
    if key not in _WARNED:
        _WARNED.add(key)
        log.warning(f"{WITHOUT} {why}", extra=logs.job(name, version))
    return False
