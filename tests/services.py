"""Servers shared by a whole test run: one Kafka broker, one PostgreSQL server and one YARN cluster, each started
by whichever of the test processes needs it first.

``make test`` runs the tests in two processes (pytest-xdist). The controlling process makes a run folder
(``SQL_RUNNER_TEST_RUN``) before the workers start; a worker that needs the broker takes a lock in it and
starts the broker there, or finds the one another worker started. The controlling process stops it when
the run ends (``stop_shared``), so a run that never uses Kafka never starts one.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from demo.kafka_broker import KafkaBroker, KafkaClient
from demo.postgres_server import PostgresServer
from demo.yarn_cluster import YarnCluster
from tests import tiers

RUN_ENV = "SQL_RUNNER_TEST_RUN"
T = TypeVar("T")


def make_run_folder() -> None:
    os.environ[RUN_ENV] = tempfile.mkdtemp(prefix="sql-runner-test-run-")


def _run_folder() -> Path:
    folder = os.environ.get(RUN_ENV)
    if not folder:  # a process pytest did not configure (e.g. a test module run as a script)
        make_run_folder()
        folder = os.environ[RUN_ENV]
    return Path(folder)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _shared_process(service: str, start: Callable[[Path], dict], attach: Callable[[dict], T]) -> T:
    """The run's ``service``, a process of its own: ``attach``-ed to from its record if another test process
    started it and it lives, else ``start``-ed in the run folder (its record: a dict with its ``pid``)."""
    folder = _run_folder()
    with open(folder / f"{service}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        record = folder / f"{service}.json"
        if record.exists():
            known = json.loads(record.read_text())
            if _alive(known["pid"]):
                return attach(known)
        known = start(folder)
        record.write_text(json.dumps(known))
        return attach(known)


def shared_broker() -> KafkaClient:
    """A client of the run's broker, started now if no test process has started it yet."""
    tiers.require("kafka", "the run's Kafka broker")

    def start(folder: Path) -> dict:
        broker = KafkaBroker(folder / "kafka").start(log=lambda message: print(message, flush=True))
        assert broker.process is not None
        return {"pid": broker.process.pid, "bootstrap": broker.bootstrap}

    return _shared_process("kafka", start, lambda known: KafkaClient(known["bootstrap"]))


def shared_postgres() -> PostgresServer:
    """The run's PostgreSQL server, started now if no test process has started it yet."""
    tiers.require("postgres", "the run's PostgreSQL server")
    folder = _run_folder()
    with open(folder / "postgres.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        record = folder / "postgres.json"
        if record.exists():
            known = json.loads(record.read_text())
            return PostgresServer(known["port"], folder=Path(known["folder"]), password=known["password"])
        server = PostgresServer().start()
        record.touch(mode=0o600)
        record.write_text(json.dumps({"port": server.port, "password": server.password, "folder": str(server.folder)}))
        return server


def shared_yarn() -> YarnCluster:
    """The run's YARN cluster, started now if no test process has started it yet."""
    tiers.require("yarn", "the run's YARN cluster")

    def start(folder: Path) -> dict:
        cluster = YarnCluster(folder=folder / "yarn").start()
        assert cluster.process is not None
        return {"pid": cluster.process.pid, "folder": str(cluster.folder)}

    return _shared_process("yarn", start, lambda known: YarnCluster.running_in(Path(known["folder"])))


def stop_shared() -> None:
    """Stop what the run started and remove its folder (the controlling process, at the end)."""
    folder = os.environ.pop(RUN_ENV, None)
    if not folder:
        return
    postgres = Path(folder) / "postgres.json"
    if postgres.exists():
        known = json.loads(postgres.read_text())
        PostgresServer(known["port"], folder=Path(known["folder"])).stop()
    yarn = Path(folder) / "yarn.json"
    if yarn.exists():
        YarnCluster.stop_pid(json.loads(yarn.read_text())["pid"])
    record = Path(folder) / "kafka.json"
    if record.exists():
        pid = json.loads(record.read_text())["pid"]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    shutil.rmtree(folder, ignore_errors=True)
