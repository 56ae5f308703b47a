"""A real YARN on 127.0.0.1, for the YARN target's tests and for trying it by hand.

    python -m demo.yarn_cluster [--memory-mb 10240] [--vcores 8]     # make yarn: one cluster until Ctrl-C

Hadoop's own single-process cluster (``MiniYARNCluster``, the ``yarn-cluster`` jar set of
``runner/core/jars.py``, fetched by ``make jars``): a ResourceManager with its RPC and REST API and a
NodeManager that launches real containers, in one JVM started by ``demo/java/SqlRunnerMiniYarn.java``
(compiled here with javac on first use). Ports are free ones chosen as it starts; its work folders, the
containers' logs among them, live in a temporary folder that goes with it. What a client needs to reach
it (``yarn-site.xml``, ``core-site.xml``) and Spark's defaults for it (``spark-defaults.conf``) are written
to :attr:`YarnCluster.conf_dir`: point ``HADOOP_CONF_DIR`` and ``SPARK_CONF_DIR`` there, as they point at
``/etc/hadoop/conf`` and ``/etc/spark/conf`` on an EMR node, and ``spark-submit --master yarn`` (or the
runner's ``--target yarn``) submits to it.

Set up for a small shared machine: the NodeManager offers ``memory_mb`` and ``vcores`` (by default a
session and two jobs, each a driver and an executor, fit), its physical and virtual memory checks are
off (a JVM's virtual size is far above its heap), a full disk does not mark the node unhealthy, and the
capacity scheduler has one queue, ``default``, with the whole cluster. A request above the node's
memory is refused by the ResourceManager, as a real cluster does.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from runner.core import jars, platform
from runner.targets.yarn import YARN_MAX_ATTEMPTS

SOURCE = Path(__file__).with_name("java") / "SqlRunnerMiniYarn.java"
MAIN_CLASS = SOURCE.stem
START_TIMEOUT = 120.0
HEAP = "-Xmx768m"
SMALL_MACHINE_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"  # the containers' JVMs (spark_defaults)
MEMORY_MB = 10240
VCORES = 8
MAX_ATTEMPTS = YARN_MAX_ATTEMPTS  # yarn.resourcemanager.am.max-attempts, as the team's EMR cluster sets it
LOG4J = """\
log4j.rootLogger=WARN, out
log4j.appender.out=org.apache.log4j.ConsoleAppender
log4j.appender.out.layout=org.apache.log4j.PatternLayout
log4j.appender.out.layout.ConversionPattern=%d{HH:mm:ss} %p %c{1}: %m%n
"""


class YarnClusterFailed(Exception):
    """The cluster could not be started; the message says why (and where its log is)."""


def compiled() -> Path:
    """The folder holding ``SqlRunnerMiniYarn.class``, compiled against the jar set once per source."""
    classpath = jars.classpath(jars.YARN)
    missing = jars.missing(jars.YARN)
    if missing:
        raise YarnClusterFailed(f"the yarn-cluster jars are missing ({', '.join(missing[:3])}...): run `make jars`")
    digest = hashlib.sha256(SOURCE.read_bytes() + classpath.encode()).hexdigest()[:16]
    folder = jars.cache_dir(jars.YARN) / f"classes-{digest}"
    if not (folder / f"{MAIN_CLASS}.class").is_file():
        javac = shutil.which("javac")
        if javac is None:
            raise YarnClusterFailed("javac (Java 17's JDK) is needed to compile the YARN cluster's launcher")
        building = Path(tempfile.mkdtemp(prefix="classes-", dir=folder.parent))
        done = subprocess.run(
            [javac, "-nowarn", "-d", str(building), "-cp", classpath, str(SOURCE)],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if done.returncode != 0:
            shutil.rmtree(building, ignore_errors=True)
            raise YarnClusterFailed(f"javac refused {SOURCE.name}: {done.stderr.strip()}")
        with contextlib.suppress(OSError):  # another process compiled it first: theirs is the same
            building.rename(folder)
        shutil.rmtree(building, ignore_errors=True)
    return folder


class YarnCluster:
    """One ResourceManager and one NodeManager in a JVM of their own; :meth:`start` returns once the
    NodeManager has registered and the REST API answers."""

    def __init__(
        self,
        memory_mb: int = MEMORY_MB,
        vcores: int = VCORES,
        max_attempts: int = MAX_ATTEMPTS,
        folder: Path | None = None,
    ):
        self.memory_mb, self.vcores, self.max_attempts = memory_mb, vcores, max_attempts
        self.folder = folder or Path(tempfile.mkdtemp(prefix="sql-runner-yarn-"))
        self.conf_dir = self.folder / "conf"
        self.log = self.folder / "cluster.log"
        self.process: subprocess.Popen | None = None
        self.ready: dict = {}

    @staticmethod
    def running_in(folder: Path) -> YarnCluster:
        """The cluster another process started in ``folder`` (this one neither started nor stops it)."""
        cluster = YarnCluster(folder=folder)
        cluster.ready = json.loads((cluster.conf_dir / "ready").read_text())
        return cluster

    @staticmethod
    def stop_pid(pid: int) -> None:
        """Stop the cluster whose JVM is ``pid``: SIGTERM (its shutdown stops the NodeManager's containers),
        then SIGKILL to its process group if it lingers."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGTERM)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                os.kill(pid, 0)
                time.sleep(0.2)
            os.killpg(pid, signal.SIGKILL)

    @property
    def rm_address(self) -> str:
        """The ResourceManager's RPC address (what ``yarn.resourcemanager.address`` says)."""
        return self.ready["rm"]

    @property
    def web_address(self) -> str:
        """The ResourceManager's web address, its REST API under ``/ws/v1/cluster``."""
        return self.ready["web"]

    @property
    def node_logs(self) -> Path:
        """The NodeManager's log folder: ``<application>/<container>/{stdout,stderr}``."""
        found = sorted(self.folder.glob("data/*/*/*-logDir-nm-0_0"))
        if not found:
            raise YarnClusterFailed(f"no NodeManager log folder under {self.folder}")
        return found[0]

    def rest(self, path: str) -> dict:
        """A GET of the ResourceManager's REST API (``path`` under ``/ws/v1/cluster``), as JSON."""
        request = urllib.request.Request(
            f"http://{self.web_address}/ws/v1/cluster/{path.lstrip('/')}", headers={"Accept": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            return json.loads(answer.read())

    def client_env(self) -> dict[str, str]:
        """What a client of this cluster sets, as on an EMR node: Hadoop's configuration (where the
        ResourceManager is) and Spark's defaults for it (:meth:`spark_defaults`)."""
        return {"HADOOP_CONF_DIR": str(self.conf_dir), "SPARK_CONF_DIR": str(self.conf_dir)}

    def runner_options(self, team: str) -> list[str]:
        """``sql-runner``'s options for ``team``'s jobs on this cluster."""
        return ["--target", "yarn", "--resource-manager", f"http://{self.web_address}", "--team", team]

    def runner_env(self, team: str) -> dict[str, str]:
        """The environment ``sql-runner`` needs for ``team``'s jobs on this cluster: its client configuration, and
        the options of :meth:`runner_options` as their ``SQL_RUNNER_*`` variables."""
        web = f"http://{self.web_address}"
        yarn = {"SQL_RUNNER_TARGET": "yarn", "SQL_RUNNER_RESOURCE_MANAGER": web, "SQL_RUNNER_TEAM": team}
        return {**self.client_env(), **yarn}

    def spark_defaults(self) -> dict[str, str]:
        """Spark's defaults for applications on this cluster, the counterpart of the ``spark-defaults`` the team's
        EMR cluster is created with (infra/stack.py): everything a container needs is installed on the node,
        nothing is shipped with each application. Spark's jars are pyspark's (``local:``, as EMR's are under
        /usr/lib/spark), the jar set is on the classpath from the jar cache (EMR: /usr/lib/sql-runner/jars), and
        drivers and executors run this environment's Python, which has the runner installed (EMR: the
        bootstrap's python3.11). Containers are sized for a session and two jobs on this small machine, and their
        JVMs compile and collect as suits its two cores."""
        spark_jars = platform.spark_submit_path().parent.parent / "jars"
        defaults = {
            "spark.yarn.jars": f"local:{spark_jars}/*",
            "spark.yarn.stagingDir": (self.folder / "staging").as_uri(),
            "spark.pyspark.python": sys.executable,  # the environment's own: what it links to lacks the runner
            "spark.driver.memory": "512m",
            "spark.executor.memory": "512m",
            "spark.executor.instances": "1",
            # what the suite's own JVMs start with (tests/jvmcds.py): C1 only and one GC thread start a container's
            # JVM in a fraction of the CPU on this small machine; a job's own options come after these
            "spark.driver.defaultJavaOptions": SMALL_MACHINE_JVM,
            "spark.executor.defaultJavaOptions": SMALL_MACHINE_JVM,
        }
        classpath = jars.classpath(jars.SPARK)
        if classpath:
            defaults.update(dict.fromkeys(platform.CLASSPATHS, classpath))
        return defaults

    def kill(self, app_id: str) -> None:
        """Kill an application through the ResourceManager, as ``yarn application -kill`` does."""
        request = urllib.request.Request(
            f"http://{self.web_address}/ws/v1/cluster/apps/{app_id}/state",
            data=json.dumps({"state": "KILLED"}).encode(),
            method="PUT",
            headers={"Content-Type": "application/json", "Accept": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as answer:
            answer.read()

    def driver_pid(self, app_id: str) -> int | None:
        """The process of ``app_id``'s ApplicationMaster (in cluster mode, the Spark driver's JVM) on the node, if one
        runs: the JVM whose command line names Spark's ApplicationMaster and a container of the application."""
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:  # it ended meanwhile
                continue
            master = "org.apache.spark.deploy.yarn.ApplicationMaster" in command and f"/{app_id}/" in command
            if master and not command.startswith(("bash", "/bin/bash")):  # not the container's launch script
                return int(entry.name)
        return None

    def active_apps(self) -> list[dict]:
        """The applications the ResourceManager has not finished: new, accepted or running."""
        found = self.rest("apps?states=NEW,NEW_SAVING,SUBMITTED,ACCEPTED,RUNNING").get("apps") or {}
        return found.get("app") or []

    def start(self) -> YarnCluster:
        classes = compiled()
        self.conf_dir.mkdir(parents=True, exist_ok=True)
        (self.conf_dir / "spark-defaults.conf").write_text(
            "".join(f"{key} {value}\n" for key, value in self.spark_defaults().items())
        )
        data = self.folder / "data"
        (self.folder / "tmp").mkdir(parents=True, exist_ok=True)
        (self.folder / "log4j.properties").write_text(LOG4J)
        command = [
            "java",
            HEAP,
            "-XX:+UseSerialGC",
            "--add-opens=java.base/java.lang=ALL-UNNAMED",  # Guice's class generation in the web servers
            f"-Dlog4j.configuration=file:{self.folder / 'log4j.properties'}",
            f"-Djava.io.tmpdir={self.folder / 'tmp'}",
            f"-Dtest.build.data={data}",  # where MiniYARNCluster puts its work and log folders
            f"-Dhadoop.tmp.dir={data}",
            "-cp",
            f"{classes}:{jars.classpath(jars.YARN)}",
            MAIN_CLASS,
            str(self.conf_dir),
            str(self.memory_mb),
            str(self.vcores),
            str(self.max_attempts),
        ]
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            self._wait_until_serving()
        except BaseException:
            self.stop(keep=True)  # its log, named in the error, stays
            raise
        return self

    def _wait_until_serving(self) -> None:
        assert self.process is not None
        deadline = time.monotonic() + START_TIMEOUT
        ready = self.conf_dir / "ready"
        while not ready.exists():
            if self.process.poll() is not None:
                raise YarnClusterFailed(f"the YARN cluster exited ({self.process.returncode}); its log: {self.log}")
            if time.monotonic() > deadline:
                raise YarnClusterFailed(f"the YARN cluster did not start in {START_TIMEOUT:.0f} s; its log: {self.log}")
            time.sleep(0.2)
        self.ready = json.loads(ready.read_text())
        nodes = self.rest("nodes")["nodes"]["node"]
        if [node["state"] for node in nodes] != ["RUNNING"]:
            raise YarnClusterFailed(f"the NodeManager is not running: {nodes}")

    def stop(self, keep: bool = False) -> None:
        """Stop the cluster this object started (its JVM stops the ResourceManager and the NodeManager with their
        containers) and remove its folder unless ``keep``. A cluster found running (``running_in``) is left alone."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if not keep:
            shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> YarnCluster:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m demo.yarn_cluster", description=__doc__.splitlines()[0])
    parser.add_argument("--memory-mb", type=int, default=MEMORY_MB, help="the NodeManager's memory (MiB)")
    parser.add_argument("--vcores", type=int, default=VCORES, help="the NodeManager's virtual cores")
    args = parser.parse_args(argv)
    try:
        cluster = YarnCluster(args.memory_mb, args.vcores).start()
    except YarnClusterFailed as error:
        print(f"yarn: {error}", file=sys.stderr)
        return 1
    try:
        print(f"YARN ResourceManager at {cluster.rm_address}, its web UI and REST API at http://{cluster.web_address}")
        exports = " ".join(f"{key}={value}" for key, value in cluster.client_env().items())
        print(f"  export {exports}")
        print(f"  then: sql-runner deploy --target yarn --resource-manager http://{cluster.web_address}")
        print(f"  containers' logs: {cluster.node_logs}")
        print("Ctrl-C stops it.", flush=True)
        signal.sigwait({signal.SIGINT, signal.SIGTERM})
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    sys.exit(main())
