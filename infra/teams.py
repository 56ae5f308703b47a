"""``infra/teams.yaml``: the platform's settings and one entry per team, validated.

A mistake in the file is reported with the team and field it concerns, and nothing is
synthesised.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

TEAMS_FILE = Path(__file__).parent / "teams.yaml"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


class Platform(_Strict):
    environment: str = Field(pattern=r"^[a-z][a-z0-9-]{1,15}$")
    state_bucket: str = Field(alias="state-bucket", min_length=3)
    state_region: str = Field(alias="state-region")
    budget_alert_emails: list[str] = Field(alias="budget-alert-emails", min_length=1)


class Network(_Strict):
    vpc_id: str = Field(alias="vpc-id", pattern=r"^vpc-[0-9a-f]{8,17}$")
    vpc_cidr: str = Field(alias="vpc-cidr", pattern=r"^\d+\.\d+\.\d+\.\d+/\d+$")
    subnet_ids: list[str] = Field(alias="subnet-ids", min_length=1)

    @field_validator("subnet_ids")
    @classmethod
    def _subnets(cls, value: list[str]) -> list[str]:
        bad = [s for s in value if not re.fullmatch(r"subnet-[0-9a-f]{8,17}", s)]
        if bad:
            raise ValueError(f"not subnet ids: {', '.join(bad)}")
        return value


class Instances(_Strict):
    instance_type: str = Field(alias="instance-type")
    count: int = Field(ge=1, le=50)
    ebs_gib: int = Field(default=64, alias="ebs-gib", ge=32, le=4096)


class Emr(_Strict):
    # emr-spark-8.0.0 runs Spark 4.0.x (the line the runner is built and tested on) with Python 3.11
    release_label: str = Field(alias="release-label", pattern=r"^emr-(spark-)?\d+\.\d+\.\d+$")
    master: Instances
    core: Instances
    max_core_instances: int = Field(alias="max-core-instances", ge=1, le=200)
    step_concurrency: int = Field(alias="step-concurrency", ge=1, le=256)

    @model_validator(mode="after")
    def _scaling(self) -> Emr:
        if self.master.count not in (1, 3):
            raise ValueError("master.count must be 1 or 3 (EMR supports one or three primary nodes)")
        if self.max_core_instances < self.core.count:
            raise ValueError(f"max-core-instances ({self.max_core_instances}) is below core.count ({self.core.count})")
        return self


class Msk(_Strict):
    kafka_version: str = Field(alias="kafka-version")
    broker_instance_type: str = Field(alias="broker-instance-type", pattern=r"^kafka\.")
    brokers: int = Field(ge=2, le=30)
    ebs_gib: int = Field(alias="ebs-gib", ge=1, le=16384)


class Topic(_Strict):
    name: str = Field(pattern=r"^[a-zA-Z0-9._-]{1,249}$")
    partitions: int = Field(ge=1, le=1000)
    replication: int = Field(ge=1, le=5)
    retention_hours: int = Field(alias="retention-hours", ge=1)


class Team(_Strict):
    name: str = Field(pattern=r"^[a-z][a-z0-9-]{1,20}$")
    cost_centre: str = Field(alias="cost-centre", min_length=1)
    region: str = Field(pattern=r"^[a-z]{2}(-[a-z]+)+-\d$")
    budget_usd_per_month: int = Field(alias="budget-usd-per-month", gt=0)
    network: Network
    emr: Emr
    msk: Msk
    topics: list[Topic] = Field(default_factory=list)

    @model_validator(mode="after")
    def _consistent(self) -> Team:
        if self.msk.brokers % len(self.network.subnet_ids):
            raise ValueError(
                f"msk.brokers ({self.msk.brokers}) must be a multiple of the number of subnets "
                f"({len(self.network.subnet_ids)}): MSK spreads brokers evenly across them"
            )
        for topic in self.topics:
            if topic.replication > self.msk.brokers:
                raise ValueError(
                    f"topic {topic.name}: replication {topic.replication} exceeds the {self.msk.brokers} brokers"
                )
        names = [t.name for t in self.topics]
        if len(names) != len(set(names)):
            raise ValueError("topic names repeat")
        return self

    def bucket(self, role: str, environment: str) -> str:
        """S3 bucket names: ``sql-runner-<env>-<team>-<role>`` (globally unique per environment)."""
        return f"sql-runner-{environment}-{self.name}-{role}"


class TeamsFile(_Strict):
    platform: Platform
    teams: list[Team] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique(self) -> TeamsFile:
        names = [t.name for t in self.teams]
        if len(names) != len(set(names)):
            raise ValueError(f"team names repeat: {', '.join(sorted(n for n in set(names) if names.count(n) > 1))}")
        return self

    def team(self, name: str) -> Team:
        for team in self.teams:
            if team.name == name:
                return team
        raise TeamsError(f"no team '{name}' in teams.yaml (teams: {', '.join(t.name for t in self.teams)})")


class TeamsError(Exception):
    """teams.yaml is missing, unreadable or invalid."""


def load_teams(path: Path = TEAMS_FILE) -> TeamsFile:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise TeamsError(f"{path}: cannot read: {error.strerror}") from None
    except yaml.YAMLError as error:
        raise TeamsError(f"{path}: not valid YAML: {error}") from None
    try:
        return TeamsFile.model_validate(data)
    except ValidationError as error:
        lines = []
        for item in error.errors():
            where = ".".join(_where(data, item["loc"]))
            lines.append(f"{path}: {where}: {item['msg']}")
        raise TeamsError("\n".join(lines)) from None


def _where(data: object, loc: tuple) -> list[str]:
    """A location with team names instead of list indexes: teams[risk].emr.master."""
    parts: list[str] = []
    node = data
    for key in loc:
        if isinstance(key, int) and isinstance(node, list):
            item = node[key] if key < len(node) else None
            label = item.get("name") if isinstance(item, dict) and item.get("name") else key
            parts[-1] = f"{parts[-1]}[{label}]" if parts else f"[{label}]"
            node = item
        else:
            parts.append(str(key))
            node = node.get(key) if isinstance(node, dict) else None
    return parts
