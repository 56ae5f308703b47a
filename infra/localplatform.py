"""What only AWS runs, stood in for on this machine around the stacks ``make deploy-infra`` applied on the local
endpoint (infra/localaws.py): EMR's primary node and its step runner, and Lambda's runtime for the deploy
function. Each is small, named as a stand-in, and reads what was applied from the endpoint (the cluster's
bootstrap actions, configurations, steps and log URI; the function's handler, code, environment, reserved
concurrency and dead-letter queue; the bucket's notification), so that a defect in the stacks shows here.

- :class:`PrimaryNode`: a folder stands for the team's EMR primary node. Its image has what EMR's has before
  the bootstrap: Python 3.11 (a fresh environment at ``/usr/local``, as ``pip install`` as root fills it on
  Amazon Linux), the AWS CLI (an environment of its own), ``sudo`` and ``systemctl`` (below). What EMR runs as
  its ``hadoop`` user (the bootstrap actions, the steps) runs here as the machine's unprivileged ``nobody``
  when this machine's user is root (otherwise as that user): the image's folders (``/usr/local``, ``/etc``,
  ``/usr/lib``, ``/run``) belong to root and only ``/home/hadoop`` to the node's user, so a script that writes
  there without ``sudo`` fails here as on EMR. ``sudo`` asks the node (:class:`_Sudo`) to run the command as
  root, with root's environment on the node, as sudo's ``env_reset`` gives it. Absolute paths
  in what the node runs (the bootstrap scripts, the steps' command lines, the service units) are read under
  the folder (:meth:`PrimaryNode.local`), and the primary node's ``http://localhost:8088`` is the local YARN's
  ResourceManager. The bootstrap actions run as EMR runs them: each script fetched from S3, run with its
  arguments in order, its output kept where EMR keeps it (``/mnt/var/log/bootstrap-actions/<n>/`` and the
  cluster's log URI), the first that fails ends the cluster (``TERMINATED_WITH_ERRORS``, with EMR's reason).
  Spark's defaults on the node are the cluster's ``spark-defaults`` configuration as applied, with the local
  YARN's own (demo/yarn_cluster.py), S3 through S3A at the endpoint (EMRFS's stand-in), the local CA trusted by
  the JVMs and moto's fixed credentials given to the containers (the instance profile's stand-in); the MSK IAM
  client settings are left out, since the broker standing for MSK speaks plain Kafka.
- ``systemctl`` on the node (:func:`systemctl`): ``daemon-reload`` does nothing; ``enable --now <unit>`` runs the
  unit's ``ExecStartPre`` lines, then its ``ExecStart`` in the background (its output in
  ``/var/log/<unit>.log``); ``stop <unit>`` ends it. The CloudWatch agent's control command checks its
  configuration and the Prometheus file it names, and runs nothing (CloudWatch is not here).
- :class:`StepRunner`: EMR's step runner. It reads the cluster's steps from the endpoint (``ListSteps``), runs
  each ``command-runner.jar`` step's command on the node in the order added, at most the cluster's step
  concurrency at a time, and records each step's state (``RUNNING``, then ``COMPLETED`` or ``FAILED``, which
  moto cannot change by itself) and its output under ``<log URI><cluster>/steps/<step>/``, as EMR does. When
  the cluster is terminated, it stays ``TERMINATING`` until what ran on it has ended: its steps, the node's
  services and the YARN applications.
- :class:`DeployLambda`: Lambda's runtime for functions S3 notifies. moto decides from the bucket's applied
  notification which object events reach which function; this stand-in runs the function's packaged code (its
  zip as applied, at its handler) in a subprocess of a Python 3.11 with boto3 (what the runtime provides), with
  the function's environment, at most its reserved concurrency at a time; an invocation that fails is retried
  twice, as Lambda retries an asynchronous one, then sent to the function's dead-letter queue. Each
  invocation's output goes to the function's log group.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import os
import pwd
import re
import shlex
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import uuid
import zipfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote_plus

from infra.localaws import ACCOUNT, CREDENTIALS, endpoint_client

# The EMR paths the node's programs name, read under the node's folder; and the ResourceManager of EMR's
# primary node, which is the local YARN's here.
NODE_PATHS = (
    "/usr/local",
    "/usr/lib/sql-runner",
    "/usr/lib/aws-cli",
    "/usr/bin/python3.11",
    "/usr/bin/spark-submit",
    "/usr/bin/aws",
    "/etc/sql-runner",
    "/etc/systemd/system",
    "/etc/hadoop/conf",
    "/etc/spark/conf",
    "/mnt/var",
    "/opt/aws",
    "/usr/share/aws",
    "/var/log",
    "/run",
    "/home/hadoop",
)
_NODE_PATH = re.compile(r"(?<![\w.~/-])(" + "|".join(re.escape(p) for p in NODE_PATHS) + r")(?=[/\s'\"*:]|$)")
EMR_RESOURCE_MANAGER = "http://localhost:8088"
EMRFS_LIB = "/usr/share/aws/emr/emrfs/lib"  # where EMR's image keeps EMRFS, on Spark's class path
AWS_CLI = "awscli==1.46.3"  # the node image's AWS CLI (the bootstrap scripts' `aws s3 cp`)
LAMBDA_RUNTIME = "boto3==1.44.5"  # what Lambda's python3.11 runtime provides besides the function's own zip
CLOUDWATCH_AGENT_CTL = "/opt/aws/amazon-cloudwatch-agent/bin/amazon-cloudwatch-agent-ctl"
STEP_JAR = "command-runner.jar"
NODE_USER = "nobody"  # EMR's `hadoop` user: the machine's unprivileged user, when the machine's own is root


class BootstrapFailed(Exception):
    """A bootstrap action returned a non-zero code: the cluster ended, as EMR ends it."""


def _venv(folder: Path, *requirements: str, base: str = getattr(sys, "_base_executable", sys.executable)) -> Path:
    """A fresh Python 3.11 environment at ``folder`` (of ``base``, the machine's Python unless given), with
    ``requirements``; its python."""
    subprocess.run([base, "-m", "venv", str(folder)], check=True, capture_output=True, timeout=120)
    python = folder / "bin" / "python3.11"
    if requirements:
        done = subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *requirements],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"pip install {' '.join(requirements)} failed: {done.stderr[-2000:]}")
    return python


def _script(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)


def _s3_parts(uri: str) -> tuple[str, str]:
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    return bucket, key


def _moto_cluster(cluster_id: str):
    """The cluster as moto holds it (moto files it under the region of the request's host, which the endpoint's
    address does not name: looked for in every region)."""
    from moto.emr.models import emr_backends

    for backend in emr_backends[ACCOUNT].values():
        if cluster_id in backend.clusters:
            return backend.clusters[cluster_id]
    raise KeyError(f"no EMR cluster {cluster_id} on the endpoint")


class PrimaryNode:
    """The team's EMR primary node, in ``folder`` (see the module's docstring)."""

    def __init__(self, folder: Path, aws_env: dict[str, str], yarn, cluster_id: str, region: str):
        self.root = folder
        self.aws_env = dict(aws_env)
        # EMR's `hadoop` user: `nobody` when this machine's user is root, or this machine's user
        self.user = pwd.getpwnam(NODE_USER) if os.geteuid() == 0 else pwd.getpwuid(os.geteuid())
        self._sudo: _Sudo | None = None
        self.yarn = yarn
        self.cluster_id = cluster_id
        self.region = region
        self.instance_id = "i-" + hashlib.sha256(cluster_id.encode()).hexdigest()[:17]

    def path(self, emr_path: str) -> Path:
        """Where an EMR path of the node is in its folder (one of :data:`NODE_PATHS` or below one)."""
        found = Path(node_text(self.root, EMR_RESOURCE_MANAGER, emr_path))
        if not found.is_relative_to(self.root):
            raise ValueError(f"{emr_path} is not a path of the node stand-in (NODE_PATHS)")
        return found

    @property
    def bin(self) -> Path:
        """The node's ``/usr/bin``, first on its PATH: the image's commands the scripts call by name."""
        return self.root / "usr" / "bin"

    def local(self, text: str) -> str:
        """``text`` (a command line, a script, a unit) as the node reads it (:func:`node_text`)."""
        return node_text(self.root, f"http://{self.yarn.web_address}", text)

    def env(self) -> dict[str, str]:
        """The environment of what runs on the node: its PATH first, the endpoint, the YARN client's files."""
        keep = {k: v for k, v in os.environ.items() if k in ("JAVA_HOME", "LANG", "LC_ALL", "TZ")}
        return {
            **keep,
            **self.aws_env,
            "PATH": f"{self.bin}:{self.path('/usr/local/bin')}:/usr/bin:/bin",
            "HOME": str(self.path("/home/hadoop")),
            "USER": self.user.pw_name,
            "LOGNAME": self.user.pw_name,
            "HADOOP_CONF_DIR": str(self.path("/etc/hadoop/conf")),
            "SPARK_CONF_DIR": str(self.path("/etc/spark/conf")),
            "SQL_RUNNER_NODE": str(self.root),
            "SQL_RUNNER_NODE_RESOURCE_MANAGER": f"http://{self.yarn.web_address}",
        }

    def _as_user(self) -> dict:
        """Popen's options that run a command as the node's user (none when that is this machine's own)."""
        if self.user.pw_uid == os.geteuid():
            return {}
        return {"user": self.user.pw_uid, "group": self.user.pw_gid, "extra_groups": []}

    def _spawn(self, argv: list[str], **options) -> subprocess.Popen:
        """``argv`` as the node's user, with the node's environment, in its home; the node's own process (what
        ``sudo`` serves)."""
        process = subprocess.Popen(argv, env=self.env(), cwd=self.path("/home/hadoop"), **self._as_user(), **options)
        assert self._sudo is not None, "provision() first"
        self._sudo.launched.add(process.pid)
        return process

    def _image_python(self) -> str:
        """The Python 3.11 the image's environments are made of: the machine's own, or Debian's where the node's
        user cannot run that one (a Python under root's home, as pyenv puts it)."""
        base = getattr(sys, "_base_executable", sys.executable)
        for python in dict.fromkeys((base, "/usr/bin/python3.11")):
            check = [python, "-c", "import ensurepip, sys, venv; assert sys.version_info[:2] == (3, 11)"]
            with contextlib.suppress(OSError):
                done = subprocess.run(check, capture_output=True, cwd="/", timeout=60, **self._as_user())
                if done.returncode == 0:
                    return python
        raise BootstrapFailed(
            f"no Python 3.11 with venv that {self.user.pw_name}, who runs the node's scripts, can run ({base} is "
            "out of their reach): install Debian's python3.11-venv (make test and make local-platform do)"
        )

    # ---- the image, before the bootstrap --------------------------------------------------------------

    def provision(self) -> None:
        """What EMR's image holds before the bootstrap actions run."""
        self.root.mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o755)
        for folder in (
            "/home/hadoop",
            "/mnt/var/lib/info",
            "/etc/systemd/system",
            "/var/log",
            "/run",
            "/etc/hadoop/conf",
            "/etc/spark/conf",
        ):
            self.path(folder).mkdir(parents=True, exist_ok=True)
        # what is the user's on EMR's image: their home; the rest is root's
        for entry in [self.path("/home/hadoop"), *self.path("/home/hadoop").rglob("*")]:
            os.chown(entry, self.user.pw_uid, self.user.pw_gid)
        reach = subprocess.run(["test", "-w", str(self.path("/home/hadoop"))], **self._as_user(), check=False)
        if reach.returncode != 0:
            raise BootstrapFailed(
                f"the node's folder {self.root} is out of reach of {self.user.pw_name}, who runs the node's scripts "
                f"as EMR's hadoop user: put it under a folder every user can enter"
            )
        self.path("/mnt/var/lib/info/instance.json").write_text(
            json.dumps({"isMaster": True, "instanceGroupId": "ig-primary", "instanceId": self.instance_id})
        )
        python = self._image_python()
        _venv(self.path("/usr/local"), base=python)  # the image's python3.11: `sudo pip install` fills /usr/local
        _venv(self.path("/usr/lib/aws-cli"), AWS_CLI, base=python)
        bin_ = self.bin
        _script(bin_ / "python3.11", f'#!/bin/sh\nexec "{self.path("/usr/local/bin/python3.11")}" "$@"\n')
        _script(bin_ / "aws", f'#!/bin/sh\nexec "{self.path("/usr/lib/aws-cli/bin/aws")}" "$@"\n')
        _script(bin_ / "spark-submit", f'#!/bin/sh\nexec "{self.path("/usr/local/bin/spark-submit")}" "$@"\n')
        self._sudo = _Sudo(self.path("/run/sudo.socket"), self.root / "root", self.env).start()
        _script(bin_ / "sudo", _SUDO_CLIENT.format(python=python, socket=str(self._sudo.path)))
        _script(bin_ / "dnf", "#!/bin/sh\necho 'dnf: no package repository on the node stand-in' >&2\nexit 1\n")
        here = Path(__file__).resolve().parents[1]
        command = f'env PYTHONPATH="{here}" "{sys.executable}" -m infra.localplatform'
        stand_in = f'#!/bin/sh\nexec {command} "$(basename "$0")" "$@"\n'
        _script(bin_ / "systemctl", stand_in)
        _script(self.path(CLOUDWATCH_AGENT_CTL), stand_in)
        for name in ("yarn-site.xml", "core-site.xml"):
            shutil.copy(self.yarn.conf_dir / name, self.path("/etc/hadoop/conf") / name)
        # EMRFS's stand-in: S3A (hadoop-aws and the AWS SDK modules it needs) from the machine's jar cache, where
        # the image keeps EMRFS; the bootstrap installs the rest of the jar set, as on EMR
        from runner.core import jars

        emrfs = self.path(EMRFS_LIB)
        emrfs.mkdir(parents=True, exist_ok=True)
        for jar in jars.locked(jars.SPARK):
            if set(jar.features) == {"s3"}:
                shutil.copy(jars.cache_dir(jars.SPARK) / jar.file, emrfs / jar.file)
        # the endpoint's CA, where the node's programs read it (the machine's copy may be out of their reach)
        ca = self.root / "etc" / "pki" / "local-aws-ca.pem"
        ca.parent.mkdir(parents=True, exist_ok=True)
        if "AWS_CA_BUNDLE" in self.aws_env:
            shutil.copy(self.aws_env["AWS_CA_BUNDLE"], ca)
            ca.chmod(0o644)
            self.aws_env.update(AWS_CA_BUNDLE=str(ca), SSL_CERT_FILE=str(ca))

    # ---- the bootstrap actions -------------------------------------------------------------------------

    def bootstrap(self, emr, s3) -> list[str]:
        """Run the cluster's bootstrap actions in order; their names. The first that fails ends the cluster."""
        cluster = emr.describe_cluster(ClusterId=self.cluster_id)["Cluster"]
        actions = emr.list_bootstrap_actions(ClusterId=self.cluster_id)["BootstrapActions"]
        ran = []
        for number, action in enumerate(actions, start=1):
            bucket, key = _s3_parts(action["ScriptPath"])
            script = self.path(f"/mnt/var/lib/bootstrap-actions/{number}/{Path(key).name}")
            _script(script, self.local(s3.get_object(Bucket=bucket, Key=key)["Body"].read().decode()))
            logs = self.path(f"/mnt/var/log/bootstrap-actions/{number}")
            logs.mkdir(parents=True, exist_ok=True)
            with open(logs / "stdout", "wb") as out, open(logs / "stderr", "wb") as err:
                process = self._spawn(["bash", str(script), *action.get("Args", [])], stdout=out, stderr=err)
                try:
                    code = process.wait(timeout=900)
                except subprocess.TimeoutExpired:
                    process.kill()
                    code = process.wait()
            self._ship(s3, cluster, f"node/{self.instance_id}/bootstrap-actions/{number}", logs)
            if code != 0:
                reason = (
                    f"On the master instance ({self.instance_id}), bootstrap action {number} returned a non-zero "
                    f"return code"
                )
                self._terminate(reason)
                tail = (logs / "stderr").read_text(errors="replace").strip().splitlines()[-3:]
                raise BootstrapFailed(f"{reason} ({action['Name']}): {' / '.join(tail)}")
            ran.append(action["Name"])
        self._configure(cluster)
        return ran

    def _ship(self, s3, cluster: dict, prefix: str, folder: Path) -> None:
        """A folder of logs to the cluster's log URI, gzipped, as EMR ships them."""
        bucket, key = _s3_parts(cluster["LogUri"])
        for log in sorted(folder.iterdir()):
            body = gzip.compress(log.read_bytes())
            s3.put_object(Bucket=bucket, Key=f"{key}{self.cluster_id}/{prefix}/{log.name}.gz", Body=body)

    def _terminate(self, reason: str) -> None:
        cluster = _moto_cluster(self.cluster_id)
        cluster.state = "TERMINATED_WITH_ERRORS"
        cluster.last_state_change_reason = reason
        cluster.end_datetime = datetime.now(UTC)

    def _configure(self, cluster: dict) -> None:
        """Spark's defaults on the node: the local YARN's, S3 through S3A, the cluster's applied
        ``spark-defaults`` configuration read on the node, the CA and the credentials for the containers."""
        from runner.core import platform

        applied = {}
        for configuration in cluster.get("Configurations", []):
            if configuration["Classification"] == "spark-defaults":
                applied.update(configuration.get("Properties", {}))
            if configuration["Classification"] == "yarn-site":
                attempts = configuration["Properties"].get("yarn.resourcemanager.am.max-attempts")
                if attempts and int(attempts) != self.yarn.max_attempts:
                    raise BootstrapFailed(f"the cluster asks {attempts} AM attempts, the local YARN gives another")
        from infra.stack import MSK_IAM_CLIENT

        # the broker standing for MSK speaks plain Kafka: MSK's IAM client settings are left out
        applied = {k: v for k, v in applied.items() if not k.endswith(tuple(MSK_IAM_CLIENT))}
        store = self.root / "etc" / "pki" / "local-aws.p12"
        store.parent.mkdir(parents=True, exist_ok=True)
        store.unlink(missing_ok=True)
        subprocess.run(
            ["keytool", "-importcert", "-noprompt", "-alias", "local-aws", "-file", self.aws_env["AWS_CA_BUNDLE"]]
            + ["-keystore", str(store), "-storetype", "PKCS12", "-storepass", "changeit"],
            check=True,
            capture_output=True,
            timeout=60,
        )
        trust = f"-Djavax.net.ssl.trustStore={store} -Djavax.net.ssl.trustStorePassword=changeit"
        defaults = self.yarn.spark_defaults()
        jars = self.path("/usr/lib/sql-runner/jars")
        spark_jars = next(self.path("/usr/local/lib").glob("python3.11/site-packages/pyspark/jars"))
        defaults.update(
            {
                "spark.yarn.jars": f"local:{spark_jars}/*",
                **dict.fromkeys(platform.CLASSPATHS, f"{jars}/*:{self.path(EMRFS_LIB)}/*"),
                **platform.s3a_properties(self.aws_env),
                **{key: self.local(value) for key, value in applied.items()},
                "spark.pyspark.driver.python": str(self.path("/usr/bin/python3.11")),
                # what the node's user submits is staged in their home (EMR: theirs on HDFS)
                "spark.yarn.stagingDir": self.path("/home/hadoop/.staging").as_uri(),
            }
        )
        for side in ("driver", "executor"):
            defaults[f"spark.{side}.defaultJavaOptions"] = f"{defaults[f'spark.{side}.defaultJavaOptions']} {trust}"
        for name, value in {**self.aws_env, "AWS_REGION": self.region}.items():
            defaults[f"spark.yarn.appMasterEnv.{name}"] = value
            defaults[f"spark.executorEnv.{name}"] = value
        defaults.pop("spark.jars", None)  # the jar set is on the class path above, as a folder
        (self.path("/etc/spark/conf") / "spark-defaults.conf").write_text(
            "".join(f"{key} {value}\n" for key, value in defaults.items())
        )
        shutil.copy(self.path("/etc/hadoop/conf") / "yarn-site.xml", self.path("/etc/spark/conf") / "yarn-site.xml")
        shutil.copy(self.path("/etc/hadoop/conf") / "core-site.xml", self.path("/etc/spark/conf") / "core-site.xml")

    def run(self, argv: list[str], **options) -> subprocess.Popen:
        """A command on the node as its user, its EMR paths read under the folder."""
        return self._spawn([self.local(arg) for arg in argv], **options)

    def stop_services(self) -> None:
        """End what ``systemctl`` started on the node, and what ``sudo`` runs."""
        for pid_file in self.path("/run").glob("*.pid"):
            _end_unit(pid_file)
        if self._sudo is not None:
            self._sudo.stop()


# ---- sudo on the node -------------------------------------------------------------------------------------

_SUDO_CLIENT = """#!{python}
# sudo on the EMR primary node's stand-in (infra/localplatform.py): the node runs the command as root, with
# root's environment on the node, and this ends with its exit code
import json, os, socket, sys

if len(sys.argv) < 2 or sys.argv[1].startswith("-"):
    print("usage: sudo command [argument ...] (the node stand-in's sudo takes no options)", file=sys.stderr)
    sys.exit(1)
with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as node:
    node.connect({socket!r})
    request = json.dumps({{"argv": sys.argv[1:], "cwd": os.getcwd()}}).encode() + b"\\n"
    socket.send_fds(node, [request], [0, 1, 2])
    answer = node.makefile().readline()
sys.exit(int(answer) if answer.strip() else 1)
"""


class _Sudo:
    """``sudo`` on the node: a Unix socket in the node's ``/run`` through which the node's processes (those it
    launched, and theirs: checked by the caller's parent processes, not by who may open the socket) have a
    command run as this machine's user, which is root where the node's user is ``nobody``. The command gets the
    caller's standard streams and working folder, and root's environment on the node (its home, the node's
    PATH, the endpoint and the instance profile's stand-in), as sudo's ``env_reset`` gives it."""

    def __init__(self, path: Path, home: Path, env: Callable[[], dict[str, str]]):
        self.path, self.home, self.env = path, home, env
        self.launched: set[int] = set()
        self.children: set[subprocess.Popen] = set()
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)

    def start(self) -> _Sudo:
        self.home.mkdir(mode=0o700, exist_ok=True)
        self.path.unlink(missing_ok=True)
        self.server.bind(str(self.path))
        self.path.chmod(0o666)  # anyone may connect; only the node's processes are served (_served)
        self.server.listen(16)
        threading.Thread(target=self._accept, name="node-sudo", daemon=True).start()
        return self

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self.server.shutdown(socket.SHUT_RDWR)
        self.server.close()
        for child in list(self.children):
            with contextlib.suppress(ProcessLookupError):
                child.terminate()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self.server.accept()
            except OSError:  # stopped
                return
            threading.Thread(target=self._serve, args=(connection,), daemon=True).start()

    def _served(self, pid: int) -> bool:
        """Whether ``pid`` is one of the node's processes: one it launched, or a descendant of one."""
        while pid > 1:
            if pid in self.launched:
                return True
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()
            except OSError:
                return False
            pid = int(stat.rsplit(")", 1)[1].split()[1])  # the parent's, after the command's name
        return False

    def _serve(self, connection: socket.socket) -> None:
        with connection:
            credentials = connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            pid, uid, _ = struct.unpack("3i", credentials)
            message, fds, _, _ = socket.recv_fds(connection, 1 << 16, 3)
            code = 1  # what a request that cannot be read gets
            try:
                while message and not message.endswith(b"\n"):
                    more = connection.recv(1 << 16)
                    if not more:
                        break
                    message += more
                code = self._run(message, fds, allowed=uid == os.geteuid() or self._served(pid))
            finally:
                for fd in fds:
                    os.close(fd)
            with contextlib.suppress(OSError):
                connection.sendall(f"{code}\n".encode())

    def _run(self, message: bytes, fds: list[int], allowed: bool) -> int:
        if len(fds) != 3 or not message.endswith(b"\n"):
            return 1
        if not allowed:
            os.write(fds[2], b"sudo: refused: not a process of the node\n")
            return 1
        try:
            request = json.loads(message)
        except ValueError:
            os.write(fds[2], b"sudo: the node stand-in could not read the request\n")
            return 1
        me = pwd.getpwuid(os.geteuid()).pw_name
        env = {**self.env(), "HOME": str(self.home), "USER": me, "LOGNAME": me}
        try:
            child = subprocess.Popen(
                request["argv"], stdin=fds[0], stdout=fds[1], stderr=fds[2], cwd=request["cwd"], env=env
            )
        except OSError as error:  # as sudo says it
            said = "command not found" if isinstance(error, FileNotFoundError) else error.strerror or str(error)
            os.write(fds[2], f"sudo: {request['argv'][0]}: {said}\n".encode())
            return 1
        self.children.add(child)
        try:
            return child.wait()
        finally:
            self.children.discard(child)


# ---- systemd and the CloudWatch agent on the node ---------------------------------------------------------


def systemctl(args: list[str]) -> int:
    """``systemctl`` on the node (see the module's docstring), run by the node's ``systemctl`` script."""
    root = Path(os.environ["SQL_RUNNER_NODE"])
    if args[:1] == ["daemon-reload"]:
        return 0
    if args[:1] == ["stop"]:
        _end_unit(root / "run" / f"{args[1]}.pid")
        return 0
    if args[:2] != ["enable", "--now"] or len(args) != 3:
        print(f"systemctl on the node stand-in: {' '.join(args)} is not one it runs", file=sys.stderr)
        return 1
    unit = args[2]
    lines = (root / "etc" / "systemd" / "system" / unit).read_text().splitlines()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    for line in lines:
        if line.startswith("ExecStartPre="):
            done = subprocess.run(shlex.split(_on_node(line.removeprefix("ExecStartPre="))), env=env, check=False)
            if done.returncode != 0:
                print(f"{unit}: ExecStartPre failed (exit {done.returncode})", file=sys.stderr)
                return 1
    start = next(line.removeprefix("ExecStart=") for line in lines if line.startswith("ExecStart="))
    log = root / "var" / "log" / f"{unit}.log"
    with open(log, "ab") as out:
        process = subprocess.Popen(
            shlex.split(_on_node(start)), env=env, stdout=out, stderr=out, start_new_session=True
        )
    (root / "run" / f"{unit}.pid").write_text(str(process.pid))
    return 0


def _end_unit(pid_file: Path) -> None:
    """End the unit whose process group ``pid_file`` names, if it runs."""
    if pid_file.exists():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.killpg(int(pid_file.read_text()), signal.SIGTERM)
        pid_file.unlink()


def cloudwatch_agent_ctl(args: list[str]) -> int:
    """The CloudWatch agent's control command on the node: the configuration it is given must parse and the
    Prometheus scrape file it names must exist and parse; nothing is run or sent (CloudWatch is not here)."""
    import yaml

    root = Path(os.environ["SQL_RUNNER_NODE"])
    given = args[args.index("-c") + 1].removeprefix("file:")
    config = json.loads(Path(given).read_text())
    prometheus = config["logs"]["metrics_collected"]["prometheus"]["prometheus_config_path"]
    scrape = yaml.safe_load(Path(_on_node(prometheus)).read_text())
    if not (scrape or {}).get("scrape_configs"):
        print(f"amazon-cloudwatch-agent-ctl: no scrape configuration in {prometheus}", file=sys.stderr)
        return 1
    (root / "var" / "log" / "amazon-cloudwatch-agent.configured").write_text(json.dumps(config))
    return 0


def node_text(root: Path, resource_manager: str, text: str) -> str:
    """``text`` as the node at ``root`` reads it: its EMR paths under the folder, and the primary node's
    ResourceManager (``http://localhost:8088``) at ``resource_manager``."""
    text = _NODE_PATH.sub(lambda found: f"{root}{found.group(1)}", text)
    return text.replace(EMR_RESOURCE_MANAGER, resource_manager)


def _on_node(text: str) -> str:
    """``text`` as the node this stand-in command runs on reads it."""
    return node_text(Path(os.environ["SQL_RUNNER_NODE"]), os.environ["SQL_RUNNER_NODE_RESOURCE_MANAGER"], text)


# ---- EMR's step runner --------------------------------------------------------------------------------------


class StepRunner:
    """EMR's step runner for the node's cluster (see the module's docstring)."""

    def __init__(self, node: PrimaryNode, emr, s3, poll: float = 1.0):
        self.node, self.emr, self.s3, self.poll = node, emr, s3, poll
        cluster = emr.describe_cluster(ClusterId=node.cluster_id)["Cluster"]
        self.cluster = cluster
        self.concurrency = cluster.get("StepConcurrencyLevel", 1)
        self.seen: set[str] = set()
        self.running: dict[str, subprocess.Popen] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="emr-steps", daemon=True)
        self._lock = threading.Lock()

    def start(self) -> StepRunner:
        _ending[self.node.cluster_id] = self._terminated
        _end_through_stand_ins()
        self._thread.start()
        return self

    def stop(self) -> None:
        _ending.pop(self.node.cluster_id, None)
        self._stop.set()
        self._thread.join(timeout=30)
        self._end_steps()

    def _end_steps(self) -> None:
        with self._lock:
            for process in list(self.running.values()):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGTERM)

    def _loop(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(Exception):  # the endpoint going away at the end
                steps = self.emr.list_steps(ClusterId=self.node.cluster_id)["Steps"]
                for step in sorted(steps, key=lambda s: s["Status"]["Timeline"]["CreationDateTime"]):
                    if step["Id"] in self.seen or not self._waiting(step):
                        continue
                    with self._lock:
                        if len(self.running) >= self.concurrency:
                            break
                        self.seen.add(step["Id"])
                        self._set(step["Id"], "PENDING")
                        threading.Thread(target=self._run, args=(step,), daemon=True).start()
            self._stop.wait(self.poll)

    def _terminated(self) -> None:
        """The cluster is terminating: what ran on it ends, as with EMR's instances (its steps, the node's
        services, every application of the YARN standing for it)."""
        self._stop.set()
        self._end_steps()
        self.node.stop_services()
        yarn = self.node.yarn
        killed = [app["id"] for app in yarn.active_apps()]
        for app in killed:
            yarn.kill(app)
        # ended when the steps' logs are shipped and no driver of the cluster runs any more, as an instance is gone
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and (
            self.running or yarn.active_apps() or any(yarn.driver_pid(app) for app in killed)
        ):
            time.sleep(0.5)

    def _waiting(self, step: dict) -> bool:
        """Whether ``step`` is still to run: moto marks a cluster's first step RUNNING when it is created (and a
        step added to a cluster without steps), the others PENDING, and runs none of them."""
        state = step["Status"]["State"]
        if state == "PENDING":
            return True
        held = next(s for s in _moto_cluster(self.node.cluster_id).steps if s.id == step["Id"])
        return state == "RUNNING" and not getattr(held, "run_by_stand_in", False)

    def _set(self, step_id: str, state: str, reason: str | None = None) -> None:
        step = next(s for s in _moto_cluster(self.node.cluster_id).steps if s.id == step_id)
        now = datetime.now(UTC)
        step.state = state
        step.run_by_stand_in = True
        if state == "RUNNING":
            step.start_date_time = step.ready_date_time = now
        if state in ("COMPLETED", "FAILED", "CANCELLED"):
            step.end_date_time = now
        if reason:
            step.last_state_change_reason = reason

    def _run(self, step: dict) -> None:
        config = step["Config"]
        folder = self.node.path(f"/mnt/var/log/hadoop/steps/{step['Id']}")
        folder.mkdir(parents=True, exist_ok=True)
        if not config["Jar"].endswith(STEP_JAR):
            (folder / "stderr").write_text(f"only {STEP_JAR} steps run on the node stand-in, not {config['Jar']}\n")
            self._finish(step, folder, 1)
            return
        with open(folder / "stdout", "wb") as out, open(folder / "stderr", "wb") as err:
            with self._lock:
                self._set(step["Id"], "RUNNING")
                process = self.node.run(config["Args"], stdout=out, stderr=err, start_new_session=True)
                self.running[step["Id"]] = process
            code = process.wait()
        self._finish(step, folder, code)

    def _finish(self, step: dict, folder: Path, code: int) -> None:
        state = "COMPLETED" if code == 0 else "FAILED"
        reason = None if code == 0 else f"Step failed with exitCode {code}"
        with contextlib.suppress(Exception):
            self.node._ship(self.s3, self.cluster, f"steps/{step['Id']}", folder)
        with self._lock:
            self._set(step["Id"], state, reason)
            self.running.pop(step["Id"], None)

    def wait_idle(self, timeout: float) -> list[tuple[str, str]]:
        """Wait until every step added so far has ended; each step's name and state, newest first (names repeat:
        a cluster's first steps added again, two pushes of one manifest)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            steps = self.emr.list_steps(ClusterId=self.node.cluster_id)["Steps"]  # newest first
            if all(s["Status"]["State"] in ("COMPLETED", "FAILED", "CANCELLED") for s in steps):
                return [(s["Name"], s["Status"]["State"]) for s in steps]
            time.sleep(0.5)
        raise TimeoutError(f"steps still running after {timeout:.0f}s: {sorted(self.running)}")


_ending: dict[str, Callable[[], None]] = {}  # what ends the clusters the stand-ins run, by cluster ID


def _end_through_stand_ins() -> None:
    """moto 5.2.5 ends a cluster at once (``TERMINATED``), where EMR goes ``TERMINATING`` until its instances
    are gone: a cluster the stand-ins run (:data:`_ending`) is ``TERMINATING`` until what ran on it has ended."""
    from moto.emr.models import Cluster

    if getattr(Cluster.terminate, "through_stand_ins", False):
        return
    terminate = Cluster.terminate

    def terminating(cluster) -> None:
        end = _ending.pop(cluster.id, None)
        if end is None:
            terminate(cluster)
            return
        cluster.state = "TERMINATING"

        def ended() -> None:
            try:
                end()
            finally:
                terminate(cluster)

        threading.Thread(target=ended, name=f"terminating-{cluster.id}", daemon=True).start()

    terminating.through_stand_ins = True
    Cluster.terminate = terminating


# ---- Lambda's runtime ----------------------------------------------------------------------------------------


@dataclass
class Invocation:
    function: str
    event: dict
    attempts: int = 0
    outcome: str = ""
    output: str = ""


@dataclass
class DeployLambda:
    """Lambda's runtime for the functions S3 notifies (see the module's docstring)."""

    folder: Path
    aws_env: dict[str, str]
    retries: int = 2  # Lambda retries a failed asynchronous invocation twice
    invocations: list[Invocation] = field(default_factory=list)

    def __post_init__(self):
        self._pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix="lambda")
        self._slots: dict[str, threading.BoundedSemaphore] = {}
        self._lock = threading.Lock()
        self._patched: list[tuple[object, str, Callable]] = []
        self._pending: list = []
        self.python: Path | None = None

    def start(self) -> DeployLambda:
        from moto.s3 import notifications

        self.python = _venv(self.folder / "runtime", LAMBDA_RUNTIME)
        original_event = notifications._get_s3_event

        def event_of(event_name, bucket, key, notification_id):
            # moto 5.2.5's records lack the object's versionId and sequencer, which S3 sends for a versioned bucket,
            # and encode a key's slashes, which S3 keeps
            event = original_event(event_name, bucket, key, notification_id)
            obj = event["Records"][0]["s3"]["object"]
            obj["key"] = quote_plus(key.name, safe="/")
            if getattr(key, "version_id", None) and key.version_id != "null":
                obj["versionId"] = key.version_id
            obj["sequencer"] = f"{time.time_ns():020X}"
            return event

        self._patch(notifications, "_get_s3_event", event_of)
        self._patch(notifications, "_invoke_awslambda", self._deliver)
        return self

    def _patch(self, module, name: str, value: Callable) -> None:
        self._patched.append((module, name, getattr(module, name)))
        setattr(module, name, value)

    def stop(self) -> None:
        for module, name, value in reversed(self._patched):
            setattr(module, name, value)
        self._patched.clear()
        self._pool.shutdown(wait=True, cancel_futures=False)

    def _deliver(self, account_id: str, event_body: dict, fn_arn: str, region: str) -> None:
        invocation = Invocation(fn_arn.split(":")[-1], event_body)
        with self._lock:
            self.invocations.append(invocation)
            self._pending.append(self._pool.submit(self._invoke, invocation, account_id, fn_arn, region))

    def wait_idle(self, timeout: float) -> list[Invocation]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                pending = [f for f in self._pending if not f.done()]
            if not pending:
                return list(self.invocations)
            time.sleep(0.2)
        raise TimeoutError("Lambda invocations still running")

    def _invoke(self, invocation: Invocation, account_id: str, fn_arn: str, region: str) -> None:
        from moto.awslambda.utils import get_backend

        function = get_backend(account_id, region).get_function(fn_arn)
        config = function.get_configuration()
        with self._lock:
            slots = self._slots.setdefault(
                function.function_name, threading.BoundedSemaphore(function.reserved_concurrency or 10)
            )
        code = self.folder / "functions" / function.function_name / hashlib.sha256(function.code_bytes).hexdigest()
        if not code.is_dir():
            unpacking = code.with_name(f"{code.name}.{uuid.uuid4().hex}")
            zipfile.ZipFile(io.BytesIO(function.code_bytes)).extractall(unpacking)
            with contextlib.suppress(OSError):
                unpacking.rename(code)
        module, _, name = config["Handler"].rpartition(".")
        env = {
            **{k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "TZ")},
            **config.get("Environment", {}).get("Variables", {}),
            **{k: v for k, v in self.aws_env.items() if k.startswith("AWS_")},
            **CREDENTIALS,  # the execution role's stand-in
            "AWS_REGION": region,
            "AWS_DEFAULT_REGION": region,
            "AWS_LAMBDA_FUNCTION_NAME": function.function_name,
            "LAMBDA_TASK_ROOT": str(code),
            "PYTHONPATH": str(code),
        }
        runner = f"import json,sys,{module} as m; print(json.dumps(m.{name}(json.load(sys.stdin), None)))"
        for attempt in range(1 + self.retries):
            invocation.attempts = attempt + 1
            with slots:
                try:
                    done = subprocess.run(
                        [str(self.python), "-c", runner],
                        input=json.dumps(invocation.event),
                        env=env,
                        cwd=code,
                        capture_output=True,
                        text=True,
                        timeout=config.get("Timeout", 3),
                        check=False,
                    )
                except subprocess.TimeoutExpired:  # Lambda ends it and counts it as failed
                    message = f"Task timed out after {config.get('Timeout', 3)} seconds"
                    done = subprocess.CompletedProcess(runner, 1, "", message)
            self._log(function.function_name, region, invocation, done)
            if done.returncode == 0:
                invocation.outcome, invocation.output = "ok", done.stdout
                return
        invocation.outcome, invocation.output = "dead-letter", done.stderr
        target = config.get("DeadLetterConfig", {}).get("TargetArn")
        if target:
            sqs = endpoint_client(self.aws_env, "sqs", region)
            url = sqs.get_queue_url(QueueName=target.split(":")[-1])["QueueUrl"]
            error = (done.stderr.strip().splitlines() or ["failed"])[-1]
            sqs.send_message(
                QueueUrl=url,
                MessageBody=json.dumps(invocation.event),
                MessageAttributes={
                    "RequestID": {"DataType": "String", "StringValue": str(uuid.uuid4())},
                    "ErrorCode": {"DataType": "Number", "StringValue": "200"},
                    "ErrorMessage": {"DataType": "String", "StringValue": error[:256]},
                },
            )

    def _log(self, function: str, region: str, invocation: Invocation, done) -> None:
        """The invocation's output to the function's log group, as Lambda's runtime sends it."""
        logs = endpoint_client(self.aws_env, "logs", region)
        stream = f"{datetime.now(UTC):%Y/%m/%d}/[$LATEST]{uuid.uuid4().hex}"
        with contextlib.suppress(Exception):
            logs.create_log_stream(logGroupName=f"/aws/lambda/{function}", logStreamName=stream)
            now = int(time.time() * 1000)
            lines = [f"attempt {invocation.attempts}: exit {done.returncode}"]
            lines += (done.stdout + done.stderr).strip().splitlines()[-50:]
            logs.put_log_events(
                logGroupName=f"/aws/lambda/{function}",
                logStreamName=stream,
                logEvents=[{"timestamp": now, "message": line} for line in lines],
            )


def main(argv: list[str]) -> int:
    """The node's ``systemctl`` and CloudWatch agent control command, run by their scripts on the node."""
    command, args = argv[0], argv[1:]
    if command == "systemctl":
        return systemctl(args)
    if command == Path(CLOUDWATCH_AGENT_CTL).name:
        return cloudwatch_agent_ctl(args)
    print(f"not a command of the node stand-in: {command}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
