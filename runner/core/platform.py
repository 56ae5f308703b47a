"""What a Spark application the runner starts on this machine needs from the machine, where EMR is not there
to provide it.

On the team's EMR cluster, ``spark-defaults`` put the jar set on every classpath and ``s3://`` paths go
through EMRFS. Everywhere else (local and standalone targets, the session, the runner's own analysing
Spark, the tests) the runner gives each application:

- the ``spark`` jar set from the local cache (``runner/core/jars.py``) on the driver's and executors'
  classpath (before pyspark's own jars; the set holds nothing pyspark ships);
- ``s3://`` through Hadoop's S3A (hadoop-aws, in the set), pointed at the endpoint boto3 would use
  (``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL``: a local S3 such as moto's server, with path-style
  addressing) and the region. Credentials come from S3A's own chain (the environment, the instance),
  never from the command line.

A manifest's own setting of the same property wins, except that classpaths are joined (ours first).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping
from pathlib import Path

from runner.core import jars

CLASSPATHS = ("spark.driver.extraClassPath", "spark.executor.extraClassPath")
S3A_FILE_SYSTEM = "org.apache.hadoop.fs.s3a.S3AFileSystem"
S3_SCHEME = {
    "spark.hadoop.fs.s3.impl": S3A_FILE_SYSTEM,
    "spark.hadoop.fs.AbstractFileSystem.s3.impl": "org.apache.hadoop.fs.s3a.S3A",
}


def spark_submit_path() -> Path:
    """The spark-submit shipped with the installed pyspark (found without importing pyspark)."""
    spec = importlib.util.find_spec("pyspark")
    assert spec is not None and spec.submodule_search_locations, "pyspark is a dependency of the runner"
    return Path(spec.submodule_search_locations[0]) / "bin" / "spark-submit"


def endpoint(env: Mapping[str, str]) -> str | None:
    """The S3 endpoint boto3 would use, if one is set (otherwise AWS's own)."""
    return env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or None


def s3a_properties(env: Mapping[str, str]) -> dict[str, str]:
    """``s3://`` (and ``s3a://``) through S3A, at boto3's endpoint and region."""
    found = dict(S3_SCHEME)
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
    url = endpoint(env)
    if url:
        found["spark.hadoop.fs.s3a.endpoint"] = url
        found["spark.hadoop.fs.s3a.path.style.access"] = "true"
        found["spark.hadoop.fs.s3a.connection.ssl.enabled"] = str(url.startswith("https://")).lower()
        region = region or "us-east-1"
    if region:
        found["spark.hadoop.fs.s3a.endpoint.region"] = region
    return found


def properties(env: Mapping[str, str]) -> dict[str, str]:
    """Spark properties for an application on this machine: the jar set's classpath and S3 through S3A."""
    found = s3a_properties(env)
    classpath = jars.classpath(jars.SPARK)
    if classpath:
        found.update(dict.fromkeys(CLASSPATHS, classpath))
    return found


def merged(own: Mapping[str, str], env: Mapping[str, str]) -> dict[str, str]:
    """``own`` properties (a manifest's, the session's) over :func:`properties`; classpaths are joined."""
    base = properties(env)
    result = {**base, **own}
    for key in CLASSPATHS:
        if own.get(key) and key in base:
            result[key] = f"{base[key]}{os.pathsep}{own[key]}"
    return result
