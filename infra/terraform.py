"""``make deploy-infra TEAM=x`` / ``make destroy-infra TEAM=x``: Terraform on the synthesised JSON.

    python -m infra.terraform deploy --team x [--auto-approve]
    python -m infra.terraform destroy --team x [--auto-approve]

It checks for AWS credentials and the packaged artifacts first and stops with a clear
message, before doing anything, when they are missing. Deploy applies the artifacts
bucket of ``team-<x>``, uploads the artifacts (the EMR bootstrap and the Lambda read
them), then the rest of ``team-<x>`` (buckets, EMR, MSK, Lambda, IAM, budget), then
``team-<x>-topics`` (the topics need the MSK cluster to exist); destroy goes the other
way. Terraform runs as argument lists, never through a shell.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from infra import package
from infra.main import ROOT, synth
from infra.teams import TEAMS_FILE, TeamsError, load_teams

ARTIFACTS_BUCKET_PARTS = (
    ("aws_s3_bucket", "bucket"),
    ("aws_s3_bucket_versioning", "versioning"),
    ("aws_s3_bucket_server_side_encryption_configuration", "encryption"),
    ("aws_s3_bucket_public_access_block", "public-access"),
    ("aws_s3_bucket_policy", "tls-only"),
    ("aws_s3_bucket_ownership_controls", "ownership"),
    ("aws_s3_bucket_logging", "access-logs"),
)


class Stop(Exception):
    """Stop before (or instead of) changing anything; the message says why."""


def check_credentials(region: str) -> str:
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

    try:
        identity = boto3.client("sts", region_name=region).get_caller_identity()
    except NoCredentialsError:
        raise Stop(
            "no AWS credentials found: set AWS_PROFILE (or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY) "
            "for the account the team's environment lives in. Nothing was changed."
        ) from None
    except (BotoCoreError, ClientError) as error:
        raise Stop(f"the AWS credentials do not work ({error}). Nothing was changed.") from None
    return identity["Arn"]


def local_endpoint() -> str | None:
    """An AWS endpoint other than AWS's own (``AWS_ENDPOINT_URL``: ``make local-aws``, infra/localaws.py)."""
    return os.environ.get("AWS_ENDPOINT_URL") or None


def point_at(stack_dir: Path, endpoint: str | None) -> list[str]:
    """What makes a stack's Terraform talk to ``endpoint`` instead of AWS, the stack itself unchanged: S3 by
    path (``https://<endpoint>/<bucket>``, as a bucket name is no host name there) for the provider, through
    an override file beside the stack, and for the state backend; the ``init`` arguments it needs. The
    provider and the backend read the endpoint itself from ``AWS_ENDPOINT_URL`` (``_env``)."""
    override = stack_dir / "local_endpoint_override.tf.json"
    if endpoint is None:
        override.unlink(missing_ok=True)
        return []
    override.write_text(json.dumps({"provider": {"aws": [{"s3_use_path_style": True}]}}, indent=2) + "\n")
    return ["-backend-config=use_path_style=true"]


def _env() -> dict[str, str]:
    endpoint = local_endpoint()
    if endpoint is None:
        return dict(os.environ)
    # the state backend reads S3's own variable only
    return {**os.environ, "AWS_ENDPOINT_URL_S3": os.environ.get("AWS_ENDPOINT_URL_S3", endpoint)}


def terraform(stack_dir: Path, *args: str) -> None:
    command = ["terraform", f"-chdir={stack_dir}", *args]
    print("+ " + " ".join(command), flush=True)
    completed = subprocess.run(command, check=False, env=_env())
    if completed.returncode != 0:
        raise Stop(f"terraform {args[0]} failed in {stack_dir} (exit {completed.returncode})")


def run(action: str, team_name: str, *, auto_approve: bool, out: Path, only: str | None = None) -> None:
    if shutil.which("terraform") is None:
        raise Stop("terraform is not on PATH (Terraform 1.11 or later). Nothing was changed.")
    config = load_teams(TEAMS_FILE)
    team = config.team(team_name)
    who = check_credentials(team.region)
    print(f"{action} for team {team.name} in {team.region} as {who}")
    if action == "deploy":
        missing = package.missing()
        if missing:
            raise Stop(f"{', '.join(missing)} missing: run `make package` first. Nothing was changed.")
    stacks = synth(TEAMS_FILE, out, team.name)
    if only is not None:  # one of the team's two stacks: `team` (team-<x>) or `topics` (team-<x>-topics)
        stacks = [s for s in stacks if s.endswith("-topics") == (only == "topics")]
    order = stacks if action == "deploy" else list(reversed(stacks))
    approve = ["-auto-approve"] if auto_approve else []
    for stack in order:
        stack_dir = out / "stacks" / stack
        terraform(stack_dir, "init", "-input=false", *point_at(stack_dir, local_endpoint()))
        if action == "deploy" and stack == f"team-{team.name}":
            # The EMR bootstrap action and the Lambda's code are read from the artifacts bucket,
            # so that bucket comes first, then the artifacts, then everything else.
            targets = [f"-target={kind}.artifacts-{what}" for kind, what in ARTIFACTS_BUCKET_PARTS]
            terraform(stack_dir, "apply", *approve, *targets)
            package.push(team.name)
        # without --auto-approve Terraform shows the plan and asks before changing anything
        terraform(stack_dir, "apply" if action == "deploy" else "destroy", *approve)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.terraform", description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["deploy", "destroy"])
    parser.add_argument("--team", required=True)
    parser.add_argument("--auto-approve", action="store_true")
    parser.add_argument(
        "--only", choices=["team", "topics"], help="only the team's stack (team-<x>) or its topics (team-<x>-topics)"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "cdktf.out")
    args = parser.parse_args(argv)
    try:
        run(args.action, args.team, auto_approve=args.auto_approve, out=args.out, only=args.only)
    except (Stop, TeamsError) as error:
        print(f"{args.action}-infra: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
