"""The jar set's Spark modules are the 4.0 line's newest builds on Maven Central, not 4.0.5's own (not served
there): every field and method they use in Spark, Kafka's client, Avro, Hadoop and each other must exist in
what they run with (pyspark 4.0.5's jars and the rest of the set), or a job fails with NoSuchMethodError
the first time it takes that path. Checked member by member, from the class files."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from runner.core import jars
from tests.classfiles import Classpath, classes_in, parse

pytestmark = pytest.mark.spark

# What the check finds, and why each may stay: (jar, calling class, owner, member).
KNOWN = {
    (
        "spark-avro_2.13-4.0.2.jar",
        "org/apache/spark/sql/v2/avro/AvroPartitionReaderFactory$$anon$1",
        "org/apache/spark/sql/avro/AvroDeserializer",
        "<init>",
    ): "spark-avro's DataSource V2 reader of Avro files, built against 4.0.2's AvroDeserializer (in spark-sql), "
    "which 4.0.5 changed; Spark reads Avro files through the V1 AvroFileFormat (spark.sql.sources."
    "useV1SourceList names avro), and the runner has no Avro file tables: Kafka values use from_avro/to_avro",
}


# Packages whose classes must all be found (anything else unknown here is the JDK's).
LIBRARIES = ("org/apache/spark/", "org/apache/kafka/", "org/apache/avro/", "org/apache/hadoop/", "scala/")


def pyspark_jars() -> list[Path]:
    spec = importlib.util.find_spec("pyspark")
    assert spec is not None and spec.submodule_search_locations
    return sorted((Path(spec.submodule_search_locations[0]) / "jars").glob("*.jar"))


def test_every_member_the_spark_modules_of_the_jar_set_use_exists_in_what_they_run_with():
    checked = [
        jars.cache_dir(jars.SPARK) / jar.file for jar in jars.locked(jars.SPARK) if jar.group == "org.apache.spark"
    ]
    assert {p.name for p in checked} == {
        "spark-sql-kafka-0-10_2.13-4.0.4.jar",
        "spark-token-provider-kafka-0-10_2.13-4.0.0.jar",
        "spark-avro_2.13-4.0.2.jar",
    }
    classpath = Classpath([*jars.present(jars.SPARK), *pyspark_jars()])
    missing: dict[tuple[str, str, str, str], str] = {}
    references = 0
    for jar in checked:
        for name, data in classes_in(jar):
            for owner, member, descriptor in parse(data).references:
                if owner.startswith("["):
                    continue
                references += 1
                found = classpath.defines(owner, member, descriptor)
                if found is False or (found is None and owner.startswith(LIBRARIES) and classpath.get(owner) is None):
                    missing[(jar.name, name, owner, member)] = descriptor
    assert references > 5000, "the check saw the modules' calls"
    unexplained = {key: value for key, value in missing.items() if key not in KNOWN}
    assert not unexplained, f"members used but not defined where they will run: {unexplained}"
    assert set(missing) == set(KNOWN), "an exception no longer needed: remove it from KNOWN"
