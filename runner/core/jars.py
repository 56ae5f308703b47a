"""The JVM libraries the runner's applications need beyond pyspark, declared once.

Three sets, each a list of Maven coordinates the project asks for (``REQUIREMENTS``) and the
exact jars they resolve to, with their SHA-256 (``jars.lock.json`` beside this file,
written by ``python -m infra.jars lock``, never by hand):

- ``spark``: what a query may need at run time. Every local Spark application the runner
  starts (jobs, the session, ``validate``/``plan``/``preview``) has the set's jars on its
  classpath, and ``make package`` puts them (less what EMR has itself) in ``dist/jars/``
  for the team's cluster. Whatever pyspark ships already (Scala, Netty, Jackson, the
  shaded Hadoop client, compression codecs) is left out, so a job runs pyspark's own copy.
- ``kafka-broker``: Apache Kafka's server and tools, for the local broker of the tests,
  the demo and the benchmarks (``demo/kafka_broker.py``), in a JVM of its own.
- ``yarn-cluster``: Hadoop's single-process YARN cluster, a real ResourceManager and
  NodeManager for the YARN target's tests and ``make yarn`` (``demo/yarn_cluster.py``).

Beside the sets, ``make`` builds the runner's own jar, ``engine``: the incremental operators of changelog
queries (``jobs/java/engine/``), compiled with javac against the installed pyspark's jars and kept under
a name derived from its sources and that pyspark (:func:`engine_jar`). It goes on the same classpaths as
the ``spark`` set.

``make`` fetches the sets with ``mvn`` into a cache it owns (``infra/jars.py``): by default
``share/sql-runner/jars/<set>/`` under the virtual environment, or ``$SQL_RUNNER_JARS/<set>/``.

Spark modules match the Spark line inside the pinned pyspark (4.0, Scala 2.13), Hadoop's
the Hadoop client it ships (3.4.1). Spark 4.0.5's own builds of the Kafka connector,
its token provider and spark-avro are not on the Maven Central these machines reach:
each is the newest 4.0 build there (a patch release keeps the 4.0 line's interfaces; the
end-to-end tests run them on pyspark 4.0.5).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

LOCK = Path(__file__).with_name("jars.lock.json")
CACHE_ENV = "SQL_RUNNER_JARS"
SPARK = "spark"
BROKER = "kafka-broker"
YARN = "yarn-cluster"
FETCH_COMMAND = "make jars"
ENGINE = "engine"
ENGINE_SOURCES = Path(__file__).resolve().parents[2] / "jobs" / "java" / "engine"  # beside runner/, installed too


@dataclass(frozen=True)
class Requirement:
    """One top-level Maven coordinate of a set, what it is for, and what of its dependencies to leave out."""

    coordinate: str  # group:artifact:version, or group:artifact:version:classifier (a test-jar: ``tests``)
    feature: str  # what a query or tool gets from it (Feature.name)
    exclude: tuple[str, ...] = ()  # group:artifact of dependencies not to take


@dataclass(frozen=True)
class Feature:
    """What a set of jars makes possible, and a class that is on the classpath exactly when it is."""

    name: str
    what: str
    marker_class: str


FEATURES = {
    f.name: f
    for f in (
        Feature("kafka", "Spark's Kafka connector", "org.apache.spark.sql.kafka010.KafkaSourceProvider"),
        Feature("avro", "Spark's Avro format (spark-avro)", "org.apache.spark.sql.avro.functions"),
        Feature("s3", "S3 for Spark outside EMR (hadoop-aws, S3A)", "org.apache.hadoop.fs.s3a.S3AFileSystem"),
        Feature(
            "msk-iam", "MSK's IAM authentication (aws-msk-iam-auth)", "software.amazon.msk.auth.iam.IAMLoginModule"
        ),
        Feature("broker", "Apache Kafka's broker and tools", "kafka.Kafka"),
        Feature(
            "yarn",
            "Hadoop's single-process YARN cluster (MiniYARNCluster)",
            "org.apache.hadoop.yarn.server.MiniYARNCluster",
        ),
    )
}

REQUIREMENTS: dict[str, tuple[Requirement, ...]] = {
    SPARK: (
        # The connector's own token provider dependency (4.0.4) is not served; 4.0.0 is the 4.0 line's.
        Requirement(
            "org.apache.spark:spark-sql-kafka-0-10_2.13:4.0.4",
            "kafka",
            exclude=("org.apache.spark:spark-token-provider-kafka-0-10_2.13",),
        ),
        Requirement("org.apache.spark:spark-token-provider-kafka-0-10_2.13:4.0.0", "kafka"),
        Requirement("org.apache.spark:spark-avro_2.13:4.0.2", "avro"),
        # hadoop-aws asks for the AWS SDK's whole bundle (about 500 MB); S3A needs only these modules of it.
        Requirement("org.apache.hadoop:hadoop-aws:3.4.1", "s3", exclude=("software.amazon.awssdk:bundle",)),
        Requirement("software.amazon.awssdk:s3:2.25.53", "s3"),
        Requirement("software.amazon.awssdk:s3-transfer-manager:2.25.53", "s3"),
        Requirement("software.amazon.awssdk:sts:2.25.53", "s3"),
        Requirement("software.amazon.msk:aws-msk-iam-auth:2.3.5", "msk-iam"),
    ),
    BROKER: (
        Requirement("org.apache.kafka:kafka_2.13:3.9.1", "broker"),
        # kafka-tools for kafka-producer-perf-test (the broker's ceiling in bench/); not Kafka Connect's runtime.
        Requirement("org.apache.kafka:kafka-tools:3.9.1", "broker", exclude=("org.apache.kafka:connect-runtime",)),
    ),
    YARN: (
        # Hadoop's own test cluster (MiniYARNCluster, in hadoop-yarn-server-tests' test-jar): a real ResourceManager
        # and NodeManager in one JVM, of the Hadoop the pinned pyspark's YARN client speaks (3.4.1). Not the shaded
        # hadoop-client-minicluster: its REST API's classes and the Jersey it is shaded with disagree on JAXB's
        # annotations, so it answers no XML and JSON of another shape than YARN's.
        Requirement("org.apache.hadoop:hadoop-yarn-server-tests:3.4.1", "yarn"),
        Requirement("org.apache.hadoop:hadoop-yarn-server-tests:3.4.1:tests", "yarn"),
        Requirement("org.apache.hadoop:hadoop-common:3.4.1:tests", "yarn"),
        Requirement("junit:junit:4.13.2", "yarn"),  # the mini cluster's own checks are JUnit assertions
    ),
}
# One AWS SDK version for hadoop-aws and aws-msk-iam-auth: the one Spark 4.0 itself builds against.
MANAGED: dict[str, tuple[str, ...]] = {SPARK: ("software.amazon.awssdk:bom:2.25.53",), BROKER: (), YARN: ()}
# Dependencies pyspark provides under another name: jcl-over-slf4j is commons-logging's API.
PROVIDED_ELSEWHERE = ("commons-logging:commons-logging",)


@dataclass(frozen=True)
class Jar:
    """One locked jar of a set."""

    coordinate: str  # group:artifact:version[:classifier]
    sha256: str
    features: tuple[str, ...]
    size: int  # bytes

    @property
    def group(self) -> str:
        return self.coordinate.split(":")[0]

    @property
    def artifact(self) -> str:
        return self.coordinate.split(":")[1]

    @property
    def version(self) -> str:
        return self.coordinate.split(":")[2]

    @property
    def classifier(self) -> str | None:
        parts = self.coordinate.split(":")
        return parts[3] if len(parts) > 3 else None

    @property
    def file(self) -> str:
        return f"{self.artifact}-{self.version}" + (f"-{self.classifier}" if self.classifier else "") + ".jar"

    @staticmethod
    def from_dict(data: dict) -> Jar:
        return Jar(data["coordinate"], data["sha256"], tuple(data["features"]), int(data["size"]))


@functools.cache
def locked(set_name: str = SPARK) -> tuple[Jar, ...]:
    """The jars of ``set_name`` as locked."""
    data = json.loads(LOCK.read_text(encoding="utf-8"))
    return tuple(Jar.from_dict(entry) for entry in data["sets"][set_name])


def cache_root() -> Path:
    """Where ``make jars`` puts the sets: ``$SQL_RUNNER_JARS``, else ``share/sql-runner/jars`` under this
    Python's environment (the project's ``.venv``)."""
    configured = os.environ.get(CACHE_ENV)
    return Path(configured) if configured else Path(sys.prefix) / "share" / "sql-runner" / "jars"


def cache_dir(set_name: str = SPARK) -> Path:
    return cache_root() / set_name


def present(set_name: str = SPARK) -> list[Path]:
    """The set's locked jars found in the cache, in lock order (what goes on a classpath)."""
    folder = cache_dir(set_name)
    return [folder / jar.file for jar in locked(set_name) if (folder / jar.file).is_file()]


def missing(set_name: str = SPARK, feature: str | None = None) -> list[str]:
    """File names of the set's jars (of ``feature``, if given) that the cache lacks."""
    folder = cache_dir(set_name)
    return [
        jar.file
        for jar in locked(set_name)
        if (feature is None or feature in jar.features) and not (folder / jar.file).is_file()
    ]


def files(feature: str, set_name: str = SPARK) -> list[str]:
    """File names of the jars ``feature`` needs."""
    return [jar.file for jar in locked(set_name) if feature in jar.features]


def summary(feature: str, set_name: str = SPARK) -> str:
    """The jars ``feature`` asks for by name, and how many more they need: for messages."""
    asked = {r.coordinate for r in REQUIREMENTS[set_name] if r.feature == feature}
    named = [jar.file for jar in locked(set_name) if jar.coordinate in asked]
    others = len(files(feature, set_name)) - len(named)
    return ", ".join(named) + (f" and the {others} jars they need" if others else "")


def engine_sources() -> list[Path]:
    """The Java sources of the runner's own jar."""
    return sorted(ENGINE_SOURCES.rglob("*.java"))


def engine_jar() -> Path:
    """Where the runner's own jar is (or goes): named after its sources and the pyspark it is compiled against,
    so that a changed source or another pyspark gets a jar of its own."""
    digest = hashlib.sha256(importlib.metadata.version("pyspark").encode())
    for source in engine_sources():
        digest.update(source.relative_to(ENGINE_SOURCES).as_posix().encode() + b"\0" + source.read_bytes() + b"\0")
    return cache_root() / ENGINE / f"sql-runner-engine-{digest.hexdigest()[:16]}.jar"


def classpath(set_name: str = SPARK) -> str:
    """The set's jars in the cache as a JVM classpath ('' when the cache holds none); the ``spark`` set's has the
    runner's own jar after them, once it is built."""
    paths = present(set_name)
    if set_name == SPARK and (engine := engine_jar()).is_file():
        paths.append(engine)
    return os.pathsep.join(str(path) for path in paths)
