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

The rule is a small Java class compiled in the driver's JVM by Janino (the compiler Spark
itself uses for its generated code), so it needs no jar on any machine; it runs on the
driver only, and the plans it leaves use Spark's own expressions. If it cannot be
compiled or added (a Spark whose API differs), the job says so once and runs as before.
"""

from __future__ import annotations

import logging
from typing import Any

from pyspark.sql import SparkSession

from jobs.control import failure_reason
from jobs.jvm import gateway_key, java_class, java_session, jvm_of, scala_list
from runner.core import logs

RULE_CLASS = "SqlRunnerStableBatchTimestamp"
RULE_SOURCE = """
import org.apache.spark.sql.catalyst.expressions.CurrentBatchTimestamp;
import org.apache.spark.sql.catalyst.expressions.GetArrayItem;
import org.apache.spark.sql.catalyst.expressions.KnownNotNull;
import org.apache.spark.sql.catalyst.expressions.Literal;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.trees.TreeNode;
import org.apache.spark.sql.catalyst.util.GenericArrayData;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.DataTypes;

public class SqlRunnerStableBatchTimestamp extends org.apache.spark.sql.catalyst.rules.Rule {
    public TreeNode apply(TreeNode plan) {
        return ((LogicalPlan) plan).transformAllExpressions(new SqlRunnerBatchTimestampHeld());
    }

    public String ruleName() {
        return "SqlRunnerStableBatchTimestamp";
    }
}

class SqlRunnerBatchTimestampHeld extends scala.runtime.AbstractPartialFunction {
    public boolean isDefinedAt(Object expression) {
        return expression instanceof CurrentBatchTimestamp;
    }

    public Object applyOrElse(Object expression, scala.Function1 otherwise) {
        if (!(expression instanceof CurrentBatchTimestamp)) {
            return otherwise.apply(expression);
        }
        Literal value = ((CurrentBatchTimestamp) expression).toLiteral();
        Literal held = new Literal(
            new GenericArrayData(new Object[] { value.value() }), new ArrayType(value.dataType(), false));
        return new KnownNotNull(new GetArrayItem(held, new Literal(Integer.valueOf(0), DataTypes.IntegerType), false));
    }
}
"""

_COMPILED: dict[Any, Any] = {}  # per Py4J gateway: the compiled rule class, or the error that stopped it
WITHOUT = "micro-batch code is compiled anew each batch: the batch-timestamp rule"

log = logging.getLogger(__name__)


def install(spark: SparkSession, name: str, version: int) -> bool:
    """Add the rule to ``spark``'s optimizer, unless it is there already; False (logged for job ``name``,
    once per JVM) if it cannot be."""
    jvm = jvm_of(spark)
    key = gateway_key(jvm)
    if key not in _COMPILED:
        try:
            _COMPILED[key] = _compile(jvm)
        except Exception as error:  # noqa: BLE001 - the job runs without it
            _COMPILED[key] = error
            log.warning(f"{WITHOUT} failed to compile ({failure_reason(str(error))})", extra=logs.job(name, version))
    rule_class = _COMPILED[key]
    if isinstance(rule_class, Exception):
        return False
    experimental = java_session(spark).experimental()
    rules = experimental.extraOptimizations()
    if any(rule.getClass().getName() == RULE_CLASS for rule in scala_list(rules)):
        return True
    try:
        getattr(experimental, "extraOptimizations_$eq")(rules.appended(rule_class.newInstance()))  # Scala's setter
    except Exception as error:  # noqa: BLE001 - the job runs without it
        _COMPILED[key] = error
        log.warning(f"{WITHOUT} was not added ({failure_reason(str(error))})", extra=logs.job(name, version))
        return False
    return True


def _compile(jvm: Any) -> Any:
    compiler = java_class(jvm, "org.codehaus.janino.SimpleCompiler")()
    compiler.setParentClassLoader(java_class(jvm, "org.apache.spark.util.Utils").getContextOrSparkClassLoader())
    compiler.cook(RULE_SOURCE)
    return compiler.getClassLoader().loadClass(RULE_CLASS)
