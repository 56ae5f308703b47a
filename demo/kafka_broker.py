"""A real Apache Kafka broker on 127.0.0.1, for the tests, the demo and the benchmarks.

    python -m demo.kafka_broker [--port 9092] [--data DIR]     # make kafka: one broker until Ctrl-C

Apache Kafka's own server (the ``kafka-broker`` jar set, ``runner/core/jars.py``, fetched by ``make
jars``) in KRaft mode, one JVM acting as broker and controller, listening in plaintext on loopback only.
Its data lives in a temporary folder (or ``--data``) and goes with it. It is set up like the team's MSK
cluster where a query could tell the difference: topics are not created on first use, so every topic a
query reads or writes is created first (:meth:`KafkaBroker.create_topic`, or Kafka's own tools).

Producing and consuming from Python go through ``confluent-kafka`` (librdkafka), a client of its own:
what a test reads back from a topic is what any consumer would see.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from runner.core import jars

START_TIMEOUT = 90.0
HEAP = "-Xmx768m"
QUIET = 3  # librdkafka's log level: errors only (it retries what it warns about)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _cluster_id() -> str:
    """A cluster id as Kafka makes them: a random UUID, URL-safe base64 without padding, and never one that
    begins with "-" (one in 64 would), which Kafka's tools would read as an option."""
    while True:
        found = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not found.startswith("-"):
            return found


@dataclass(frozen=True)
class Message:
    """A record to write: its value (None: a tombstone) and, if set, its key, partition and timestamp (ms)."""

    value: bytes | str | None
    key: bytes | str | None = None
    partition: int | None = None
    timestamp: int | None = None


@dataclass(frozen=True)
class Record:
    """One record of a topic, as a consumer sees it."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int  # milliseconds since the epoch


class KafkaBroker:
    """One KRaft broker process; :meth:`start` returns once it answers Kafka's protocol."""

    def __init__(self, data: Path | None = None, port: int = 0):
        self.owns_data = data is None
        self.data = Path(data) if data is not None else Path(tempfile.mkdtemp(prefix="sql-runner-kafka-"))
        self.port = port or free_port()
        self.controller_port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_file(self) -> Path:
        return self.data / "broker.log"

    def _classpath(self) -> str:
        absent = jars.missing(jars.BROKER)
        if absent:
            raise RuntimeError(
                f"the Kafka broker's jars are not in {jars.cache_dir(jars.BROKER)} "
                f"({len(absent)} missing, e.g. {absent[0]}): run `{jars.FETCH_COMMAND}`"
            )
        return os.pathsep.join(str(path) for path in jars.present(jars.BROKER))

    def _write_config(self) -> Path:
        logs = self.data / "logs"
        settings = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(logs),
            "auto.create.topics.enable": "false",  # as on MSK: topics are created on purpose
            "num.partitions": "1",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "1",
            "group.initial.rebalance.delay.ms": "0",
            "log.flush.interval.messages": str(2**62),  # the OS's page cache, as Kafka's default
        }
        config = self.data / "server.properties"
        config.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
        (self.data / "log4j.properties").write_text(
            "log4j.rootLogger=WARN, file\n"
            "log4j.logger.kafka.server.KafkaRaftServer=INFO\n"
            "log4j.appender.file=org.apache.log4j.FileAppender\n"
            f"log4j.appender.file.File={self.log_file}\n"
            "log4j.appender.file.layout=org.apache.log4j.PatternLayout\n"
            "log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n\n"
        )
        return config

    def _java(self, main: str, *args: str) -> list[str]:
        return [
            "java",
            HEAP,
            "-XX:+UseSerialGC",
            f"-Dlog4j.configuration=file:{self.data / 'log4j.properties'}",
            "-cp",
            self._classpath(),
            main,
            *args,
        ]

    def start(self, log=print) -> KafkaBroker:
        """Format the storage, start the JVM and wait until the broker lists its topics."""
        self.data.mkdir(parents=True, exist_ok=True)
        config = self._write_config()
        if not (self.data / "logs" / "meta.properties").exists():
            formatted = subprocess.run(
                self._java("kafka.tools.StorageTool", "format", "-t", _cluster_id(), "-c", str(config)),
                capture_output=True,
                text=True,
                check=False,
            )
            if formatted.returncode != 0:
                said = (formatted.stderr or formatted.stdout).strip()
                raise RuntimeError(f"formatting the Kafka broker's storage failed ({formatted.returncode}): {said}")
        log(f"starting Kafka {self.version()} (KRaft) on {self.bootstrap}: waiting for it to answer")
        began = time.monotonic()
        with open(self.data / "broker.out", "ab") as out:
            self.process = subprocess.Popen(
                self._java("kafka.Kafka", str(config)), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        while time.monotonic() - began < START_TIMEOUT:
            if self.process.poll() is not None:
                raise RuntimeError(f"the Kafka broker exited ({self.process.returncode}):\n{self._tail()}")
            if self._answers():
                log(f"Kafka broker up on {self.bootstrap} in {time.monotonic() - began:.1f}s (data in {self.data})")
                return self
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"the Kafka broker did not answer within {START_TIMEOUT:.0f}s:\n{self._tail()}")

    @staticmethod
    def version() -> str:
        return next(j.version for j in jars.locked(jars.BROKER) if j.artifact.startswith("kafka_"))

    def _tail(self) -> str:
        lines: list[str] = []
        for name in ("broker.out", "broker.log"):
            path = self.data / name
            if path.exists():
                lines += path.read_text(errors="replace").splitlines()[-15:]
        return "\n".join(lines)

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                pass
        except OSError:
            return False
        try:
            KafkaClient(self.bootstrap).admin().list_topics(timeout=2)
        except Exception:  # noqa: BLE001 - not ready yet
            return False
        return True

    def client(self) -> KafkaClient:
        return KafkaClient(self.bootstrap)

    def stop(self) -> None:
        """Stop the broker (SIGTERM, then SIGKILL after 20 s) and remove its data if it owns it."""
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        if self.owns_data:
            shutil.rmtree(self.data, ignore_errors=True)

    def __enter__(self) -> KafkaBroker:
        return self if self.process is not None else self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()


class KafkaClient:
    """What a test, the demo or a benchmark does with a broker: topics, records in and out."""

    def __init__(self, bootstrap: str):
        self.bootstrap = bootstrap
        self._admin = None

    def admin(self):
        """An admin client of this broker (one, kept: a client's pending answers die with it)."""
        from confluent_kafka.admin import AdminClient

        if self._admin is None:
            self._admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": QUIET})
        return self._admin

    def create_topic(self, name: str, partitions: int = 1) -> str:
        from confluent_kafka.admin import NewTopic

        futures = self.admin().create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])
        futures[name].result(timeout=30)
        self._wait_for(name, partitions)
        return name

    def add_partitions(self, name: str, total: int) -> None:
        from confluent_kafka.admin import NewPartitions

        self.admin().create_partitions([NewPartitions(name, total)])[name].result(timeout=30)
        self._wait_for(name, total)

    def _wait_for(self, name: str, partitions: int, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            topic = self.admin().list_topics(topic=name, timeout=5).topics.get(name)
            if topic is not None and topic.error is None and len(topic.partitions) == partitions:
                return
            time.sleep(0.1)
        raise TimeoutError(f"topic {name} did not get {partitions} partitions within {timeout:.0f}s")

    def produce(self, topic: str, messages: Iterable[Message | bytes | str | None]) -> int:
        """Write ``messages`` to ``topic`` (a plain value, None for a tombstone, or a :class:`Message` with its key,
        partition or timestamp), idempotently and in order; returns how many the broker acknowledged."""
        from confluent_kafka import Producer

        producer = Producer(
            {"bootstrap.servers": self.bootstrap, "linger.ms": 5, "enable.idempotence": True, "log_level": QUIET}
        )
        count = 0
        for item in messages:
            message = item if isinstance(item, Message) else Message(item)
            extra: dict = {}
            if message.partition is not None:
                extra["partition"] = message.partition
            if message.timestamp is not None:
                extra["timestamp"] = message.timestamp
            while True:
                try:
                    producer.produce(topic, value=message.value, key=message.key, **extra)
                    break
                except BufferError:  # the local queue is full: let it drain
                    producer.poll(0.1)
            count += 1
        left = producer.flush(60)
        if left:
            raise TimeoutError(f"{left} records to {topic} were not acknowledged")
        return count

    def records(self, topic: str, *, read_committed: bool = True, timeout: float = 30.0) -> list[Record]:
        """Every record of ``topic`` now (each partition read to its end), ordered by partition and offset."""
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "log_level": QUIET,
                "group.id": f"sql-runner-read-{uuid.uuid4().hex}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed" if read_committed else "read_uncommitted",
            }
        )
        try:
            metadata = consumer.list_topics(topic, timeout=10).topics[topic]
            ends: dict[int, int] = {}
            for partition in metadata.partitions:
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
                if high > low:
                    ends[partition] = high
            consumer.assign([TopicPartition(topic, p, 0) for p in ends])
            found: list[Record] = []
            done: set[int] = set()
            deadline = time.monotonic() + timeout
            while len(done) < len(ends) and time.monotonic() < deadline:
                for message in consumer.consume(1000, timeout=0.5):
                    if message.error():
                        continue
                    partition, offset = message.partition(), message.offset()
                    found.append(
                        Record(topic, partition, offset, message.key(), message.value(), message.timestamp()[1])
                    )
                    if offset + 1 >= ends[partition]:
                        done.add(partition)
                for partition, end in ends.items():  # a transaction's marker is the last offset, never handed out
                    if partition not in done and consumer.position([TopicPartition(topic, partition)])[0].offset >= end:
                        done.add(partition)
            if len(done) < len(ends):
                raise TimeoutError(f"{topic}: read {len(found)} records, not to the end within {timeout:.0f}s")
            return sorted(found, key=lambda r: (r.partition, r.offset))
        finally:
            consumer.close()

    def end_offsets(self, topic: str) -> dict[int, int]:
        """Partition -> the offset the next record will get."""
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer(
            {"bootstrap.servers": self.bootstrap, "log_level": QUIET, "group.id": f"sql-runner-ends-{uuid.uuid4().hex}"}
        )
        try:
            metadata = consumer.list_topics(topic, timeout=10).topics[topic]
            return {
                p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in metadata.partitions
            }
        finally:
            consumer.close()


@contextlib.contextmanager
def kafka_broker(log=print) -> Iterator[KafkaBroker]:
    """A broker for the duration of the block."""
    broker = KafkaBroker().start(log)
    try:
        yield broker
    finally:
        broker.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m demo.kafka_broker", description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=9092, help="the plaintext listener's port (default 9092)")
    parser.add_argument("--data", type=Path, help="where the broker keeps its data (default: a temporary folder)")
    parser.add_argument("--topic", action="append", default=[], help="create NAME or NAME:PARTITIONS at start")
    args = parser.parse_args(argv)
    broker = KafkaBroker(args.data, args.port)
    try:
        broker.start()
    except (RuntimeError, subprocess.CalledProcessError) as error:
        print(f"kafka: {error}", file=sys.stderr)
        return 1
    try:
        for spec in args.topic:
            name, _, count = spec.partition(":")
            broker.client().create_topic(name, int(count or 1))
            print(f"created topic {name} ({count or 1} partition(s))")
        print(f"use it with: export KAFKA_BOOTSTRAP_SERVERS={broker.bootstrap}   (Ctrl-C stops the broker)")
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        signal.sigwait({signal.SIGINT, signal.SIGTERM})
    finally:
        print("stopping the Kafka broker")
        broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
