"""The console and its metrics on a team's EMR primary node, shipped to CloudWatch.

``sql-runner console`` runs there as a systemd service (read-only, on 127.0.0.1; operators reach it
through an SSM or SSH port forward), over the team's buckets. The CloudWatch agent scrapes its
``/metrics`` with the Prometheus scrape configuration below (the console token in a root-only file,
made anew when the service starts: the state store keeps only its digest) and sends the figures as
embedded metric format to the team's log group, where CloudWatch turns them into metrics in the
``sql-runner/<team>`` namespace with the dimensions team, query (and state) — what an alarm on a
stalled query needs.

The bootstrap action (``bootstrap/console-metrics.sh``) fetches these files from the artifacts bucket,
where the stack writes them, and installs both on the primary node only.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import yaml

from runner.aws.steps import StepCommand

PORT = 8099  # 8088 is YARN's ResourceManager on EMR's primary node
CONFIG_PREFIX = "console/"  # in the artifacts bucket
SCRIPT = Path(__file__).parent / "bootstrap" / "console-metrics.sh"
SCRIPT_KEY = "bootstrap/console-metrics.sh"
TOKEN_FILE = "/etc/sql-runner/console-token"
PROMETHEUS_FILE = "/etc/sql-runner/prometheus.yaml"
SCRAPE_JOB = "sql-runner"
TOKEN_NAME = "cloudwatch-agent"  # the console token the agent scrapes with


def namespace(team: str) -> str:
    return f"sql-runner/{team}"


def console_args(step: StepCommand) -> list[str]:
    """The console service's command line: the team's buckets, the yarn target, on 127.0.0.1."""
    return step.args("console", "--address", "127.0.0.1", "--port", str(PORT))


def token_args(step: StepCommand) -> list[str]:
    """The command that makes the agent's console token anew and prints it (the store keeps its digest)."""
    return step.args("console", "--token-name", TOKEN_NAME, "--print-token", submits=False)


def prometheus_config() -> dict:
    """The agent's Prometheus scrape configuration: the console on this node, with its token from a file."""
    return {
        "global": {"scrape_interval": "60s", "scrape_timeout": "10s"},
        "scrape_configs": [
            {
                "job_name": SCRAPE_JOB,
                "metrics_path": "/metrics",
                "authorization": {"type": "Bearer", "credentials_file": TOKEN_FILE},
                "static_configs": [{"targets": [f"127.0.0.1:{PORT}"]}],
            }
        ],
    }


def agent_config(team: str, log_group: str) -> dict:
    """The CloudWatch agent's configuration: scrape the console, send embedded-metric-format logs."""
    return {
        "agent": {"run_as_user": "root"},
        "logs": {
            "metrics_collected": {
                "prometheus": {
                    "prometheus_config_path": PROMETHEUS_FILE,
                    "log_group_name": log_group,
                    "emf_processor": {
                        "metric_namespace": namespace(team),
                        "metric_declaration": [
                            {
                                "source_labels": ["job"],
                                "label_matcher": f"^{SCRAPE_JOB}$",
                                "dimensions": [["team", "query"]],
                                "metric_selectors": ["^sql_runner_query_(?!state$).*"],
                            },
                            {
                                "source_labels": ["job"],
                                "label_matcher": f"^{SCRAPE_JOB}$",
                                "dimensions": [["team", "query", "state"]],
                                "metric_selectors": ["^sql_runner_query_state$"],
                            },
                            {
                                "source_labels": ["job"],
                                "label_matcher": f"^{SCRAPE_JOB}$",
                                "dimensions": [["team"]],
                                "metric_selectors": ["^sql_runner_session_up$", "^sql_runner_queries_deployed$"],
                            },
                        ],
                    },
                }
            }
        },
    }


def files(team: str, log_group: str, step: StepCommand) -> dict[str, str]:
    """What the stack writes under ``console/`` of the artifacts bucket, by file name."""
    return {
        "console.args": shlex.join(console_args(step)),
        "token.args": shlex.join(token_args(step)),
        "prometheus.yaml": yaml.safe_dump(prometheus_config(), sort_keys=False),
        "cloudwatch-agent.json": json.dumps(agent_config(team, log_group), indent=2),
    }
