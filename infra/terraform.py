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
from runner.core import terminal

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


def check_network(team) -> None:
    """The team's VPC and subnets (``teams.yaml``'s ``network``) exist in its region and the subnets are in
    that VPC: otherwise the apply would stop half way, at the first resource placed in them."""
    import boto3
    from botocore.exceptions import ClientError

    ec2 = boto3.client("ec2", region_name=team.region)
    network = team.network
    try:
        vpcs = ec2.describe_vpcs(Filters=[{"Name": "vpc-id", "Values": [network.vpc_id]}])["Vpcs"]
        subnets = ec2.describe_subnets(Filters=[{"Name": "subnet-id", "Values": network.subnet_ids}])["Subnets"]
    except ClientError as error:
        raise Stop(f"could not read the team's network in {team.region} ({error}). Nothing was changed.") from None
    problems = []
    if not vpcs:
        problems.append(f"VPC {network.vpc_id} does not exist")
    found = {subnet["SubnetId"]: subnet["VpcId"] for subnet in subnets}
    problems += [f"subnet {s} does not exist" for s in network.subnet_ids if s not in found]
    problems += [
        f"subnet {s} is in {vpc}, not in {network.vpc_id}" for s, vpc in sorted(found.items()) if vpc != network.vpc_id
    ]
    if problems:
        raise Stop(
            f"team {team.name}: the network the teams file names is not there in {team.region}: {'; '.join(problems)}. "
            "Nothing was changed."
        )


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
    # Ctrl-C reaches Terraform too (it shares the terminal's process group): it stops gracefully, finishing what is
    # under way and writing its state. It is waited for, never killed (subprocess.run would kill it): a killed apply
    # loses the state of what it made, keeps the state's lock and leaves its provider running. A second Ctrl-C
    # reaches it too and stops it at once, as Terraform says. (A Ctrl-C in the moment between its start and its
    # program's is lost to it: it then runs to its end.)
    process, interrupted = terminal.start(command, env=_env())
    code, interrupted = terminal.wait(process, interrupted)
    if interrupted:
        ended = "finished" if code == 0 else f"stopped (exit {code})"
        raise Stop(
            f"interrupted: terraform {args[0]} in {stack_dir} {ended} with its state written; "
            f"the same command goes on from there"
        )
    if code != 0:
        raise Stop(f"terraform {args[0]} failed in {stack_dir} (exit {code})")


def run(
    action: str,
    team_name: str,
    *,
    auto_approve: bool,
    out: Path,
    only: str | None = None,
    delete_data: bool = False,
    teams_file: Path = TEAMS_FILE,
) -> None:
    if shutil.which("terraform") is None:
        raise Stop("terraform is not on PATH (Terraform 1.11 or later). Nothing was changed.")
    config = load_teams(teams_file)
    team = config.team(team_name)
    who = check_credentials(team.region)
    print(f"{action} for team {team.name} in {team.region} as {who}")
    if action == "deploy":
        check_network(team)
        missing = package.missing()
        if missing:
            raise Stop(f"{', '.join(missing)} missing: run `make package` first. Nothing was changed.")
    stacks = synth(teams_file, out, team.name)
    if only is not None:  # one of the team's two stacks: `team` (team-<x>) or `topics` (team-<x>-topics)
        stacks = [s for s in stacks if s.endswith("-topics") == (only == "topics")]
    order = stacks if action == "deploy" else list(reversed(stacks))
    approve = ["-auto-approve"] if auto_approve else []
    for stack in order:
        stack_dir = out / "stacks" / stack
        if stack.endswith("-topics") and local_endpoint() is not None:
            _local_topics(team, config.platform, action)
            continue
        terraform(stack_dir, "init", "-input=false", *point_at(stack_dir, local_endpoint()))
        if action == "deploy" and stack == f"team-{team.name}":
            # The EMR bootstrap action and the Lambda's code are read from the artifacts bucket,
            # so that bucket comes first, then the artifacts, then everything else.
            targets = [f"-target={kind}.artifacts-{what}" for kind, what in ARTIFACTS_BUCKET_PARTS]
            terraform(stack_dir, "apply", *approve, *targets)
            package.push(team.name, teams_file)
        if action == "destroy" and stack == f"team-{team.name}":
            _destroy_team_stack(stack_dir, config, team, auto_approve=auto_approve, delete_data=delete_data)
            continue
        # without --auto-approve Terraform shows the plan and asks before changing anything
        terraform(stack_dir, "apply" if action == "deploy" else "destroy", *approve)


def _local_topics(team, platform, action: str) -> None:
    """The topics stack on a local endpoint (``make local-aws``): the Kafka provider it needs is not in this
    machine's provider mirror and no registry it reaches serves it, so the team's topics are made (or deleted)
    with a Kafka admin client at the bootstrap brokers the team's MSK cluster gives, as the stack would make
    them: partitions, retention, cleanup policy; the replication factor at most the brokers there are."""
    import boto3
    from confluent_kafka.admin import AdminClient, NewTopic

    from infra.stack import prefix

    kafka = boto3.client("kafka", region_name=team.region)
    name = prefix(platform, team)
    clusters = kafka.list_clusters_v2(ClusterNameFilter=name)["ClusterInfoList"]
    if not clusters:
        if action == "destroy":
            return
        raise Stop(f"no MSK cluster {name} in {team.region}: deploy the team's stack first (--only team)")
    brokers = kafka.get_bootstrap_brokers(ClusterArn=clusters[0]["ClusterArn"])["BootstrapBrokerStringSaslIam"]
    admin = AdminClient({"bootstrap.servers": brokers, "log_level": 3})
    held = admin.list_topics(timeout=30)
    wanted = {topic.name: topic for topic in team.topics}
    if action == "destroy":
        doomed = [t for t in wanted if t in held.topics]
        for topic, future in (admin.delete_topics(doomed) if doomed else {}).items():
            future.result(timeout=30)
            print(f"topic {topic} deleted at {brokers}", flush=True)
        return
    new = [
        NewTopic(
            topic.name,
            num_partitions=topic.partitions,
            replication_factor=min(topic.replication, len(held.brokers)),
            config={
                "retention.ms": str(topic.retention_hours * 3600 * 1000),
                "min.insync.replicas": str(min(2, topic.replication, len(held.brokers))),
                "cleanup.policy": "delete",
            },
        )
        for topic in wanted.values()
        if topic.name not in held.topics
    ]
    for topic, future in (admin.create_topics(new) if new else {}).items():
        future.result(timeout=30)
        print(f"topic {topic} created at {brokers}", flush=True)
    print(f"topics of team {team.name}: {', '.join(sorted(wanted))} (Kafka admin client, local endpoint)", flush=True)


# Buckets whose objects can be made again (`make package` and `make push-artifacts`): emptied by a destroy.
REBUILT = ("artifacts",)


def _destroy_team_stack(stack_dir: Path, config, team, *, auto_approve: bool, delete_data: bool) -> None:
    """A team stack holds what Terraform alone cannot delete: EMR's termination protection (on, so that no
    plan ends the team's jobs by mistake) and buckets that hold objects (the team's manifests, state and
    logs). The destroy checks the buckets first and, unless ``delete_data``, stops naming those that hold
    data, before anything changed; once approved it lifts the protection, terminates the cluster (its jobs would
    go on writing into the buckets), empties the buckets it may and lets Terraform destroy the rest."""
    import boto3

    from infra.stack import BUCKET_ROLES  # synth has loaded it already

    outputs = _outputs(stack_dir)
    s3 = boto3.client("s3", region_name=team.region)
    holding = {}
    for role in BUCKET_ROLES:
        name = outputs.get(f"{role}_bucket") or team.bucket(role, config.platform.environment)
        count = _object_count(s3, name)
        if count:
            holding[name] = (role, count)
    kept = {name: count for name, (role, count) in holding.items() if role not in REBUILT}
    if kept and not delete_data:
        listed = ", ".join(f"s3://{name} ({count} objects)" for name, count in sorted(kept.items()))
        raise Stop(
            f"the team's buckets hold data: {listed}. Copy what must be kept, then destroy with "
            "--delete-data (make destroy-infra TEAM=<name> DELETE_DATA=yes) to delete it with the "
            "environment. Nothing was changed."
        )
    if not auto_approve:
        terraform(stack_dir, "plan", "-destroy", "-input=false")
        emptied = ", ".join(f"s3://{name}" for name in sorted(holding)) or "none"
        answer = input(f"Destroy team-{team.name}, emptying the buckets {emptied}? Only 'yes' is accepted: ")
        if answer.strip() != "yes":
            raise Stop("not confirmed. Nothing was changed.")
    cluster = outputs.get("emr_cluster_id")
    if cluster:
        emr = boto3.client("emr", region_name=team.region)
        state = emr.describe_cluster(ClusterId=cluster)["Cluster"]["Status"]["State"]
        if state not in ("TERMINATED", "TERMINATED_WITH_ERRORS"):
            print(f"lifting the termination protection of {cluster}", flush=True)
            emr.set_termination_protection(JobFlowIds=[cluster], TerminationProtected=False)
            if holding:
                # the team's jobs write into the buckets (state, health, logs) for as long as the cluster runs:
                # ended first, so that the buckets stay empty once emptied
                print(f"terminating {cluster}, which runs the team's jobs, before emptying the buckets", flush=True)
                emr.terminate_job_flows(JobFlowIds=[cluster])
                emr.get_waiter("cluster_terminated").wait(
                    ClusterId=cluster, WaiterConfig={"Delay": 10, "MaxAttempts": 180}
                )
    logs = outputs.get("logs_bucket") or team.bucket("logs", config.platform.environment)
    # S3 delivers the access logs of the other buckets into the logs bucket, the destroy's own requests
    # included; and S3 notifies the deploy function of every manifest the emptying deletes, which writes its
    # requests and reports into the manifests bucket: both stopped first, so that the buckets stay empty
    for role in BUCKET_ROLES:
        name = outputs.get(f"{role}_bucket") or team.bucket(role, config.platform.environment)
        if name != logs and _exists(s3, name):
            s3.put_bucket_logging(Bucket=name, BucketLoggingStatus={})
            s3.put_bucket_notification_configuration(Bucket=name, NotificationConfiguration={})
    for name in sorted(holding, key=lambda bucket: bucket == logs):  # the logs bucket last
        print(f"emptying s3://{name} ({holding[name][1]} objects and versions)", flush=True)
        _empty(s3, name)
    terraform(stack_dir, "destroy", "-auto-approve", "-input=false")


def _outputs(stack_dir: Path) -> dict[str, str]:
    """The applied stack's outputs (none when nothing was applied)."""
    completed = subprocess.run(
        ["terraform", f"-chdir={stack_dir}", "output", "-json"], capture_output=True, text=True, env=_env(), check=False
    )
    if completed.returncode != 0 or not completed.stdout.strip():
        return {}
    return {name: str(value.get("value")) for name, value in json.loads(completed.stdout).items()}


def _object_count(s3, bucket: str) -> int:
    """How many object versions and delete markers ``bucket`` holds; 0 when it does not exist."""
    from botocore.exceptions import ClientError

    count = 0
    try:
        for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket):
            count += len(page.get("Versions", [])) + len(page.get("DeleteMarkers", []))
    except ClientError as error:
        if error.response["Error"]["Code"] in ("NoSuchBucket", "404"):
            return 0
        raise
    return count


def _exists(s3, bucket: str) -> bool:
    from botocore.exceptions import ClientError

    try:
        s3.head_bucket(Bucket=bucket)
    except ClientError:
        return False
    return True


def _empty(s3, bucket: str, page_size: int = 1000) -> None:
    """Delete every object version and delete marker of ``bucket``: the first page of the listing (``page_size``
    entries at most, S3's largest page and the most one request deletes), deleted, then the first page again,
    until none is left (a listing resumed at the page's last version, which is deleted by then, ends there on
    moto 5.2.5, leaving the rest)."""
    rounds = _object_count(s3, bucket) // page_size + 10  # a bucket that fills as fast as it is emptied stops this
    for _ in range(rounds):
        page = s3.list_object_versions(Bucket=bucket, MaxKeys=page_size)
        doomed = [
            {"Key": item["Key"], "VersionId": item["VersionId"]}
            for item in page.get("Versions", []) + page.get("DeleteMarkers", [])
        ]
        if not doomed:
            return
        done = s3.delete_objects(Bucket=bucket, Delete={"Objects": doomed, "Quiet": True})
        refused = [f"{error['Key']} ({error['Code']}: {error['Message']})" for error in done.get("Errors", [])]
        if refused:
            raise Stop(
                f"s3://{bucket}: {len(refused)} objects could not be deleted, for example {refused[0]}; "
                "the buckets are partly emptied and Terraform destroyed nothing: run the destroy again"
            )
    raise Stop(
        f"s3://{bucket} is written to as fast as it is emptied (still {_object_count(s3, bucket)} objects): stop "
        "what writes into it; the buckets are partly emptied and Terraform destroyed nothing"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.terraform", description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["deploy", "destroy"])
    parser.add_argument("--team", required=True)
    parser.add_argument("--auto-approve", action="store_true")
    parser.add_argument("--teams", type=Path, default=TEAMS_FILE, help="the teams file (infra/teams.yaml)")
    parser.add_argument(
        "--delete-data",
        action="store_true",
        help="destroy: also delete what the team's buckets hold (manifests, checkpoints, savepoints, logs)",
    )
    parser.add_argument(
        "--only", choices=["team", "topics"], help="only the team's stack (team-<x>) or its topics (team-<x>-topics)"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "cdktf.out")
    args = parser.parse_args(argv)
    try:
        run(
            args.action,
            args.team,
            auto_approve=args.auto_approve,
            out=args.out,
            only=args.only,
            delete_data=args.delete_data,
            teams_file=args.teams,
        )
    except (Stop, TeamsError) as error:
        print(f"{args.action}-infra: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
