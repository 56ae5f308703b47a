"""The partitions a Kafka source reads now, asked of the broker through the connector's own client.

A new version that continues a previous one starts each Kafka source from the offsets
the previous version committed. Spark requires such ``startingOffsets`` to name exactly
the partitions the source is assigned, and a topic can gain partitions (or a
``topic-pattern`` new topics) in between; :func:`jobs.kafka.complete_offsets` fills those in
from this answer. It runs in the driver, which already has the broker's address and
credentials, through ``org.apache.kafka.clients.admin.Admin`` from the kafka-clients jar
the connector needs anyway.
"""

from __future__ import annotations

from pyspark.sql import SparkSession

from jobs.jvm import java_class, jvm_of

TIMEOUT_SECONDS = 60


def current_partitions(
    spark: SparkSession, reader_options: dict[str, str], topics: list[str], pattern: str | None
) -> dict[str, list[int]]:
    """Topic -> partition numbers of the topics the source subscribes to (``topics``, or those matching ``pattern``)."""
    jvm = jvm_of(spark)
    properties = java_class(jvm, "java.util.Properties")()
    for key, value in reader_options.items():
        if key.startswith("kafka."):
            properties.put(key[len("kafka.") :], value)
    seconds = java_class(jvm, "java.util.concurrent.TimeUnit").SECONDS
    admin = java_class(jvm, "org.apache.kafka.clients.admin.Admin").create(properties)
    try:
        names = [str(name) for name in admin.listTopics().names().get(TIMEOUT_SECONDS, seconds)]
        if pattern is not None:
            compiled = java_class(jvm, "java.util.regex.Pattern").compile(pattern)  # Spark's own regex dialect
            wanted = [name for name in names if compiled.matcher(name).matches()]
        else:
            wanted = [name for name in topics if name in names]
        if not wanted:
            return {}
        listed = java_class(jvm, "java.util.ArrayList")()
        for name in wanted:
            listed.add(name)
        described = admin.describeTopics(listed).allTopicNames().get(TIMEOUT_SECONDS, seconds)
        return {name: sorted(int(p.partition()) for p in described.get(name).partitions()) for name in wanted}
    finally:
        admin.close()
