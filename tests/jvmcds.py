"""How the suite's Spark JVMs start in half the CPU: compiled by C1 only, one GC thread, and their classes
mapped from a class-data archive (CDS) instead of read, parsed and verified again by every JVM.

The suite starts a Spark driver well over a hundred times (each job, session, analysis and the test
processes' own), on two cores shared by two test processes. A driver with the JVM's defaults spends
about 25 CPU seconds getting to its first query; these options bring that to about 9, with the same
classes and the same results: they change how the JVM compiles and loads code, nothing it runs.

The archive holds the classes a driver with the jar set on its classpath loads (Java 17's dynamic
archive, dumped when a small batch and streaming job exits). It is built once per machine, in the jar
cache, under a name derived from everything it depends on (the JVM, pyspark's jars, the jar set), and
only used by a JVM with the same classpath; any other JVM (a test that removes a jar, a standalone
cluster's daemons) silently runs without it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from runner.core import jars, platform
from runner.deploy import submit

JIT = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"  # a JVM whose classpath differs says so on stdout otherwise

WARM_UP = """
import sys
from pyspark.sql import SparkSession, functions as F
folder = sys.argv[1]
spark = SparkSession.builder.master("local[2]").config("spark.sql.shuffle.partitions", "2").getOrCreate()
spark.range(1000).selectExpr("id % 7 AS k", "id").groupBy("k").agg(F.sum("id")).collect()
spark.createDataFrame([("a", 1.0, "2026-01-01 00:00:00")], "id STRING, amount DOUBLE, ts STRING") \\
    .write.mode("overwrite").json(folder + "/in")
stream = spark.readStream.schema("id STRING, amount DOUBLE, ts TIMESTAMP").json(folder + "/in") \\
    .withWatermark("ts", "5 seconds").groupBy(F.window("ts", "1 minute"), "id").count()
stream.writeStream.outputMode("update").option("checkpointLocation", folder + "/checkpoint") \\
    .foreachBatch(lambda batch, _id: batch.collect()).trigger(availableNow=True).start().awaitTermination()
spark.stop()
"""


def _key(classpath: str) -> str:
    """What the archive depends on: the JVM, pyspark's jars and the jar set on the classpath."""
    digest = hashlib.sha256()
    java = shutil.which("java") or ""
    parts = [os.path.realpath(java), os.environ.get("JAVA_HOME", ""), classpath, JIT]
    import pyspark

    spark_jars = Path(pyspark.__file__).parent / "jars"
    for entry in [*sorted(spark_jars.glob("*.jar")), *(Path(p) for p in classpath.split(os.pathsep) if p)]:
        stat = entry.stat() if entry.exists() else None
        parts.append(f"{entry}:{stat.st_size if stat else '-'}:{int(stat.st_mtime) if stat else '-'}")
    digest.update("\n".join(parts).encode())
    return digest.hexdigest()[:16]


def spark_options() -> str:
    """``SPARK_SUBMIT_OPTS`` for the suite: the JIT options, and the class-data archive (built if missing)."""
    classpath = jars.classpath(jars.SPARK)
    folder = jars.cache_root() / "cds"
    archive = folder / f"spark-{_key(classpath)}.jsa"
    if not archive.exists():
        began = time.monotonic()
        print(f"building a class-data archive for the suite's Spark JVMs (once per machine): {archive}", flush=True)
        folder.mkdir(parents=True, exist_ok=True)
        for stale in folder.glob("spark-*.jsa"):
            stale.unlink(missing_ok=True)
        dumped = folder / f".{archive.name}.{os.getpid()}"  # beside it: replaced into place in one step
        with tempfile.TemporaryDirectory(prefix="sql-runner-cds-") as work:
            script = Path(work) / "warm_up.py"
            script.write_text(WARM_UP)
            dumping = f"{JIT} -XX:ArchiveClassesAtExit={dumped} {QUIET}"
            conf = [f"--conf={key}={value}" for key, value in platform.properties(os.environ).items()]
            result = subprocess.run(
                [str(submit.spark_submit_path()), *conf, str(script), str(Path(work) / "data")],
                env={**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_SUBMIT_OPTS": dumping},
                capture_output=True,
                text=True,
                timeout=600,
                check=False,
            )
            if result.returncode != 0 or not dumped.exists():
                dumped.unlink(missing_ok=True)
                tail = (result.stderr or result.stdout).strip().splitlines()[-3:]
                print(f"no class-data archive (the JVMs load their classes themselves): {tail}", flush=True)
                return JIT
            os.replace(dumped, archive)  # whole or not at all, should two runs build it at once
        print(f"class-data archive built in {time.monotonic() - began:.0f}s", flush=True)
    return f"{JIT} -XX:SharedArchiveFile={archive} {QUIET}"
