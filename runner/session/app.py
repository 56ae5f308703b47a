"""``spark-submit`` entry point of a team's session application.

    spark-submit ... runner/session/app.py --config-uri <manifests>/session/runs/<run-id>.json

The configuration says where state lives, where the desired manifests are (a project
folder, or the manifests bucket), where application-mode jobs run (so a query can move
between the modes) and how the session protects its queries. It holds no secrets: table
placeholders are resolved in the session, from its own environment and the SSM parameters and
secrets they name.

SIGTERM or ``session/stop.json`` stops every query between micro-batches with a
savepoint, then the application ends.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from pathlib import Path

if __package__ in (None, ""):
    # spark-submit runs this file as a script; make the project's packages importable.
    sys.path.append(str(Path(__file__).resolve().parents[2]))

from jobs.pythonpath import installed_pyspark_first  # noqa: E402

installed_pyspark_first()  # before pyspark is imported

from pyspark import SparkConf  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402

from jobs import localfs  # noqa: E402
from jobs.jvm import check_spark_version  # noqa: E402
from jobs.logs import quiet_python_logs  # noqa: E402
from runner.authoring.project import Project  # noqa: E402
from runner.console import previews  # noqa: E402
from runner.console.app import Console, session_log  # noqa: E402
from runner.console.previews import PreviewRun  # noqa: E402
from runner.core import logs  # noqa: E402
from runner.core.bucket import bucket_from, read_uri  # noqa: E402
from runner.core.errors import UserError  # noqa: E402
from runner.core.protocol.console import scrub  # noqa: E402
from runner.core.protocol.preview import PreviewRequest  # noqa: E402
from runner.core.protocol.session_config import SessionConfig  # noqa: E402
from runner.deploy.deployer import Deployer  # noqa: E402
from runner.deploy.settings import Settings  # noqa: E402
from runner.session.endpoint import ControlEndpoint  # noqa: E402
from runner.session.host import QueryHost  # noqa: E402
from runner.session.loop import Session  # noqa: E402
from runner.session.warmup import warm  # noqa: E402
from runner.state.desired import Desired  # noqa: E402
from runner.state.store import Store  # noqa: E402
from runner.targets import open_target  # noqa: E402
from runner.targets.modes import Targets  # noqa: E402

log = logging.getLogger("runner.session.app")  # also when spark-submit runs this file as __main__


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="runner/session/app.py", description=__doc__)
    parser.add_argument("--config-uri", required=True, help="where the run's configuration is (a local path or s3://)")
    config = SessionConfig.decode(read_uri(parser.parse_args(argv).config_uri))
    logs.configure("session")  # a line about one query says which (name and version) instead
    try:
        check_spark_version()
    except UserError as error:
        log.error(error.problems[0].render())
        return 2
    quiet_python_logs()
    builder = SparkSession.builder
    # on YARN the file I/O settings are not on the command line (jobs/localfs.py)
    checkpoints = bucket_from(config.store["checkpoints"]).uri("checkpoints/")
    for key, value in localfs.missing_from(SparkConf(), checkpoints).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    analysis = spark.newSession()  # validate and compare queries away from the hosted ones' settings
    store = Store(*(bucket_from(config.store[role]) for role in ("manifests", "checkpoints", "savepoints")))
    application = open_target(
        config.application.kind,
        records=store.manifests,
        log_dir=Path(config.application.log_dir),
        master=config.application.master,
        master_web_ui=config.application.master_web_ui,
        resource_manager=config.application.resource_manager,
    )
    host = QueryHost(spark, config.run_id, config.protection)
    settings = Settings(
        store,
        Targets(application, host),
        config.team,
        dict(os.environ),
        config.stop_timeout,
        placeholders=config.placeholders,
    )
    env = settings.values  # what the hosted queries' placeholders resolve to
    me = f"session:{config.team}:{config.run_id}"
    deployer = Deployer(
        None,
        settings,
        spark=lambda: analysis,
        lease_holder=me,
        # Only one session per team runs: a lease another session run left behind is a killed one's.
        dead_holder=lambda owner: owner.startswith(f"session:{config.team}:") and owner != me,
    )
    desired = (
        Desired(folder=Path(config.project))
        if config.project
        else Desired(bucket=bucket_from(config.store["manifests"]))
    )
    session = Session(deployer, host, desired, team=config.team, run_id=config.run_id, poll=config.poll, env=env)

    console_analysis = spark.newSession()  # the console analyses on threads of its own: its own temp views

    def console_deployer(project: Project | None, requested_by: str | None) -> Deployer:
        """A deployer for the console's verdicts and actions, as the session's own deploys are made."""
        return Deployer(
            project,
            settings,
            spark=lambda: console_analysis,
            lease_holder=me,
            dead_holder=lambda owner: owner.startswith(f"session:{config.team}:") and owner != me,
            requested_by=requested_by,
        )

    def console_preview(request: PreviewRequest, run: PreviewRun) -> None:
        run.answered_by = f"session {config.run_id}"
        previews.answer(spark, request, env=env, build_timeout=config.protection.build_timeout, emit=run.take)

    scrub(store.manifests)  # an earlier release's access file held the console tokens themselves
    console = Console(
        store,
        Targets(application, host),
        config.team,
        # a copy of its own: the session's is brought up to date by the session's loop only
        desired=Desired(folder=Path(config.project)) if config.project else Desired(bucket=desired.bucket),
        deployer=console_deployer,
        preview=console_preview,
        allow_actions=config.console_actions,
        session_log=session_log(application, config.team),
        served_by=f"session {config.run_id}",
    )
    endpoint = ControlEndpoint(
        spark,
        store.manifests,
        run_id=config.run_id,
        address=config.control_address,
        port=config.control_port,
        env=env,
        build_timeout=config.protection.build_timeout,
        console=console,
    )
    session.health.control_url = endpoint.url
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        log.info(f"received signal {signum}: stopping every query with a savepoint")
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    # before it says it is up: its first query then takes effect as fast as the later ones
    log.info(f"warmed up in {warm(spark, analysis, env):.1f} s")
    log.info(f"session {config.run_id} of team {config.team} up; watching {desired.describe()}")
    endpoint.start()
    try:
        session.run(stop.is_set)
    finally:
        endpoint.stop()
        spark.stop()
    log.info("session stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
