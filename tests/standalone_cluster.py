"""A real Spark standalone cluster (one master, one worker) on 127.0.0.1, for the tests.

Started from the installed pyspark's own ``spark-class``; the master's JSON endpoint
tells when the worker has registered.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pyspark


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class StandaloneCluster:
    work_dir: Path
    port: int = field(default_factory=free_port)
    web_port: int = field(default_factory=free_port)
    worker_cores: int = 1
    worker_memory: str = "1g"
    processes: list[subprocess.Popen] = field(default_factory=list)

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    @property
    def web_ui(self) -> str:
        return f"http://127.0.0.1:{self.web_port}"

    def _spawn(self, role: str, args: list[str]) -> None:
        home = Path(pyspark.__file__).parent
        env = {
            **os.environ,
            "SPARK_HOME": str(home),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_WORKER_DIR": str(self.work_dir / "work"),
        }
        self.work_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.work_dir / f"{role}.log", "ab")  # noqa: SIM115 - kept open for the process's life
        self.processes.append(
            subprocess.Popen(
                [str(home / "bin" / "spark-class"), *args],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )

    def status(self) -> dict:
        with urllib.request.urlopen(f"{self.web_ui}/json/", timeout=2) as response:
            return json.load(response)

    def start(self, timeout: float = 90.0) -> StandaloneCluster:
        """Start master and worker; return when the worker is registered."""
        self._spawn(
            "master",
            [
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--webui-port",
                str(self.web_port),
            ],
        )
        self._spawn(
            "worker",
            [
                "org.apache.spark.deploy.worker.Worker",
                "--host",
                "127.0.0.1",
                "--webui-port",
                str(free_port()),
                "--cores",
                str(self.worker_cores),
                "--memory",
                self.worker_memory,
                self.master_url,
            ],
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if self.status().get("aliveworkers", 0) >= 1:
                    return self
            except OSError:
                pass
            if any(p.poll() is not None for p in self.processes):
                break
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"the standalone cluster did not come up; see {self.work_dir}/master.log, worker.log")

    def stop(self) -> None:
        for process in reversed(self.processes):
            try:
                os.killpg(process.pid, signal.SIGTERM)
                process.wait(timeout=20)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                os.killpg(process.pid, signal.SIGKILL)
        self.processes.clear()
