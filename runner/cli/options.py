"""Options shared by several commands, each defined once; they stack as decorators.

Where state lives: ``--state PATH`` (default ``.sql-runner/`` in the project) for every
bucket not named with ``--manifests-bucket`` / ``--checkpoints-bucket`` /
``--savepoints-bucket`` (S3; the endpoint comes from boto3's settings, e.g.
``AWS_ENDPOINT_URL``). Where jobs run: ``--target local|standalone|yarn``. Every one of
these can also come from its ``SQL_RUNNER_*`` environment variable.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

project = click.option(
    "--project", type=click.Path(path_type=Path), help="Project folder (holds manifests/); default: found from here up."
)
state = click.option(
    "--state",
    type=click.Path(path_type=Path),
    envvar="SQL_RUNNER_STATE",
    help="Local state folder; default: .sql-runner/ in the project.",
)
manifests_bucket = click.option(
    "--manifests-bucket",
    envvar="SQL_RUNNER_MANIFESTS_BUCKET",
    help="S3 bucket for manifests, deployed records, history.",
)
checkpoints_bucket = click.option(
    "--checkpoints-bucket", envvar="SQL_RUNNER_CHECKPOINTS_BUCKET", help="S3 bucket for checkpoints."
)
savepoints_bucket = click.option(
    "--savepoints-bucket", envvar="SQL_RUNNER_SAVEPOINTS_BUCKET", help="S3 bucket for savepoints."
)
target = click.option(
    "--target",
    default="local",
    show_default=True,
    envvar="SQL_RUNNER_TARGET",
    help="Where jobs run: local, standalone or yarn.",
)
master = click.option(
    "--master", envvar="SQL_RUNNER_MASTER", help="Standalone master URL, e.g. spark://127.0.0.1:7077."
)
master_web_ui = click.option(
    "--master-web-ui", envvar="SQL_RUNNER_MASTER_WEB_UI", help="Standalone master's web UI; default http://<host>:8080."
)
resource_manager = click.option(
    "--resource-manager",
    envvar="SQL_RUNNER_RESOURCE_MANAGER",
    help="YARN ResourceManager URL, e.g. http://master:8088.",
)
team = click.option(
    "--team", default="local", show_default=True, envvar="SQL_RUNNER_TEAM", help="Team the jobs belong to."
)
stop_timeout = click.option(
    "--stop-timeout",
    type=click.FloatRange(min=1),
    default=90.0,
    show_default=True,
    envvar="SQL_RUNNER_STOP_TIMEOUT",
    help="Seconds to wait for a stop at a batch boundary.",
)
spark_submit = click.option(
    "--spark-submit",
    envvar="SQL_RUNNER_SPARK_SUBMIT",
    help="The spark-submit to run (e.g. EMR's /usr/bin/spark-submit); default: the installed pyspark's.",
)
parameters_prefix = click.option(
    "--parameters-prefix",
    envvar="SQL_RUNNER_PARAMETERS_PREFIX",
    help="SSM parameter path prefix: a ${NAME} placeholder not in the environment is the parameter <prefix>NAME "
    "(on EMR: /sql-runner-<environment>-<team>/).",
)
aws_region = click.option(
    "--aws-region",
    envvar=["SQL_RUNNER_AWS_REGION", "AWS_REGION"],
    help="Region of the SSM parameters and Secrets Manager secrets placeholders name; default: boto3's.",
)
from_store = click.option(
    "--from-store", is_flag=True, help="Take the desired manifests and tables from the manifests bucket."
)
manifest_paths = click.argument("paths", nargs=-1, type=click.Path(path_type=Path))


def as_json(help_text: str) -> Callable[[F], F]:
    """``--json``: machine-readable output instead of a table."""
    return click.option("--json", "as_json", is_flag=True, help=help_text)


def _stack(*decorators: Callable[[F], F]) -> Callable[[F], F]:
    def apply(func: F) -> F:
        for decorator in reversed(decorators):
            func = decorator(func)
        return func

    return apply


store = _stack(state, manifests_bucket, checkpoints_bucket, savepoints_bucket)
"""Where state lives: ``--state`` and the three S3 bucket options."""

where_jobs_run = _stack(target, master, master_web_ui, resource_manager, team)
"""Where jobs run: ``--target`` and what each target needs, and the team."""

placeholder_sources = _stack(parameters_prefix, aws_region)
"""Where ``${NAME}``, ``${ssm:...}`` and ``${secret:...}`` placeholders are looked up besides the environment."""

deployment = _stack(project, store, where_jobs_run, placeholder_sources)
"""The project, where its state lives, where its jobs run and where their placeholders come from."""
