"""A small binding for the Kafka Terraform provider (Mongey/kafka): the provider and ``kafka_topic``.

The AWS provider has no resource for topics inside an MSK cluster, and no prebuilt cdktf
package exists for the Kafka provider, so these two classes write exactly the blocks
Terraform expects and nothing more.
"""

from __future__ import annotations

from typing import Any

from cdktf import TerraformProvider, TerraformProviderGeneratorMetadata, TerraformResource
from constructs import Construct

SOURCE = "Mongey/kafka"
VERSION = "0.13.1"


class KafkaProvider(TerraformProvider):
    """Connects to MSK with IAM authentication over TLS (port 9098)."""

    def __init__(self, scope: Construct, id_: str, *, bootstrap_servers: Any, region: str):
        super().__init__(
            scope,
            id_,
            terraform_resource_type="kafka",
            terraform_provider_source=SOURCE,
            terraform_generator_metadata=TerraformProviderGeneratorMetadata(
                provider_name="kafka", provider_version_constraint=VERSION
            ),
        )
        self._attributes = {
            "bootstrap_servers": bootstrap_servers,
            "tls_enabled": True,
            "sasl_mechanism": "aws-iam",
            "sasl_aws_region": region,
        }

    def _synthesize_attributes(self) -> dict[str, Any]:
        return self._attributes


class KafkaTopic(TerraformResource):
    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        provider: KafkaProvider,
        name: str,
        partitions: int,
        replication_factor: int,
        config: dict[str, str],
    ):
        super().__init__(
            scope,
            id_,
            terraform_resource_type="kafka_topic",
            provider=provider,
            terraform_generator_metadata=TerraformProviderGeneratorMetadata(provider_name="kafka"),
        )
        self._attributes = {
            "name": name,
            "partitions": partitions,
            "replication_factor": replication_factor,
            "config": config,
        }

    def _synthesize_attributes(self) -> dict[str, Any]:
        return self._attributes
