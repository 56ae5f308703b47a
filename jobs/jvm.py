"""The one place that reaches into pyspark's internals: Spark's JVM objects behind a DataFrame, a
session, a streaming query or the context, and bridges to Scala values through Py4J.

Everything else goes through these functions, so a change of pyspark's private attributes (``_jvm``,
``_jsparkSession``, ``_jdf``, ``_jsq``, ``_jsc``, the gateway) is mended here alone, and
``check_spark_version`` refuses, with one clear line, a pyspark outside the range these were checked on.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import reduce
from pathlib import Path
from typing import Any

import pyspark
from py4j.protocol import Py4JNetworkError
from pyspark import SparkContext
from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql.streaming import StreamingQuery

from runner.core.errors import UserError

# The Spark line the internals used here were checked on (pyspark's own version, major.minor).
SUPPORTED = ((4, 0),)

# JVM classes already looked up, per gateway: a lookup through ``jvm.a.b.C`` is one Py4J
# round trip per name part; a class found once is called directly afterwards.
_CLASSES: dict[tuple[Any, str], Any] = {}


def check_spark_version(version: str | None = None) -> None:
    """UserError (SPARK_VERSION_UNSUPPORTED) unless ``version`` (default: the installed pyspark's) is of a
    supported Spark line."""
    version = version or pyspark.__version__
    try:
        line = tuple(int(part) for part in version.split(".")[:2])
    except ValueError:
        line = ()
    if line not in SUPPORTED:
        supported = ", ".join(f"{major}.{minor}.x" for major, minor in SUPPORTED)
        raise UserError.of("SPARK_VERSION_UNSUPPORTED", version=version, supported=supported)


def jvm_of(spark: SparkSession) -> Any:
    """The Py4J view of the driver's JVM (``jvm.java.lang.Class`` ...)."""
    return spark.sparkContext._jvm


def gateway_key(jvm: Any) -> Any:
    """What identifies ``jvm``'s gateway for as long as it lives (a cache key per JVM)."""
    return jvm._gateway_client


def java_session(spark: SparkSession) -> Any:
    """The JVM's SparkSession behind ``spark``."""
    return spark._jsparkSession


def hadoop_configuration(spark: SparkSession) -> Any:
    return spark.sparkContext._jsc.hadoopConfiguration()


def spark_configuration(spark: SparkSession) -> Any:
    """The SparkContext's own SparkConf (what spark-submit and spark-defaults gave it)."""
    return spark.sparkContext._jsc.sc().conf()


def java_frame(frame: DataFrame) -> Any:
    """The JVM Dataset behind ``frame``."""
    return frame._jdf


def analysed_plan(frame: DataFrame) -> Any:
    """``frame``'s analysed logical plan."""
    return frame._jdf.queryExecution().analyzed()


def frame_of(java_dataset: Any, spark: SparkSession) -> DataFrame:
    """A Python DataFrame over a JVM Dataset."""
    return DataFrame(java_dataset, spark)


def java_query(query: StreamingQuery) -> Any:
    """The JVM's running StreamingQuery (its execution) behind ``query``."""
    return query._jsq.streamingQuery()


def end_local_gateway() -> None:
    """End the JVM pyspark launched for this process (after its session stopped); it exits when its stdin
    closes. pyspark otherwise keeps it until the process exits."""
    gateway = SparkContext._gateway
    if gateway is None:
        return
    process = getattr(gateway, "proc", None)
    gateway.shutdown()
    if process is not None:
        process.stdin.close()
        process.wait(timeout=30)
    SparkContext._gateway = None
    SparkContext._jvm = None


def jvm_gone(error: BaseException) -> bool:
    """Whether ``error`` says the driver's JVM is gone: Py4J can no longer reach it (the JVM was killed, ran out
    of memory, or its container was lost). Nothing can be restarted from this Python process then."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, Py4JNetworkError | ConnectionRefusedError | ConnectionResetError | BrokenPipeError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def java_class(jvm: Any, name: str) -> Any:
    """The JVM class (or Scala object) ``name``, e.g. ``org.apache.hadoop.fs.Path``, through ``jvm``."""
    key = (gateway_key(jvm), name)  # the client, not id(jvm): a cached key keeps its gateway's identity
    found = _CLASSES.get(key)
    if found is None:
        found = _CLASSES[key] = reduce(getattr, name.split("."), jvm)
    return found


def scala_list(values: Any) -> list[Any]:
    """A Scala collection as a Python list."""
    iterator = values.iterator()
    items = []
    while iterator.hasNext():
        items.append(iterator.next())
    return items


def java_array(spark: SparkSession, element: str, values: list[Any]) -> Any:
    """A Java array of ``element`` (``int``, or a class's name) holding ``values``."""
    jvm = jvm_of(spark)
    kind = jvm.java.lang.Integer.TYPE if element == "int" else jvm.java.lang.Class.forName(element)
    made = jvm.java.lang.reflect.Array.newInstance(kind, len(values))
    for i, value in enumerate(values):
        made[i] = value
    return made


def java_type(spark: SparkSession, kind: Any) -> Any:
    """The JVM's ``DataType`` of a Python one (``pyspark.sql.types``)."""
    return java_class(jvm_of(spark), "org.apache.spark.sql.types.DataType").fromJson(kind.json())


def scala_none(jvm: Any) -> Any:
    """Scala's ``None``."""
    return getattr(java_class(jvm, "scala.None$"), "MODULE$")


def expression_classes(frame: DataFrame) -> set[str]:
    """The class names of every expression in ``frame``'s analysed plan, subqueries included."""
    jvm = jvm_of(frame.sparkSession)
    subquery = java_class(jvm, "java.lang.Class").forName(
        "org.apache.spark.sql.catalyst.expressions.SubqueryExpression"
    )
    names: set[str] = set()

    def visit_plan(node: Any) -> None:
        for child in scala_list(node.children()) + scala_list(node.innerChildren()):
            visit_plan(child)
        for expression in scala_list(node.expressions()):
            visit_expression(expression)

    def visit_expression(expression: Any) -> None:
        names.add(expression.getClass().getSimpleName())
        if subquery.isInstance(expression):
            visit_plan(expression.plan())
        for child in scala_list(expression.children()):
            visit_expression(child)

    visit_plan(analysed_plan(frame))
    return names


def observed(observation: Observation, fallback: Callable[[], dict[str, Any]], timeout: float = 10.0) -> dict[str, Any]:
    """The metrics ``observation`` collected in the action just run, or ``fallback()`` when Spark did not
    report them within ``timeout`` seconds (an action whose inner plan reports none, such as the Kafka
    writer's): never waits for ever, as ``Observation.get`` would."""
    java = getattr(observation, "_jo", None)
    deadline = time.monotonic() + timeout
    while java is not None:
        found = java.getOrEmpty()  # waits up to 100 ms
        if found.size() > 0:
            return {key: found.apply(key) for key in scala_list(found.keys())}
        if time.monotonic() > deadline:
            break
    return fallback()


# Classes compiled in a driver's JVM by Janino, per gateway and class name: the class, or the error that
# stopped its compilation (it is not tried again in that JVM).
_COMPILED: dict[tuple[Any, str], Any] = {}


JAVA = Path(__file__).parent / "java"  # the Java the runner compiles in a driver: one public class a file


def java_source(name: str) -> str:
    """The Java source of class ``name`` (``jobs/java/<name>.java``)."""
    return (JAVA / f"{name}.java").read_text(encoding="utf-8")


def compiled_class(spark: SparkSession, name: str) -> Any:
    """The class ``name`` of ``jobs/java/<name>.java``, compiled once per JVM by Janino (the compiler Spark
    uses for its generated code, so no jar is needed); raises the compilation's error, then and on later
    calls. tests/test_java_sources.py compiles every file with javac against Spark's jars."""
    jvm = jvm_of(spark)
    key = (gateway_key(jvm), name)
    if key not in _COMPILED:
        try:
            source = java_source(name)
            compiler = java_class(jvm, "org.codehaus.janino.SimpleCompiler")()
            compiler.setParentClassLoader(java_class(jvm, "org.apache.spark.util.Utils").getContextOrSparkClassLoader())
            compiler.setTargetVersion(8)  # Scala's collection interfaces have static methods
            compiler.cook(f"{name}.java", source)
            _COMPILED[key] = compiler.getClassLoader().loadClass(name)
        except Exception as error:  # noqa: BLE001 - kept, and raised to every caller
            _COMPILED[key] = error
    found = _COMPILED[key]
    if isinstance(found, Exception):
        raise found
    return found


def optimizer_rule(spark: SparkSession, name: str) -> Any | None:
    """The instance of rule class ``name`` among ``spark``'s extra optimizer rules, if it has one."""
    rules = java_session(spark).experimental().extraOptimizations()
    return next((rule for rule in scala_list(rules) if rule.getClass().getName() == name), None)


def add_optimizer_rule(spark: SparkSession, rule: Any) -> None:
    """Append ``rule`` to ``spark``'s extra optimizer rules (run after Spark's own, on every plan it optimises,
    each micro-batch's included)."""
    experimental = java_session(spark).experimental()
    getattr(experimental, "extraOptimizations_$eq")(experimental.extraOptimizations().appended(rule))  # Scala's setter
