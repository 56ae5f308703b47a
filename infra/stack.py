"""One team's AWS environment as two Terraform stacks.

``team-<name>``: KMS key; S3 buckets for manifests, checkpoints, savepoints, artifacts
and logs; the EMR cluster (bootstrap installs the runner; first steps start the team's
session and redeploy every application-mode manifest); the MSK cluster; the deploy Lambda
with its queue and logs; IAM roles limited to this team's resources; a budget filtered by
the team tag.

``team-<name>-topics``: the team's Kafka topics, through the Kafka provider. They live in
a second stack because a Terraform provider's configuration (the brokers to connect to)
must be known before the plan, and the brokers only exist once the first stack is
applied; the second stack looks the cluster up by name.

Every resource carries the default tags team, cost-centre and environment.
"""

from __future__ import annotations

import base64
import json

from cdktf import Fn, S3Backend, TerraformOutput, TerraformResourceLifecycle, TerraformStack
from cdktf_cdktf_provider_aws.budgets_budget import BudgetsBudget, BudgetsBudgetCostFilter, BudgetsBudgetNotification
from cdktf_cdktf_provider_aws.cloudwatch_log_group import CloudwatchLogGroup
from cdktf_cdktf_provider_aws.data_aws_caller_identity import DataAwsCallerIdentity
from cdktf_cdktf_provider_aws.data_aws_msk_bootstrap_brokers import DataAwsMskBootstrapBrokers
from cdktf_cdktf_provider_aws.data_aws_msk_cluster import DataAwsMskCluster
from cdktf_cdktf_provider_aws.emr_cluster import (
    EmrCluster,
    EmrClusterBootstrapAction,
    EmrClusterCoreInstanceGroup,
    EmrClusterCoreInstanceGroupEbsConfig,
    EmrClusterEc2Attributes,
    EmrClusterMasterInstanceGroup,
    EmrClusterMasterInstanceGroupEbsConfig,
    EmrClusterStep,
    EmrClusterStepHadoopJarStep,
)
from cdktf_cdktf_provider_aws.emr_managed_scaling_policy import (
    EmrManagedScalingPolicy,
    EmrManagedScalingPolicyComputeLimits,
)
from cdktf_cdktf_provider_aws.emr_security_configuration import EmrSecurityConfiguration
from cdktf_cdktf_provider_aws.iam_instance_profile import IamInstanceProfile
from cdktf_cdktf_provider_aws.iam_role import IamRole
from cdktf_cdktf_provider_aws.iam_role_policy import IamRolePolicy
from cdktf_cdktf_provider_aws.iam_role_policy_attachment import IamRolePolicyAttachment
from cdktf_cdktf_provider_aws.kms_alias import KmsAlias
from cdktf_cdktf_provider_aws.kms_key import KmsKey
from cdktf_cdktf_provider_aws.lambda_function import (
    LambdaFunction,
    LambdaFunctionDeadLetterConfig,
    LambdaFunctionEnvironment,
    LambdaFunctionLoggingConfig,
    LambdaFunctionTracingConfig,
)
from cdktf_cdktf_provider_aws.lambda_permission import LambdaPermission
from cdktf_cdktf_provider_aws.msk_cluster import (
    MskCluster,
    MskClusterBrokerNodeGroupInfo,
    MskClusterBrokerNodeGroupInfoConnectivityInfo,
    MskClusterBrokerNodeGroupInfoConnectivityInfoPublicAccess,
    MskClusterBrokerNodeGroupInfoStorageInfo,
    MskClusterBrokerNodeGroupInfoStorageInfoEbsStorageInfo,
    MskClusterClientAuthentication,
    MskClusterClientAuthenticationSasl,
    MskClusterEncryptionInfo,
    MskClusterEncryptionInfoEncryptionInTransit,
    MskClusterLoggingInfo,
    MskClusterLoggingInfoBrokerLogs,
    MskClusterLoggingInfoBrokerLogsCloudwatchLogs,
)
from cdktf_cdktf_provider_aws.provider import AwsProvider, AwsProviderDefaultTags
from cdktf_cdktf_provider_aws.s3_bucket import S3Bucket
from cdktf_cdktf_provider_aws.s3_bucket_lifecycle_configuration import (
    S3BucketLifecycleConfiguration,
    S3BucketLifecycleConfigurationRule,
    S3BucketLifecycleConfigurationRuleAbortIncompleteMultipartUpload,
    S3BucketLifecycleConfigurationRuleExpiration,
    S3BucketLifecycleConfigurationRuleFilter,
    S3BucketLifecycleConfigurationRuleNoncurrentVersionExpiration,
)
from cdktf_cdktf_provider_aws.s3_bucket_logging import S3BucketLoggingA
from cdktf_cdktf_provider_aws.s3_bucket_notification import S3BucketNotification, S3BucketNotificationLambdaFunction
from cdktf_cdktf_provider_aws.s3_bucket_ownership_controls import (
    S3BucketOwnershipControls,
    S3BucketOwnershipControlsRule,
)
from cdktf_cdktf_provider_aws.s3_bucket_policy import S3BucketPolicy
from cdktf_cdktf_provider_aws.s3_bucket_public_access_block import S3BucketPublicAccessBlock
from cdktf_cdktf_provider_aws.s3_bucket_server_side_encryption_configuration import (
    S3BucketServerSideEncryptionConfigurationA,
    S3BucketServerSideEncryptionConfigurationRuleA,
    S3BucketServerSideEncryptionConfigurationRuleApplyServerSideEncryptionByDefaultA,
)
from cdktf_cdktf_provider_aws.s3_bucket_versioning import (
    S3BucketVersioningA,
    S3BucketVersioningVersioningConfiguration,
)
from cdktf_cdktf_provider_aws.s3_object import S3Object
from cdktf_cdktf_provider_aws.security_group import SecurityGroup, SecurityGroupEgress, SecurityGroupIngress
from cdktf_cdktf_provider_aws.sqs_queue import SqsQueue
from cdktf_cdktf_provider_aws.ssm_parameter import SsmParameter
from constructs import Construct

from infra import console_metrics
from infra.kafka import KafkaProvider, KafkaTopic
from infra.package import BOOTSTRAP_KEY, LAMBDA_ZIP_KEY
from infra.teams import Platform, Team
from jobs.kafka import PLATFORM_DEFAULTS_PREFIX
from runner.aws import deploy_lambda
from runner.aws.steps import StepCommand
from runner.core import layout
from runner.targets.yarn import YARN_MAX_ATTEMPTS

BUCKET_ROLES = ("logs", "manifests", "checkpoints", "savepoints", "artifacts")  # logs first: the others log to it
ROCKSDB_STATE_STORE = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
NONCURRENT_DAYS = {"manifests": 90, "checkpoints": 7, "savepoints": 30, "artifacts": 30, "logs": 30}
MSK_BOOTSTRAP_PARAMETER = "MSK_BOOTSTRAP_SERVERS"  # what ${MSK_BOOTSTRAP_SERVERS} in a Kafka table resolves to
# What every Kafka client of the team's jobs needs to reach MSK with IAM authentication (the
# aws-msk-iam-auth library the bootstrap installs provides the two classes).
MSK_IAM_CLIENT = {
    "properties.security.protocol": "SASL_SSL",
    "properties.sasl.mechanism": "AWS_MSK_IAM",
    "properties.sasl.jaas.config": "software.amazon.msk.auth.iam.IAMLoginModule required;",
    "properties.sasl.client.callback.handler.class": "software.amazon.msk.auth.iam.IAMClientCallbackHandler",
}


def default_tags(platform: Platform, team: Team) -> dict[str, str]:
    return {
        "team": team.name,
        "cost-centre": team.cost_centre,
        "environment": platform.environment,
        "managed-by": "sql-runner-infra",
    }


def prefix(platform: Platform, team: Team) -> str:
    return f"sql-runner-{platform.environment}-{team.name}"


def _policy(*statements: dict) -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": list(statements)})


def _assume(service: str) -> str:
    return _policy({"Effect": "Allow", "Principal": {"Service": service}, "Action": "sts:AssumeRole"})


class TeamStack(TerraformStack):
    def __init__(self, scope: Construct, platform: Platform, team: Team):
        super().__init__(scope, f"team-{team.name}")
        self.platform, self.team = platform, team
        self.name = prefix(platform, team)
        self._provider_and_backend(f"teams/{team.name}/terraform.tfstate")
        self.account = DataAwsCallerIdentity(self, "account").account_id
        self.key = self._kms_key()
        self.buckets: dict[str, S3Bucket] = {}
        for role in BUCKET_ROLES:
            self.buckets[role] = self._bucket(role)
        self.msk_security_group, self.emr_groups = self._security_groups()
        self.msk = self._msk()
        self.msk_bootstrap = self._parameters()
        self.metrics_logs = CloudwatchLogGroup(
            self,
            "metrics-logs",
            name=f"/sql-runner/{self.name}/metrics",
            retention_in_days=365,
            kms_key_id=self.key.arn,
        )
        self.instance_role, self.service_role = self._emr_roles()
        self.emr = self._emr()
        self.deploy_function = self._deploy_lambda()
        self._budget()
        TerraformOutput(self, "emr_cluster_id", value=self.emr.id)
        TerraformOutput(self, "msk_cluster_arn", value=self.msk.arn)
        for role, bucket in self.buckets.items():
            TerraformOutput(self, f"{role}_bucket", value=bucket.bucket)

    # ---- provider, key, buckets -------------------------------------------------------------------------

    def _provider_and_backend(self, state_key: str) -> None:
        AwsProvider(
            self,
            "aws",
            region=self.team.region,
            default_tags=[AwsProviderDefaultTags(tags=default_tags(self.platform, self.team))],
        )
        S3Backend(
            self, bucket=self.platform.state_bucket, key=state_key, region=self.platform.state_region, encrypt=True
        )
        self.add_override("terraform.backend.s3.use_lockfile", True)  # S3-native state locking

    def _kms_key(self) -> KmsKey:
        key = KmsKey(
            self,
            "key",
            description=f"{self.name}: buckets, logs, queue, MSK and EMR disks",
            enable_key_rotation=True,
            deletion_window_in_days=30,
            policy=_policy(
                {
                    "Sid": "AccountAdministers",
                    "Effect": "Allow",
                    "Principal": {"AWS": f"arn:aws:iam::{self.account}:root"},
                    "Action": "kms:*",
                    "Resource": "*",
                },
                {
                    "Sid": "LogsEncrypt",
                    "Effect": "Allow",
                    "Principal": {"Service": f"logs.{self.team.region}.amazonaws.com"},
                    "Action": [
                        "kms:Encrypt*",
                        "kms:Decrypt*",
                        "kms:ReEncrypt*",
                        "kms:GenerateDataKey*",
                        "kms:Describe*",
                    ],
                    "Resource": "*",
                },
            ),
        )
        KmsAlias(self, "key-alias", name=f"alias/{self.name}", target_key_id=key.key_id)
        return key

    def _bucket(self, role: str) -> S3Bucket:
        bucket = S3Bucket(
            self, f"{role}-bucket", bucket=self.team.bucket(role, self.platform.environment), force_destroy=False
        )
        S3BucketOwnershipControls(
            self,
            f"{role}-ownership",
            bucket=bucket.id,
            rule=S3BucketOwnershipControlsRule(object_ownership="BucketOwnerEnforced"),
        )
        S3BucketPublicAccessBlock(
            self,
            f"{role}-public-access",
            bucket=bucket.id,
            block_public_acls=True,
            block_public_policy=True,
            ignore_public_acls=True,
            restrict_public_buckets=True,
        )
        S3BucketVersioningA(
            self,
            f"{role}-versioning",
            bucket=bucket.id,
            versioning_configuration=S3BucketVersioningVersioningConfiguration(status="Enabled"),
        )
        by_default = S3BucketServerSideEncryptionConfigurationRuleApplyServerSideEncryptionByDefaultA(
            sse_algorithm="aws:kms", kms_master_key_id=self.key.arn
        )
        S3BucketServerSideEncryptionConfigurationA(
            self,
            f"{role}-encryption",
            bucket=bucket.id,
            rule=[
                S3BucketServerSideEncryptionConfigurationRuleA(
                    apply_server_side_encryption_by_default=by_default, bucket_key_enabled=True
                )
            ],
        )
        policy = S3BucketPolicy(
            self,
            f"{role}-tls-only",
            bucket=bucket.id,
            policy=_policy(
                {
                    "Sid": "DenyInsecureTransport",
                    "Effect": "Deny",
                    "Principal": "*",
                    "Action": "s3:*",
                    "Resource": [bucket.arn, f"{bucket.arn}/*"],
                    "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                },
                # S3's log delivery, for each of the team's buckets into its own prefix, from that bucket only
                *(
                    {
                        "Sid": f"AccessLogDelivery{source.capitalize()}",
                        "Effect": "Allow",
                        "Principal": {"Service": "logging.s3.amazonaws.com"},
                        "Action": "s3:PutObject",
                        "Resource": f"{bucket.arn}/s3-access/{source}/*",
                        "Condition": {
                            "StringEquals": {"aws:SourceAccount": self.account},
                            "ArnLike": {
                                "aws:SourceArn": f"arn:aws:s3:::{self.team.bucket(source, self.platform.environment)}"
                            },
                        },
                    }
                    for source in (BUCKET_ROLES if role == "logs" else ())
                    if source != "logs"
                ),
            ),
        )
        if role == "logs":
            self.log_delivery = policy
        rules = [
            S3BucketLifecycleConfigurationRule(
                id="expire-noncurrent-versions",
                status="Enabled",
                filter=[S3BucketLifecycleConfigurationRuleFilter(prefix="")],
                noncurrent_version_expiration=[
                    S3BucketLifecycleConfigurationRuleNoncurrentVersionExpiration(noncurrent_days=NONCURRENT_DAYS[role])
                ],
                abort_incomplete_multipart_upload=[
                    S3BucketLifecycleConfigurationRuleAbortIncompleteMultipartUpload(days_after_initiation=7)
                ],
            )
        ]
        expiring = {
            "manifests": (layout.DEPLOY_REQUESTS_PREFIX, 30),  # the Lambda's claims of handled S3 events
            "logs": ("", 90),
        }
        if role in expiring:
            where, days = expiring[role]
            rules.append(
                S3BucketLifecycleConfigurationRule(
                    id=f"expire-{where.strip('/') or 'logs'}",
                    status="Enabled",
                    filter=[S3BucketLifecycleConfigurationRuleFilter(prefix=where)],
                    expiration=[S3BucketLifecycleConfigurationRuleExpiration(days=days)],
                )
            )
        S3BucketLifecycleConfiguration(self, f"{role}-lifecycle", bucket=bucket.id, rule=rules)
        if role != "logs":
            S3BucketLoggingA(
                self,
                f"{role}-access-logs",
                bucket=bucket.id,
                target_bucket=self.buckets["logs"].id,
                target_prefix=f"s3-access/{role}/",
                depends_on=[self.log_delivery],  # S3 accepts logging into a bucket that lets it deliver
            )
        return bucket

    # ---- network --------------------------------------------------------------------------------------

    def _security_groups(self) -> tuple[SecurityGroup, dict[str, SecurityGroup]]:
        vpc = self.team.network.vpc_id
        emr = {
            kind: SecurityGroup(
                self,
                f"emr-{kind}-sg",
                name=f"{self.name}-emr-{kind}",
                vpc_id=vpc,
                description=f"EMR-managed rules for the {kind} nodes of {self.name}",
                revoke_rules_on_delete=True,
            )
            for kind in ("primary", "core", "service-access")
        }
        msk = SecurityGroup(
            self,
            "msk-sg",
            name=f"{self.name}-msk",
            vpc_id=vpc,
            description=f"Kafka over TLS with IAM auth for the EMR nodes of {self.name}",
            ingress=[
                SecurityGroupIngress(
                    description="Kafka IAM/TLS from the EMR nodes of the team",
                    from_port=9098,
                    to_port=9098,
                    protocol="tcp",
                    security_groups=[emr["primary"].id, emr["core"].id],
                )
            ],
            egress=[
                SecurityGroupEgress(
                    description="replies and broker traffic inside the VPC",
                    from_port=0,
                    to_port=0,
                    protocol="-1",
                    cidr_blocks=[self.team.network.vpc_cidr],
                )
            ],
        )
        return msk, emr

    # ---- MSK ------------------------------------------------------------------------------------------

    def _msk(self) -> MskCluster:
        logs = CloudwatchLogGroup(
            self, "msk-logs", name=f"/aws/msk/{self.name}", retention_in_days=365, kms_key_id=self.key.arn
        )
        msk = self.team.msk
        return MskCluster(
            self,
            "msk",
            cluster_name=self.name,
            kafka_version=msk.kafka_version,
            number_of_broker_nodes=msk.brokers,
            enhanced_monitoring="PER_TOPIC_PER_BROKER",
            broker_node_group_info=MskClusterBrokerNodeGroupInfo(
                instance_type=msk.broker_instance_type,
                client_subnets=self.team.network.subnet_ids,
                security_groups=[self.msk_security_group.id],
                storage_info=MskClusterBrokerNodeGroupInfoStorageInfo(
                    ebs_storage_info=MskClusterBrokerNodeGroupInfoStorageInfoEbsStorageInfo(volume_size=msk.ebs_gib)
                ),
                connectivity_info=MskClusterBrokerNodeGroupInfoConnectivityInfo(
                    public_access=MskClusterBrokerNodeGroupInfoConnectivityInfoPublicAccess(type="DISABLED")
                ),
            ),
            encryption_info=MskClusterEncryptionInfo(
                encryption_at_rest_kms_key_arn=self.key.arn,
                encryption_in_transit=MskClusterEncryptionInfoEncryptionInTransit(client_broker="TLS", in_cluster=True),
            ),
            client_authentication=MskClusterClientAuthentication(
                sasl=MskClusterClientAuthenticationSasl(iam=True), unauthenticated=False
            ),
            logging_info=MskClusterLoggingInfo(
                broker_logs=MskClusterLoggingInfoBrokerLogs(
                    cloudwatch_logs=MskClusterLoggingInfoBrokerLogsCloudwatchLogs(enabled=True, log_group=logs.name)
                )
            ),
        )

    # ---- parameters and secrets ---------------------------------------------------------------------

    @property
    def parameters_prefix(self) -> str:
        """The team's SSM parameters: ``${NAME}`` placeholders not in a job's environment resolve here."""
        return f"/{self.name}/"

    @property
    def secrets_prefix(self) -> str:
        """The team's Secrets Manager secrets (``${secret:<prefix>name}``): the only ones its jobs may read."""
        return f"{self.name}/"

    def _parameters(self) -> SsmParameter:
        """MSK's IAM bootstrap address as a team parameter, so docs/aws.md's ``${MSK_BOOTSTRAP_SERVERS}`` resolves
        in every driver (YARN's included) without anyone exporting it."""
        return SsmParameter(
            self,
            "msk-bootstrap",
            name=f"{self.parameters_prefix}{MSK_BOOTSTRAP_PARAMETER}",
            description=f"{self.name}: MSK bootstrap brokers (SASL/IAM, port 9098)",
            type="SecureString",
            key_id=self.key.arn,
            value=self.msk.bootstrap_brokers_sasl_iam,
        )

    def topic_arn(self, topic: str) -> str:
        return f"arn:aws:kafka:{self.team.region}:{self.account}:topic/{self.name}/*/{topic}"

    # ---- EMR ------------------------------------------------------------------------------------------

    def _bucket_access(self, roles: tuple[str, ...], actions: list[str]) -> dict:
        resources = [r for role in roles for r in (self.buckets[role].arn, f"{self.buckets[role].arn}/*")]
        return {"Effect": "Allow", "Action": actions, "Resource": resources}

    def _emr_roles(self) -> tuple[IamRole, IamRole]:
        instance = IamRole(
            self, "emr-instance-role", name=f"{self.name}-emr-instance", assume_role_policy=_assume("ec2.amazonaws.com")
        )
        IamRolePolicy(
            self,
            "emr-instance-policy",
            role=instance.id,
            name="team-resources-only",
            policy=_policy(
                self._bucket_access(
                    ("manifests", "checkpoints", "savepoints"),
                    [
                        "s3:GetObject",
                        "s3:GetObjectVersion",
                        "s3:PutObject",
                        "s3:DeleteObject",
                        "s3:ListBucket",
                        "s3:GetBucketLocation",
                    ],
                ),
                self._bucket_access(("artifacts",), ["s3:GetObject", "s3:ListBucket"]),
                {"Effect": "Allow", "Action": ["s3:PutObject"], "Resource": [f"{self.buckets['logs'].arn}/emr/*"]},
                {
                    "Effect": "Allow",
                    "Action": ["kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey*", "kms:DescribeKey"],
                    "Resource": [self.key.arn],
                },
                {
                    "Effect": "Allow",
                    "Action": ["ssm:GetParameter", "ssm:GetParameters"],
                    "Resource": [
                        f"arn:aws:ssm:{self.team.region}:{self.account}:parameter{self.parameters_prefix}*",
                        self.msk_bootstrap.arn,
                    ],
                },
                {
                    "Effect": "Allow",
                    "Action": ["secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret"],
                    "Resource": [
                        f"arn:aws:secretsmanager:{self.team.region}:{self.account}:secret:{self.secrets_prefix}*"
                    ],
                },
                {
                    # the CloudWatch agent on the primary node ships the console's /metrics (infra/console_metrics.py)
                    "Effect": "Allow",
                    "Action": ["logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"],
                    "Resource": [f"{self.metrics_logs.arn}:*"],
                },
                {
                    "Effect": "Allow",
                    "Action": ["kafka-cluster:Connect", "kafka-cluster:DescribeCluster"],
                    "Resource": [self.msk.arn],
                },
                {
                    "Effect": "Allow",
                    "Action": ["kafka-cluster:DescribeTopic", "kafka-cluster:ReadData", "kafka-cluster:WriteData"],
                    "Resource": [self.topic_arn(t.name) for t in self.team.topics] or [self.topic_arn("none")],
                },
                {
                    "Effect": "Allow",
                    "Action": ["kafka-cluster:AlterGroup", "kafka-cluster:DescribeGroup"],
                    "Resource": [f"arn:aws:kafka:{self.team.region}:{self.account}:group/{self.name}/*/*"],
                },
            ),
        )
        self.instance_profile = IamInstanceProfile(
            self, "emr-instance-profile", name=f"{self.name}-emr-instance", role=instance.name
        )
        service = IamRole(
            self,
            "emr-service-role",
            name=f"{self.name}-emr-service",
            assume_role_policy=_assume("elasticmapreduce.amazonaws.com"),
        )
        # AWS's v2 service policy acts only on resources tagged for-use-with-amazon-emr-managed-policies.
        IamRolePolicyAttachment(
            self,
            "emr-service-managed",
            role=service.name,
            policy_arn="arn:aws:iam::aws:policy/service-role/AmazonEMRServicePolicy_v2",
        )
        IamRolePolicy(
            self,
            "emr-service-pass-role",
            role=service.id,
            name="pass-the-team-instance-role",
            policy=_policy(
                {
                    "Effect": "Allow",
                    "Action": "iam:PassRole",
                    "Resource": [instance.arn],
                    "Condition": {"StringLike": {"iam:PassedToService": "ec2.amazonaws.com*"}},
                },
                {"Effect": "Allow", "Action": ["kms:CreateGrant", "kms:DescribeKey"], "Resource": [self.key.arn]},
            ),
        )
        return instance, service

    @property
    def first_steps(self) -> list[tuple[str, list[str]]]:
        """The cluster's first steps: start the team's session (it applies every ``mode: session`` manifest
        by itself and watches ``manifests/``), then resume every application-mode job from its saved state."""
        return [
            (
                "sql-runner session start (hosts every session-mode query)",
                # the driver runs on a core node: previews reach its endpoint over the cluster's private
                # network (EMR's managed security groups), with the token from the state store
                self.step_command.args("session start", "--control-address", "0.0.0.0"),
            ),
            (
                "sql-runner deploy --all --mode application (resume every application-mode job from its saved state)",
                self.step_command.args("deploy", "--all", "--mode", "application"),
            ),
        ]

    @property
    def step_command(self) -> StepCommand:
        """How EMR steps run the runner: the cluster's first steps here, the Lambda's steps later."""
        return StepCommand(
            self.team.name,
            self.buckets["manifests"].bucket,
            self.buckets["checkpoints"].bucket,
            self.buckets["savepoints"].bucket,
            parameters_prefix=self.parameters_prefix,
            region=self.team.region,
        )

    def _console_files(self) -> list[S3Object]:
        """The console service's and the CloudWatch agent's files, and the script installing them."""
        artifacts = self.buckets["artifacts"].bucket
        wanted = console_metrics.files(self.team.name, self.metrics_logs.name, self.step_command)
        made = [
            S3Object(
                self,
                f"console-{name.replace('.', '-')}",
                bucket=artifacts,
                key=f"{console_metrics.CONFIG_PREFIX}{name}",
                content=content,
                kms_key_id=self.key.arn,
            )
            for name, content in wanted.items()
        ]
        made.append(
            S3Object(
                self,
                "console-metrics-script",
                bucket=artifacts,
                key=console_metrics.SCRIPT_KEY,
                # as base64: Terraform would read the script's own ${...} as its interpolations
                content_base64=base64.b64encode(console_metrics.SCRIPT.read_bytes()).decode(),
                kms_key_id=self.key.arn,
            )
        )
        return made

    def _emr(self) -> EmrCluster:
        emr = self.team.emr
        artifacts = self.buckets["artifacts"].bucket
        console_files = self._console_files()
        security = EmrSecurityConfiguration(
            self,
            "emr-security",
            name=f"{self.name}-encryption",
            configuration=json.dumps(
                {
                    "EncryptionConfiguration": {
                        "EnableAtRestEncryption": True,
                        "EnableInTransitEncryption": False,
                        "AtRestEncryptionConfiguration": {
                            "S3EncryptionConfiguration": {"EncryptionMode": "SSE-KMS", "AwsKmsKey": self.key.arn},
                            "LocalDiskEncryptionConfiguration": {
                                "EncryptionKeyProviderType": "AwsKms",
                                "AwsKmsKey": self.key.arn,
                                "EnableEbsEncryption": True,
                            },
                        },
                    }
                }
            ),
        )
        cluster = EmrCluster(
            self,
            "emr",
            name=self.name,
            release_label=emr.release_label,
            applications=["Spark"],
            service_role=self.service_role.arn,
            security_configuration=security.name,
            log_uri=f"s3://{self.buckets['logs'].bucket}/emr/",
            step_concurrency_level=emr.step_concurrency,
            keep_job_flow_alive_when_no_steps=True,
            termination_protection=True,
            ebs_root_volume_size=32,
            ec2_attributes=EmrClusterEc2Attributes(
                subnet_id=self.team.network.subnet_ids[0],
                instance_profile=self.instance_profile.arn,
                emr_managed_master_security_group=self.emr_groups["primary"].id,
                emr_managed_slave_security_group=self.emr_groups["core"].id,
                service_access_security_group=self.emr_groups["service-access"].id,
            ),
            master_instance_group=EmrClusterMasterInstanceGroup(
                instance_type=emr.master.instance_type,
                instance_count=emr.master.count,
                ebs_config=[
                    EmrClusterMasterInstanceGroupEbsConfig(size=emr.master.ebs_gib, type="gp3", volumes_per_instance=1)
                ],
            ),
            core_instance_group=EmrClusterCoreInstanceGroup(
                instance_type=emr.core.instance_type,
                instance_count=emr.core.count,
                ebs_config=[
                    EmrClusterCoreInstanceGroupEbsConfig(size=emr.core.ebs_gib, type="gp3", volumes_per_instance=1)
                ],
            ),
            bootstrap_action=[
                EmrClusterBootstrapAction(
                    name="install sql-runner and the Kafka connector",
                    path=f"s3://{artifacts}/{BOOTSTRAP_KEY}",
                    args=[f"s3://{artifacts}/runner/", f"s3://{artifacts}/jars/"],
                ),
                EmrClusterBootstrapAction(
                    name="the console on the primary node, its metrics to CloudWatch",
                    path=f"s3://{artifacts}/{console_metrics.SCRIPT_KEY}",
                    args=[f"s3://{artifacts}/{console_metrics.CONFIG_PREFIX}"],
                ),
            ],
            step=[
                EmrClusterStep(
                    name=name,
                    action_on_failure="CONTINUE",
                    hadoop_jar_step=[EmrClusterStepHadoopJarStep(jar="command-runner.jar", args=args)],
                )
                for name, args in self.first_steps
            ],
            configurations_json=json.dumps(
                [
                    {
                        "Classification": "spark-defaults",
                        "Properties": {
                            "spark.jars": "/usr/lib/sql-runner/jars/*",
                            "spark.pyspark.python": "/usr/bin/python3.11",  # where the bootstrap installed the runner
                            "spark.sql.streaming.stateStore.providerClass": ROCKSDB_STATE_STORE,
                            **{f"{PLATFORM_DEFAULTS_PREFIX}{key}": value for key, value in MSK_IAM_CLIENT.items()},
                        },
                    },
                    {
                        # jobs ask for up to this many application attempts (restart-strategy); YARN's default is 2
                        "Classification": "yarn-site",
                        "Properties": {"yarn.resourcemanager.am.max-attempts": str(YARN_MAX_ATTEMPTS)},
                    },
                ]
            ),
            tags={"for-use-with-amazon-emr-managed-policies": "true"},
            lifecycle=TerraformResourceLifecycle(ignore_changes=["step"]),  # the deploy Lambda adds steps
            depends_on=[self.instance_role, self.instance_profile, self.msk_bootstrap, *console_files],
        )
        EmrManagedScalingPolicy(
            self,
            "emr-scaling",
            cluster_id=cluster.id,
            compute_limits=[
                EmrManagedScalingPolicyComputeLimits(
                    unit_type="Instances",
                    minimum_capacity_units=emr.core.count + emr.master.count,
                    maximum_capacity_units=emr.max_core_instances + emr.master.count,
                    maximum_core_capacity_units=emr.max_core_instances,
                )
            ],
        )
        return cluster

    # ---- deploy Lambda --------------------------------------------------------------------------------

    def _deploy_lambda(self) -> LambdaFunction:
        function_name = f"{self.name}-deploy"
        manifests = self.buckets["manifests"]
        queue = SqsQueue(
            self,
            "deploy-dlq",
            name=f"{function_name}-dlq",
            kms_master_key_id=self.key.arn,
            message_retention_seconds=14 * 24 * 3600,
        )
        logs = CloudwatchLogGroup(
            self, "deploy-logs", name=f"/aws/lambda/{function_name}", retention_in_days=365, kms_key_id=self.key.arn
        )
        role = IamRole(self, "deploy-role", name=function_name, assume_role_policy=_assume("lambda.amazonaws.com"))
        cluster_arn = f"arn:aws:elasticmapreduce:{self.team.region}:{self.account}:cluster/{self.emr.id}"
        IamRolePolicy(
            self,
            "deploy-policy",
            role=role.id,
            name="team-resources-only",
            policy=_policy(
                {
                    "Effect": "Allow",
                    "Action": ["s3:GetObject", "s3:GetObjectVersion"],
                    # the desired manifests, and the deployed records (does a job run in the session?)
                    "Resource": [
                        f"{manifests.arn}/{layout.DESIRED_PREFIX}*",
                        f"{manifests.arn}/{layout.DEPLOYED_PREFIX}*",
                    ],
                },
                {
                    "Effect": "Allow",
                    "Action": ["s3:PutObject", "s3:DeleteObject"],
                    "Resource": [
                        f"{manifests.arn}/{layout.DEPLOY_ERRORS_PREFIX}*",
                        f"{manifests.arn}/{layout.DEPLOY_REQUESTS_PREFIX}*",
                    ],
                },
                {
                    "Effect": "Allow",
                    "Action": ["elasticmapreduce:AddJobFlowSteps", "elasticmapreduce:ListSteps"],
                    "Resource": [cluster_arn],
                },
                {"Effect": "Allow", "Action": "sqs:SendMessage", "Resource": [queue.arn]},
                {"Effect": "Allow", "Action": ["kms:Decrypt", "kms:GenerateDataKey"], "Resource": [self.key.arn]},
                {
                    "Effect": "Allow",
                    "Action": ["logs:CreateLogStream", "logs:PutLogEvents"],
                    "Resource": [f"{logs.arn}:*"],
                },
                {"Effect": "Allow", "Action": ["xray:PutTraceSegments", "xray:PutTelemetryRecords"], "Resource": "*"},
            ),
        )
        function = LambdaFunction(
            self,
            "deploy",
            function_name=function_name,
            role=role.arn,
            runtime="python3.11",
            handler=f"{deploy_lambda.__name__}.{deploy_lambda.handler.__name__}",
            s3_bucket=self.buckets["artifacts"].bucket,
            s3_key=LAMBDA_ZIP_KEY,
            timeout=60,
            memory_size=256,
            reserved_concurrent_executions=5,
            kms_key_arn=self.key.arn,
            dead_letter_config=LambdaFunctionDeadLetterConfig(target_arn=queue.arn),
            tracing_config=LambdaFunctionTracingConfig(mode="Active"),
            logging_config=LambdaFunctionLoggingConfig(log_format="JSON", log_group=logs.name),
            environment=LambdaFunctionEnvironment(
                variables={
                    "CLUSTER_ID": self.emr.id,
                    "TEAM": self.team.name,
                    "MANIFESTS_BUCKET": manifests.bucket,
                    "CHECKPOINTS_BUCKET": self.buckets["checkpoints"].bucket,
                    "SAVEPOINTS_BUCKET": self.buckets["savepoints"].bucket,
                    "SQL_RUNNER": self.step_command.sql_runner,
                    "SPARK_SUBMIT": self.step_command.spark_submit,
                    "PARAMETERS_PREFIX": self.parameters_prefix,
                }
            ),
            depends_on=[logs],
        )
        permission = LambdaPermission(
            self,
            "deploy-from-s3",
            statement_id="deploy-on-manifest-change",
            action="lambda:InvokeFunction",
            function_name=function.function_name,
            principal="s3.amazonaws.com",
            source_arn=manifests.arn,
            source_account=self.account,
        )
        S3BucketNotification(
            self,
            "manifests-notification",
            bucket=manifests.id,
            lambda_function=[
                S3BucketNotificationLambdaFunction(
                    id="deploy-on-manifest-change",
                    lambda_function_arn=function.arn,
                    events=["s3:ObjectCreated:*", "s3:ObjectRemoved:*"],
                    filter_prefix=layout.DESIRED_PREFIX,
                )
            ],
            depends_on=[permission],
        )
        return function

    # ---- budget ---------------------------------------------------------------------------------------

    def _budget(self) -> None:
        BudgetsBudget(
            self,
            "budget",
            name=self.name,
            budget_type="COST",
            time_unit="MONTHLY",
            limit_amount=str(self.team.budget_usd_per_month),
            limit_unit="USD",
            cost_filter=[BudgetsBudgetCostFilter(name="TagKeyValue", values=[f"user:team${self.team.name}"])],
            notification=[
                BudgetsBudgetNotification(
                    comparison_operator="GREATER_THAN",
                    threshold=threshold,
                    threshold_type="PERCENTAGE",
                    notification_type=kind,
                    subscriber_email_addresses=self.platform.budget_alert_emails,
                )
                for threshold, kind in ((80, "FORECASTED"), (100, "ACTUAL"))
            ],
        )


class TopicsStack(TerraformStack):
    """The team's Kafka topics, on the MSK cluster the team stack created (looked up by name)."""

    def __init__(self, scope: Construct, platform: Platform, team: Team):
        super().__init__(scope, f"team-{team.name}-topics")
        name = prefix(platform, team)
        AwsProvider(
            self, "aws", region=team.region, default_tags=[AwsProviderDefaultTags(tags=default_tags(platform, team))]
        )
        S3Backend(
            self,
            bucket=platform.state_bucket,
            key=f"teams/{team.name}/topics.tfstate",
            region=platform.state_region,
            encrypt=True,
        )
        self.add_override("terraform.backend.s3.use_lockfile", True)
        cluster = DataAwsMskCluster(self, "cluster", cluster_name=name)
        brokers = DataAwsMskBootstrapBrokers(self, "brokers", cluster_arn=cluster.arn)
        kafka = KafkaProvider(
            self, "kafka", region=team.region, bootstrap_servers=Fn.split(",", brokers.bootstrap_brokers_sasl_iam)
        )
        for topic in team.topics:
            KafkaTopic(
                self,
                f"topic-{topic.name}",
                provider=kafka,
                name=topic.name,
                partitions=topic.partitions,
                replication_factor=topic.replication,
                config={
                    "retention.ms": str(topic.retention_hours * 3600 * 1000),
                    "min.insync.replicas": str(min(2, topic.replication)),
                    "cleanup.policy": "delete",
                },
            )
