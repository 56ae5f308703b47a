"""AWS on this machine for the platform's own commands: moto's server on 127.0.0.1 over TLS, with what a
platform team provides before its first ``make deploy-infra`` already there.

    python -m infra.localaws [--port 4566] [--folder .local-aws]     (make local-aws)

It serves until stopped (Ctrl-C) and prints the environment that points the existing commands at it
(``AWS_ENDPOINT_URL`` and a CA bundle): ``make deploy-infra``, ``make destroy-infra``, the AWS CLI, boto3 and
``sql-runner`` then talk to it as to AWS. Nothing here is a second way to deploy: the same Terraform applies
the same stacks; only the endpoint differs.

What it stands in for, and how:

- TLS: a throwaway certificate authority made at start (``<folder>/ca.pem``; its key never leaves this
  process) signs the server's certificate for 127.0.0.1, so the stacks' TLS-only bucket policies hold as on
  AWS and every client checks the server as it would AWS's.
- IAM: AWS's managed policies are loaded (the stacks attach some by ARN).
- What the platform team provides (docs/aws.md): the Terraform state bucket of ``teams.yaml``, and each
  team's VPC and subnets with the IDs ``teams.yaml`` names. moto 5.2.5 gives every VPC and subnet a random
  ID and takes none from its caller; this stand-in creates them through EC2's API and gives them those IDs
  (``_ids_from``), a named fake of the part that is the platform team's, never of the stacks'.
"""

from __future__ import annotations

import argparse
import datetime as dt
import ipaddress
import json
import logging
import os
import signal
import ssl
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from types import SimpleNamespace
from unittest import mock
from urllib.parse import unquote

from infra.teams import TEAMS_FILE, TeamsFile, load_teams

ACCOUNT = "123456789012"  # moto's account
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local"}  # moto accepts any


def _certificates(folder: Path) -> tuple[Path, Path, Path]:
    """A CA valid for a day, and the server's certificate and key for 127.0.0.1 and localhost, signed by it.
    The CA's key is not written anywhere: nothing else can be signed by it once this process ends."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sql-runner local AWS CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    server = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]),
            critical=False,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    folder.mkdir(parents=True, exist_ok=True)
    ca_pem, cert_pem, key_pem = folder / "ca.pem", folder / "server.pem", folder / "server-key.pem"
    ca_pem.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    cert_pem.write_bytes(server.public_bytes(serialization.Encoding.PEM))
    key_pem.touch(mode=0o600)
    key_pem.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return ca_pem, cert_pem, key_pem


def _correct_moto() -> None:
    """Where moto 5.2.5 serves an API the provider calls otherwise than AWS, corrected here, each named:

    - S3 ``PutBucketLogging`` reads the target bucket's policy for S3's log delivery permission and fails
      (HTTP 500, which the provider retries for ever) on any statement whose principal is ``"*"``, such as
      the stacks' deny of requests without TLS: such statements are passed over, as AWS passes them.
    - S3 bucket policies: moto does not evaluate ``Bool`` conditions, so a statement that denies requests
      without TLS (``aws:SecureTransport`` false) denies every request. This endpoint serves TLS only:
      ``aws:SecureTransport`` is true of every request, and a statement whose condition on it does not
      hold does not apply (the rest of the policy is moto's to evaluate, as before).
    """
    from moto.iam.access_control import IAMPolicy, PermissionResult
    from moto.s3.models import FakeBucket

    def holds_here(statement: dict) -> bool:
        for key, value in (statement.get("Condition") or {}).get("Bool", {}).items():
            if key.lower() == "aws:securetransport":
                expected = value if isinstance(value, list) else [value]
                if "true" not in [str(v).lower() for v in expected]:
                    return False
        return True

    def get_permission(self, action: str, resource: str):
        if self.policy is None:
            return PermissionResult.NEUTRAL
        document = json.loads(self.policy.decode())
        statements = document["Statement"] if isinstance(document["Statement"], list) else [document["Statement"]]
        applying = {**document, "Statement": [stmt for stmt in statements if holds_here(stmt)]}
        return IAMPolicy(json.dumps(applying)).is_action_permitted(action, resource)

    FakeBucket.get_permission = get_permission

    original = FakeBucket._log_permissions_enabled_policy

    def log_permissions_enabled_policy(target_bucket, target_prefix):
        policy = target_bucket.policy
        if not policy:
            return False
        document = json.loads(policy.decode())
        services = [stmt for stmt in document["Statement"] if isinstance(stmt.get("Principal"), dict)]
        if len(services) == len(document["Statement"]):
            return original(target_bucket, target_prefix)
        only_services = json.dumps({**document, "Statement": services}).encode()
        shown = SimpleNamespace(policy=only_services, partition=target_bucket.partition, name=target_bucket.name)
        return original(shown, target_prefix)

    FakeBucket._log_permissions_enabled_policy = staticmethod(log_permissions_enabled_policy)


def _msk_as_provisioned(kafka_bootstrap: Callable[[], str | None]) -> None:
    """moto 5.2.5's MSK keeps every cluster ``CREATING`` (the provider waits for ``ACTIVE`` for ever), fails
    on a deleted one instead of saying it is not found (the provider waits for that for ever), and has no
    ``GetBootstrapBrokers``. Here a cluster is ``ACTIVE`` from its first description on (provisioned at
    once), and its SASL/IAM bootstrap address is ``kafka_bootstrap``, the broker standing for MSK on this
    machine, or else MSK's own form of name for each broker (``b-<n>.<cluster>...:9098``), which resolves
    nowhere: the stacks store it as the team's parameter, as they store MSK's."""
    from moto.kafka.exceptions import NotFoundException
    from moto.kafka.models import KafkaBackend
    from moto.kafka.responses import KafkaResponse

    def without_configuration(info):
        """moto says a cluster given no configuration runs the configuration ``"string"``, revision 1 (a
        perpetual diff in every plan); such a cluster runs MSK's default configuration, which has no ARN."""
        if isinstance(info, dict):
            if info.get("configurationArn") == "string":
                info.pop("configurationArn")
                info.pop("configurationRevision", None)
            for value in info.values():
                without_configuration(value)
        return info

    def provisioned(describe):
        def described(self, cluster_arn: str):
            cluster = self.clusters.get(cluster_arn)
            if cluster is None:  # moto fails (HTTP 500) on a deleted cluster; AWS answers it is not found
                raise NotFoundException(f"Cluster {cluster_arn} not found")
            if cluster.state == "CREATING":
                cluster.state = "ACTIVE"
            return without_configuration(describe(self, cluster_arn))

        return described

    def get_bootstrap_brokers(self) -> str:
        arn = unquote(self.parsed_url.path.split("/clusters/")[-1].removesuffix("/bootstrap-brokers"))
        cluster = self.kafka_backend.clusters[arn]
        brokers = kafka_bootstrap() or ",".join(
            f"b-{n}.{cluster.cluster_name}.kafka.{self.region}.amazonaws.com:9098"
            for n in range(1, (cluster.number_of_broker_nodes or 1) + 1)
        )
        return json.dumps({"bootstrapBrokerStringSaslIam": brokers})

    KafkaBackend.describe_cluster = provisioned(KafkaBackend.describe_cluster)
    KafkaBackend.describe_cluster_v2 = provisioned(KafkaBackend.describe_cluster_v2)
    KafkaResponse.get_bootstrap_brokers = get_bootstrap_brokers


def _budget_subscribers() -> None:
    """moto 5.2.5's Budgets stores each notification's subscribers (``CreateBudget``, ``CreateNotification``)
    but has no ``DescribeSubscribersForNotification``, which the provider reads after every change: here it
    answers from what moto stored."""
    from moto.budgets.exceptions import NotFoundException
    from moto.budgets.responses import BudgetsResponse

    def describe_subscribers_for_notification(self) -> str:
        budget = self.backend.budgets[self._get_param("AccountId")].get(self._get_param("BudgetName"))
        wanted = self._get_param("Notification")
        for notification in budget.notifications if budget else []:
            if all(notification.details.get(key) == value for key, value in wanted.items()):
                return json.dumps({"Subscribers": notification.subscribers})
        raise NotFoundException("Unable to find the notification.")

    BudgetsResponse.describe_subscribers_for_notification = describe_subscribers_for_notification


def _budget_tags() -> None:
    """moto 5.2.5's Budgets drops a budget's ``ResourceTags`` and has no ``ListTagsForResource``,
    ``TagResource`` or ``UntagResource``: here they are kept per budget ARN and served, so the stacks' cost
    tags on the budget are applied and read back as on AWS."""
    from moto.budgets.responses import BudgetsResponse

    tags: dict[str, dict[str, str]] = {}
    create = BudgetsResponse.create_budget

    def create_budget(self) -> str:
        answer = create(self)
        arn = f"arn:aws:budgets::{self._get_param('AccountId')}:budget/{self._get_param('Budget')['BudgetName']}"
        tags[arn] = {tag["Key"]: tag["Value"] for tag in self._get_param("ResourceTags") or []}
        return answer

    def list_tags_for_resource(self) -> str:
        held = tags.get(self._get_param("ResourceARN"), {})
        return json.dumps({"ResourceTags": [{"Key": key, "Value": value} for key, value in held.items()]})

    def tag_resource(self) -> str:
        held = tags.setdefault(self._get_param("ResourceARN"), {})
        held.update({tag["Key"]: tag["Value"] for tag in self._get_param("ResourceTags") or []})
        return json.dumps({})

    def untag_resource(self) -> str:
        held = tags.setdefault(self._get_param("ResourceARN"), {})
        for key in self._get_param("ResourceTagKeys") or []:
            held.pop(key, None)
        return json.dumps({})

    BudgetsResponse.create_budget = create_budget
    BudgetsResponse.list_tags_for_resource = list_tags_for_resource
    BudgetsResponse.tag_resource = tag_resource
    BudgetsResponse.untag_resource = untag_resource


def _emr_instance_fleets() -> None:
    """moto 5.2.5's EMR has no ``ListInstanceFleets``, which the provider reads of every cluster: the
    stacks' clusters use instance groups, so here it lists none, as AWS does for such a cluster."""
    from moto.core.responses import ActionResult
    from moto.emr.responses import ElasticMapReduceResponse

    ElasticMapReduceResponse.list_instance_fleets = lambda self: ActionResult({"InstanceFleets": []})


def _lambda_configuration() -> None:
    """moto 5.2.5's Lambda drops a function's ``DeadLetterConfig`` and ``LoggingConfig`` (the provider then
    plans to add them again at every plan): here they are kept as created or updated and described back."""
    from moto.awslambda.models import LambdaFunction

    kept = ("DeadLetterConfig", "LoggingConfig")
    init, describe, update = (
        LambdaFunction.__init__,
        LambdaFunction.get_configuration,
        LambdaFunction.update_configuration,
    )

    def __init__(self, account_id, spec, region, version=1):
        init(self, account_id, spec, region, version)
        self.kept_configuration = {key: spec[key] for key in kept if spec.get(key)}

    def get_configuration(self, on_create: bool = False):
        return {**describe(self, on_create), **getattr(self, "kept_configuration", {})}

    def update_configuration(self, config_updates):
        held = getattr(self, "kept_configuration", {})
        held.update({key: config_updates[key] for key in kept if key in config_updates})
        self.kept_configuration = {key: value for key, value in held.items() if value}
        return update(self, config_updates)

    LambdaFunction.__init__ = __init__
    LambdaFunction.get_configuration = get_configuration
    LambdaFunction.update_configuration = update_configuration


def answer_continue_once() -> None:
    """moto's server (werkzeug's, over HTTP/1.1) answers ``Expect: 100-continue`` twice: Python's http.server sends
    ``100 Continue`` as it reads the headers and werkzeug sends another as it hands the body over; the AWS SDK for
    Java (S3A: each local file uploaded, RocksDB's state at every commit) then takes the second for the response
    and fails with status 100. Here only werkzeug's is sent, as one server does."""
    from moto.moto_server.werkzeug_app import MotoRequestHandler

    MotoRequestHandler.handle_expect_100 = lambda self: True


def _s3_delete_marker_events() -> None:
    """moto 5.2.5 sends no event notification when a delete in a versioned bucket creates a delete marker; S3 sends
    ``s3:ObjectRemoved:DeleteMarkerCreated`` (the deploy Lambda's undeploy hangs on it): here it is sent. And a
    delete marker's own version deleted for good (emptying a versioned bucket) failed with HTTP 500, moto's event
    for it reading the marker's ETag and size, which a marker has not: here they are empty and 0."""
    from moto.s3 import notifications
    from moto.s3.models import FakeDeleteMarker, S3Backend

    FakeDeleteMarker.etag = ""
    FakeDeleteMarker.size = 0

    delete = S3Backend.delete_object

    def delete_object(self, bucket_name, key_name, version_id=None, bypass=False):
        done, meta = delete(self, bucket_name, key_name, version_id, bypass)
        if version_id is None and meta.get("delete-marker") == "true":
            marker = SimpleNamespace(name=key_name, etag="", size=0, version_id=meta["version-id"])
            event = notifications.S3NotificationEvent.OBJECT_REMOVED_DELETE_MARKER_CREATED_EVENT
            notifications.send_event(self.account_id, event, self.get_bucket(bucket_name), marker)
        return done, meta

    S3Backend.delete_object = delete_object


def _emr_cluster_policies() -> None:
    """moto 5.2.5's EMR drops a new cluster's ``AutoTerminationPolicy`` and ``ManagedScalingPolicy`` and has
    no API to read or change them, which the provider does after every change: here each cluster's two
    policies are kept as ``RunJobFlow`` (and the ``Put``/``Remove`` calls) give them and served back."""
    from moto.core.responses import ActionResult, EmptyResult
    from moto.emr.responses import ElasticMapReduceResponse

    held: dict[tuple[str, str], dict] = {}
    run = ElasticMapReduceResponse.run_job_flow

    def run_job_flow(self):
        answer = run(self)
        cluster = answer.result["JobFlowId"]
        for policy in ("AutoTerminationPolicy", "ManagedScalingPolicy"):
            if self._get_param(policy):
                held[(cluster, policy)] = self._get_param(policy)
        return answer

    def getter(policy: str):
        return lambda self: ActionResult(
            {policy: held[(self._get_param("ClusterId"), policy)]}
            if (self._get_param("ClusterId"), policy) in held
            else {}
        )

    def putter(policy: str):
        def put(self):
            held[(self._get_param("ClusterId"), policy)] = self._get_param(policy)
            return EmptyResult()

        return put

    def remover(policy: str):
        def remove(self):
            held.pop((self._get_param("ClusterId"), policy), None)
            return EmptyResult()

        return remove

    ElasticMapReduceResponse.run_job_flow = run_job_flow
    for policy, name in (
        ("AutoTerminationPolicy", "auto_termination_policy"),
        ("ManagedScalingPolicy", "managed_scaling_policy"),
    ):
        setattr(ElasticMapReduceResponse, f"get_{name}", getter(policy))
        setattr(ElasticMapReduceResponse, f"put_{name}", putter(policy))
        setattr(ElasticMapReduceResponse, f"remove_{name}", remover(policy))


_CORRECTED = False


class LocalAws:
    """moto's server on 127.0.0.1 over TLS, its backends in this process."""

    kafka_bootstrap_now: str | None = None  # the running endpoint's, which the MSK correction serves

    def __init__(self, folder: Path, port: int = 0, kafka_bootstrap: str | None = None):
        self.folder = folder
        self.port = port
        self.kafka_bootstrap = kafka_bootstrap
        self.ca: Path | None = None
        self._server = None
        self._thread: threading.Thread | None = None

    def start(self) -> LocalAws:
        from moto.core.config import default_user_config
        from moto.moto_server.threaded_moto_server import MotoRequestHandler
        from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
        from werkzeug.serving import make_server

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # it logs every request
        self._managed_policies = default_user_config["iam"]["load_aws_managed_policies"]
        default_user_config["iam"]["load_aws_managed_policies"] = True  # the stacks attach some by ARN
        global _CORRECTED
        if not _CORRECTED:  # once per process: each wraps moto's own
            _correct_moto()
            _msk_as_provisioned(lambda: LocalAws.kafka_bootstrap_now)
            _budget_subscribers()
            _budget_tags()
            _emr_instance_fleets()
            _emr_cluster_policies()
            _lambda_configuration()
            _s3_delete_marker_events()
            answer_continue_once()
            _CORRECTED = True
        LocalAws.kafka_bootstrap_now = self.kafka_bootstrap
        from moto.moto_api._internal.models import moto_api_backend

        moto_api_backend.reset()  # moto's backends live in the process: this endpoint starts with nothing
        self.ca, cert, key = _certificates(self.folder)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(cert, key)
        app = DomainDispatcherApplication(create_backend_app)
        self._server = make_server(
            "127.0.0.1", self.port, app, threaded=True, request_handler=MotoRequestHandler, ssl_context=context
        )
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="local-aws", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            from moto.core.config import default_user_config

            self._server.shutdown()
            self._server = None
            default_user_config["iam"]["load_aws_managed_policies"] = self._managed_policies

    @property
    def endpoint(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def env(self, region: str) -> dict[str, str]:
        """What points the existing commands at this endpoint: boto3 and the AWS CLI (``AWS_CA_BUNDLE``),
        Terraform and its provider (``SSL_CERT_FILE``, read by Go on Linux)."""
        assert self.ca is not None, "start() first"
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_CA_BUNDLE": str(self.ca),
            "SSL_CERT_FILE": str(self.ca),
            "AWS_DEFAULT_REGION": region,
            "AWS_REGION": region,
            **CREDENTIALS,
        }


def endpoint_client(env: dict[str, str], service: str, region: str):
    """A boto3 client of ``service`` at the endpoint ``env`` (:meth:`LocalAws.env`) names, trusting its CA."""
    import boto3

    return boto3.client(
        service,
        region_name=region,
        endpoint_url=env["AWS_ENDPOINT_URL"],
        verify=env["AWS_CA_BUNDLE"],
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
    )


PROVIDER_MIRROR = Path("/opt/tf-plugins")  # this machine's offline mirror of the AWS provider


def provider_mirror_config(path: Path, mirror: Path = PROVIDER_MIRROR) -> Path:
    """A Terraform CLI configuration (for ``TF_CLI_CONFIG_FILE``) taking HashiCorp's providers from ``mirror``,
    where no registry is reachable, and any other from its registry."""
    hashicorp = '["registry.terraform.io/hashicorp/*"]'
    path.write_text(
        f'provider_installation {{\n  filesystem_mirror {{\n    path = "{mirror}"\n    include = {hashicorp}\n  }}\n'
        f"  direct {{\n    exclude = {hashicorp}\n  }}\n}}\n"
    )
    return path


@contextmanager
def _ids_from(kind: str, ids: list[str]) -> Iterator[None]:
    """The next ``kind`` (``vpc`` or ``subnet``) EC2 creates in this process takes the next of ``ids``: the
    IDs ``teams.yaml`` names, which moto cannot be asked for (see the module's docstring)."""
    from moto.ec2.models import subnets, vpcs

    module, name = (vpcs, "random_vpc_id") if kind == "vpc" else (subnets, "random_subnet_id")
    queue = list(ids)
    with mock.patch.object(module, name, lambda: queue.pop(0)):
        yield
    assert not queue, f"{kind} IDs not used: {queue}"


def provide_prerequisites(aws: LocalAws, teams: TeamsFile) -> list[str]:
    """The state bucket and every team's VPC and subnets, as a platform team provides them; what was made."""
    made = []
    platform = teams.platform
    env = aws.env(platform.state_region)
    s3 = endpoint_client(env, "s3", platform.state_region)
    location = {} if platform.state_region == "us-east-1" else {"LocationConstraint": platform.state_region}
    s3.create_bucket(Bucket=platform.state_bucket, CreateBucketConfiguration=location)
    s3.put_bucket_versioning(Bucket=platform.state_bucket, VersioningConfiguration={"Status": "Enabled"})
    made.append(f"s3://{platform.state_bucket} (Terraform state)")
    for team in teams.teams:
        ec2 = endpoint_client(env, "ec2", team.region)
        network = team.network
        ec2.describe_vpcs()  # the region's default VPC and subnets first, with moto's own IDs
        with _ids_from("vpc", [network.vpc_id]):
            ec2.create_vpc(CidrBlock=network.vpc_cidr)
        zones = [z["ZoneName"] for z in ec2.describe_availability_zones()["AvailabilityZones"]]
        blocks = ipaddress.ip_network(network.vpc_cidr).subnets(new_prefix=24)
        with _ids_from("subnet", network.subnet_ids):
            for index, _ in enumerate(network.subnet_ids):
                ec2.create_subnet(
                    VpcId=network.vpc_id, CidrBlock=str(next(blocks)), AvailabilityZone=zones[index % len(zones)]
                )
        made.append(f"{team.name}: {network.vpc_id} ({network.vpc_cidr}), {', '.join(network.subnet_ids)}")
    return made


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.localaws", description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=4566)
    parser.add_argument("--folder", type=Path, default=Path(".local-aws"))
    parser.add_argument("--teams", type=Path, default=TEAMS_FILE)
    parser.add_argument("--env-file", type=Path, help="also write the environment here, as JSON")
    parser.add_argument("--kafka-bootstrap", help="host:port of the broker that stands for MSK here")
    args = parser.parse_args(argv)
    teams = load_teams(args.teams)
    aws = LocalAws(args.folder.resolve(), args.port, args.kafka_bootstrap).start()
    for line in provide_prerequisites(aws, teams):
        print(f"provided {line}", flush=True)
    env = aws.env(teams.platform.state_region)
    if args.env_file:
        args.env_file.write_text(json.dumps(env))
    print(f"local AWS at {aws.endpoint}; point the commands at it with:", flush=True)
    for key, value in env.items():
        print(f"  export {key}={value}", flush=True)
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    with suppress(KeyboardInterrupt):
        stopped.wait()
    aws.stop()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("MOTO_ALLOW_NONEXISTENT_REGION", "false")
    sys.exit(main())
