"""A class-data archive for the Spark drivers the runner starts on this machine.

A Spark driver reads, parses and verifies some ten thousand classes (Spark's, Hadoop's, the jar set's)
before its first query runs: measured over a ``run --once`` of 2 M events here, 7 to 9 of its 30 s.
Java's class-data sharing maps them from an archive instead. The runner builds one archive per machine,
in the jar cache (``make jars``, or ``python -m infra.jars fetch``), from a small batch and streaming job
that loads what a job loads (SQL analysis, JSON and parquet files, a windowed aggregation with state, a
``foreachBatch`` sink), dumped when it exits (Java 17's dynamic archive). Every driver the runner starts
here (local and standalone jobs, run in the foreground, the session, its own analysing Spark) maps it.

The archive's name is derived from everything it depends on (the JVM, pyspark's jars and the jar set on
the classpath), so a new pyspark or jar set gets a new one; a JVM whose classpath differs (a manifest
that adds to ``spark.driver.extraClassPath``) silently loads its classes itself, as does any JVM when
the archive is missing. Drivers elsewhere (YARN containers, on EMR) are not given it. It changes how
classes are loaded, never which: the same classes, the same results.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from runner.core import jars, platform

QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"  # a JVM whose classpath differs says so on stdout otherwise
BUILD_TIMEOUT = 900

WARM_UP = """
import sys
from pyspark.sql import SparkSession, functions as F
folder = sys.argv[1]
spark = SparkSession.builder.master("local[2]").config("spark.sql.shuffle.partitions", "2").getOrCreate()
spark.range(1000).selectExpr("id % 7 AS k", "id").groupBy("k").agg(F.sum("id")).collect()
rows = spark.createDataFrame([("a", 1.0, "2026-01-01 00:00:00")], "id STRING, amount DOUBLE, ts STRING")
rows.write.mode("overwrite").json(folder + "/in")
schema = "id STRING, amount DOUBLE, ts TIMESTAMP, _corrupt_record STRING"
source = (spark.readStream.schema(schema).option("mode", "PERMISSIVE")
          .option("columnNameOfCorruptRecord", "_corrupt_record").json(folder + "/in"))
plain = source.where("_corrupt_record IS NULL AND amount > 0").drop("_corrupt_record")
plain = plain.withColumn("__create_timestamp", F.current_timestamp()).withColumn("__query_version", F.lit(1))
(plain.writeStream.format("parquet").option("path", folder + "/out").option("checkpointLocation", folder + "/c1")
      .trigger(availableNow=True).start().awaitTermination())
(plain.writeStream.format("json").option("path", folder + "/json").option("checkpointLocation", folder + "/c2")
      .trigger(availableNow=True).start().awaitTermination())
windowed = plain.withWatermark("ts", "5 seconds").groupBy(F.window("ts", "1 minute"), "id").count()
(windowed.writeStream.outputMode("update").option("checkpointLocation", folder + "/c3")
         .foreachBatch(lambda batch, _id: batch.collect()).trigger(availableNow=True).start().awaitTermination())
spark.read.parquet(folder + "/out").count()
spark.stop()
"""


def _key(classpath: str) -> str:
    """What the archive depends on: the JVM, pyspark's jars and the jar set on the classpath."""
    digest = hashlib.sha256()
    java = shutil.which("java") or ""
    parts = [os.path.realpath(java), os.environ.get("JAVA_HOME", ""), classpath]
    pyspark_jars = platform.spark_submit_path().parent.parent / "jars"
    for entry in [*sorted(pyspark_jars.glob("*.jar")), *(Path(p) for p in classpath.split(os.pathsep) if p)]:
        stat = entry.stat() if entry.exists() else None
        parts.append(f"{entry}:{stat.st_size if stat else '-'}:{int(stat.st_mtime) if stat else '-'}")
    digest.update("\n".join(parts).encode())
    return digest.hexdigest()[:16]


def archive() -> Path:
    """Where this machine's archive for the current JVM, pyspark and jar set is (or would be)."""
    return jars.cache_root() / "cds" / f"driver-{_key(jars.classpath(jars.SPARK))}.jsa"


def options() -> str:
    """JVM options that map the archive, or '' when there is none for this machine's current classpath."""
    found = archive()
    return f"-XX:SharedArchiveFile={found} {QUIET}" if found.is_file() else ""


def build(*, say=print) -> Path | None:
    """Build the archive if it is missing (about a minute, once per machine and jar set); its path, or None
    (said why) when it could not be built: drivers then load their classes themselves, as without it."""
    target = archive()
    if target.is_file():
        return target
    say(f"building the drivers' class-data archive (once per machine and jar set): {target}")
    target.parent.mkdir(parents=True, exist_ok=True)
    for stale in target.parent.glob("driver-*.jsa"):
        stale.unlink(missing_ok=True)
    dumped = target.parent / f".{target.name}.{os.getpid()}"  # beside it: replaced into place in one step
    with tempfile.TemporaryDirectory(prefix="sql-runner-classdata-") as work:
        script = Path(work) / "warm_up.py"
        script.write_text(WARM_UP)
        conf = [f"--conf={key}={value}" for key, value in platform.properties(os.environ).items()]
        result = subprocess.run(
            [str(platform.spark_submit_path()), *conf, str(script), str(Path(work) / "data")],
            env={
                **os.environ,
                "SPARK_LOCAL_IP": "127.0.0.1",
                "PYSPARK_PYTHON": sys.executable,
                "SPARK_SUBMIT_OPTS": f"-XX:ArchiveClassesAtExit={dumped} {QUIET}",
            },
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT,
            check=False,
        )
    if result.returncode != 0 or not dumped.is_file():
        dumped.unlink(missing_ok=True)
        tail = " | ".join((result.stderr or result.stdout).strip().splitlines()[-3:])
        say(f"no class-data archive (drivers load their classes themselves): {tail}")
        return None
    os.replace(dumped, target)  # whole or not at all, should two builds run at once
    return target
