"""The runner commands EMR steps run on the primary node: the deploy Lambda's steps and the cluster's first step."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StepCommand:
    """The runner command an EMR step runs on the primary node; the EMR cluster's own first step uses it too."""

    team: str
    manifests_bucket: str
    checkpoints_bucket: str
    savepoints_bucket: str
    resource_manager: str = "http://localhost:8088"
    sql_runner: str = "/usr/local/bin/sql-runner"
    spark_submit: str = "/usr/bin/spark-submit"
    parameters_prefix: str | None = None  # SSM prefix a ${NAME} placeholder falls back to
    region: str | None = None  # of the team's parameters and secrets
    lease_wait: float = 900.0  # steps run concurrently: a deploy waits for the manifest's lease

    def args(self, command: str, *extra: str, submits: bool = True) -> list[str]:
        """``sql-runner <command> --from-store ...`` (``command`` may name a subcommand: ``session start``);
        ``submits``: the command may start jobs."""
        return [
            self.sql_runner,
            *command.split(),
            "--from-store",
            "--manifests-bucket",
            self.manifests_bucket,
            "--checkpoints-bucket",
            self.checkpoints_bucket,
            "--savepoints-bucket",
            self.savepoints_bucket,
            "--target",
            "yarn",
            "--resource-manager",
            self.resource_manager,
            "--team",
            self.team,
            *(["--spark-submit", self.spark_submit] if submits else []),
            *(["--parameters-prefix", self.parameters_prefix] if self.parameters_prefix else []),
            *(["--aws-region", self.region] if self.region else []),
            *(["--lease-wait", f"{self.lease_wait:g}"] if command in ("deploy", "undeploy") else []),
            *extra,
        ]
