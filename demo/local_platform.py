"""The team's whole platform on this machine until Ctrl-C (``make local-platform TEAM=<name>``, docs/aws.md).

    python -m demo.local_platform --team payments [--folder .local-platform] [--teams infra/teams.yaml]

A Kafka broker standing for MSK and a YARN cluster standing for the team's EMR cluster (the demo's own,
demo/kafka_broker.py and demo/yarn_cluster.py), the local AWS endpoint (infra/localaws.py), then the real
``make package`` and ``make deploy-infra``, the primary node's bootstrap, the cluster's first steps and the
deploy Lambda's runtime (infra/localplatform.py). Query authors then push manifests with the environment it
writes to ``<folder>/env.sh``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

from demo.kafka_broker import KafkaBroker
from demo.yarn_cluster import YarnCluster
from infra.localaws import PROVIDER_MIRROR, LocalAws, endpoint_client, provide_prerequisites, provider_mirror_config
from infra.localplatform import DeployLambda, PrimaryNode, StepRunner
from infra.teams import TEAMS_FILE, load_teams

ROOT = Path(__file__).resolve().parents[1]


def up(team_name: str, folder: Path, teams_file: Path) -> int:
    """``make local-platform``: the team's whole platform on this machine until Ctrl-C (docs/aws.md)."""
    teams = load_teams(teams_file)
    team = teams.team(team_name)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    broker = KafkaBroker(folder / "kafka").start()
    yarn = YarnCluster(folder=folder / "yarn").start()
    aws = LocalAws(folder / "aws", kafka_bootstrap=broker.bootstrap).start()
    node = lambda_ = steps = None
    try:
        provide_prerequisites(aws, teams)
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("AWS_")}, **aws.env(team.region)}
        configured = env.get("TF_CLI_CONFIG_FILE")
        if not (configured and Path(configured).is_file()) and PROVIDER_MIRROR.is_dir():  # no registry reached here
            env["TF_CLI_CONFIG_FILE"] = str(provider_mirror_config(folder / "terraform.rc"))
        deploy = ["infra.terraform", "deploy", "--team", team.name, "--auto-approve", "--teams", str(teams_file)]
        for command in (["infra.package", "all"], deploy):  # make package, make deploy-infra TEAM=<name>
            print(f"+ python -m {' '.join(command)}", flush=True)
            subprocess.run([sys.executable, "-m", *command], cwd=ROOT, env=env, check=True)
        emr, s3 = endpoint_client(env, "emr", team.region), endpoint_client(env, "s3", team.region)
        cluster = next(
            c["Id"]
            for c in emr.list_clusters()["Clusters"]
            if c["Status"]["State"] not in ("TERMINATED", "TERMINATED_WITH_ERRORS")
        )
        node = PrimaryNode(folder / "node", aws.env(team.region), yarn, cluster, team.region)
        node.provision()
        for name in node.bootstrap(emr, s3):
            print(f"bootstrap action done: {name}", flush=True)
        lambda_ = DeployLambda(folder / "lambda", aws.env(team.region)).start()
        steps = StepRunner(node, emr, s3).start()
        for name, state in reversed(steps.wait_idle(900)):
            print(f"step {state}: {name}", flush=True)
        exports = "".join(f"export {key}={shlex.quote(value)}\n" for key, value in aws.env(team.region).items())
        (folder / "env.sh").write_text(exports)
        manifests = team.bucket("manifests", teams.platform.environment)
        print(
            f"team {team.name} is up: push manifests to s3://{manifests}/manifests/ with the environment in "
            f"{folder / 'env.sh'}; the console: http://127.0.0.1:8099/ (a token: the node's "
            f"{node.path('/etc/sql-runner/token.args')} with another --token-name); Ctrl-C ends it",
            flush=True,
        )
        stopped = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stopped.set())
        with contextlib.suppress(KeyboardInterrupt):
            stopped.wait()
    finally:
        for part in (steps, lambda_):
            if part is not None:
                part.stop()
        if node is not None:
            node.stop_services()
        aws.stop()
        yarn.stop()
        broker.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m demo.local_platform", description=__doc__.splitlines()[0])
    parser.add_argument("--team", required=True)
    parser.add_argument("--folder", type=Path, default=Path(".local-platform"))
    parser.add_argument("--teams", type=Path, default=TEAMS_FILE)
    args = parser.parse_args(argv)
    return up(args.team, args.folder.resolve(), args.teams)


if __name__ == "__main__":
    sys.exit(main())
