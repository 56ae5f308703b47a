"""Placeholders in table options and engine properties, and where their values come from.

    ${NAME}              the environment variable NAME; where it is not set and the team has
                         a parameters prefix (on EMR: ``/sql-runner/<env>/<team>/``), the SSM
                         parameter ``<prefix>NAME``
    ${ssm:/path/name}    an SSM Parameter Store parameter (SecureString decrypted)
    ${secret:name}       an AWS Secrets Manager secret's string
    ${secret:name#key}   one field of a secret whose string is a JSON object
    $${                  a literal ``${``

They are resolved only where a job runs: in its driver when it starts (and in the
session, for the queries it hosts). What the runner stores, logs or puts on a command
line keeps the placeholder, never the value. The runner also looks them up before a
deploy, so a placeholder that cannot be resolved stops the deploy with its name.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from pydantic import field_validator

from runner.core.errors import Problem, UserError
from runner.core.part import Part
from runner.core.placeholder_syntax import NAME, PLACEHOLDER, SECRET, SECRET_NAME, SSM, names_in
from runner.core.tables import TableDef

# Properties Spark reads before the driver runs: a placeholder there could only be resolved by
# whoever submits the job, which would put its value on the command line.
LAUNCH_PROPERTY_PREFIXES = (
    "spark.driver.",
    "spark.yarn.",
    "spark.submit.",
    "spark.master",
    "spark.jars",
    "spark.files",
    "spark.archives",
    "spark.pyspark.",
    "spark.app.name",
)
DEFAULT_REDACTION = "(?i)secret|password|token|access[.]?key"  # spark.redaction.regex's default
VALUE_CACHE_SECONDS = 300.0  # a rotated secret is picked up by starts after this long


def is_launch_property(key: str) -> bool:
    """Whether Spark reads ``key`` before the driver runs (so it cannot hold a placeholder)."""
    return key.startswith(LAUNCH_PROPERTY_PREFIXES)


class Sources(Part):
    """Where a job's placeholders come from besides its environment (no values: safe to store and pass on)."""

    parameters_prefix: str | None = None  # ${NAME} not in the environment -> SSM parameter <prefix>NAME
    region: str | None = None  # for SSM and Secrets Manager; None: boto3's default

    @field_validator("parameters_prefix", "region")
    @classmethod
    def _empty_is_none(cls, value: str | None) -> str | None:
        return value or None


class Values(Mapping[str, str]):
    """The values placeholders resolve to, keyed by what is between the braces.

    Environment names come from ``env``; ``ssm:`` and ``secret:`` references (and environment
    names the environment lacks, when ``sources`` has a parameters prefix) are looked up in
    AWS on first use and kept in memory for a few minutes, never written anywhere. A lookup
    AWS refuses (no credentials, access denied) raises ``PLACEHOLDER_LOOKUP_FAILED``; a name
    that does not exist reads as absent. Iterating lists the environment's names only.
    """

    def __init__(self, env: Mapping[str, str], sources: Sources | None = None, *, clients: Any = None):
        self.env = env
        self.sources = sources or Sources()
        self._clients = clients  # (ssm, secretsmanager) boto3 clients; created on first use
        self._cache: dict[str, tuple[float, str | None]] = {}
        self._lock = threading.Lock()

    def __getitem__(self, reference: str) -> str:
        value = self._value(reference)
        if value is None:
            raise KeyError(reference)
        return value

    def __contains__(self, reference: object) -> bool:
        return isinstance(reference, str) and self._value(reference) is not None

    def __iter__(self) -> Iterator[str]:
        return iter(self.env)

    def __len__(self) -> int:
        return len(self.env)

    def _value(self, reference: str) -> str | None:
        if not reference.startswith((SSM, SECRET)):
            if reference in self.env:
                return self.env[reference]
            if not self.sources.parameters_prefix or not NAME.match(reference):
                return None
        with self._lock:
            cached = self._cache.get(reference)
            if cached is not None and time.monotonic() - cached[0] < VALUE_CACHE_SECONDS:
                return cached[1]
        value = self._look_up(reference)
        with self._lock:
            self._cache[reference] = (time.monotonic(), value)
        return value

    def _look_up(self, reference: str) -> str | None:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            if reference.startswith(SECRET):
                match = SECRET_NAME.match(reference[len(SECRET) :])
                if match is None:
                    return None
                return self._secret(match.group(1), match.group(2))
            path = (
                reference[len(SSM) :] if reference.startswith(SSM) else f"{self.sources.parameters_prefix}{reference}"
            )
            return self._parameter(path)
        except ClientError as error:
            code = error.response.get("Error", {}).get("Code", "")
            if code in ("ParameterNotFound", "ResourceNotFoundException", "ParameterVersionNotFound"):
                return None
            raise UserError.of("PLACEHOLDER_LOOKUP_FAILED", reference=reference, reason=code or "refused") from None
        except BotoCoreError as error:
            raise UserError.of("PLACEHOLDER_LOOKUP_FAILED", reference=reference, reason=type(error).__name__) from None

    def _client(self, service: str) -> Any:
        if self._clients is None:
            import boto3

            session = boto3.session.Session(region_name=self.sources.region)  # its own: credentials as now
            self._clients = {name: session.client(name) for name in ("ssm", "secretsmanager")}
        return self._clients[service]

    def _parameter(self, path: str) -> str:
        response = self._client("ssm").get_parameter(Name=path, WithDecryption=True)
        return response["Parameter"]["Value"]

    def _secret(self, name: str, field: str | None) -> str | None:
        response = self._client("secretsmanager").get_secret_value(SecretId=name)
        text = response.get("SecretString")
        if text is None:
            raise UserError.of("PLACEHOLDER_LOOKUP_FAILED", reference=f"secret:{name}", reason="the secret is binary")
        if field is None:
            return text
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        if not isinstance(data, dict):
            raise UserError.of(
                "PLACEHOLDER_LOOKUP_FAILED",
                reference=f"secret:{name}#{field}",
                reason="the secret is not a JSON object",
            )
        value = data.get(field)
        return None if value is None else str(value)


def resolve(
    text: str, values: Mapping[str, str], *, file: str | None = None, field: str | None = None, line: int | None = None
) -> str:
    """Replace every placeholder from ``values``; a missing one is a located user error."""
    missing: list[str] = []

    def substitute(match: re.Match[str]) -> str:
        if match.group(1):
            return "${" + match.group(2) + "}"
        reference = match.group(2)
        if reference not in values:
            missing.append(reference)
            return match.group(0)
        return values[reference]

    resolved = PLACEHOLDER.sub(substitute, text)
    if missing:
        also = f" (also missing: {', '.join(missing[1:])})" if missing[1:] else ""
        raise UserError.of(
            "UNRESOLVED_PLACEHOLDER", file=file, field=field, line=line, subject="", name=missing[0], also=also
        )
    return resolved


def unresolved(items: Mapping[str, str], values: Mapping[str, str]) -> list[tuple[str, str]]:
    """(key, placeholder) pairs in ``items`` whose placeholder ``values`` cannot resolve."""
    return [(key, name) for key, value in items.items() for name in names_in(value) if name not in values]


def table_problems(table: TableDef, values: Mapping[str, str]) -> list[Problem]:
    """One problem per option of ``table`` whose placeholder cannot be resolved."""
    return [
        Problem.of(
            "UNRESOLVED_PLACEHOLDER",
            file=table.file,
            line=table.options_lines.get(key, table.line),
            subject=f"table {table.name} option '{key}': ",
            name=name,
            also="",
        )
        for key, name in unresolved(table.options, values)
    ]


def job_problems(
    spark_properties: Mapping[str, str], file: str | None, tables: Iterable[TableDef], values: Mapping[str, str]
) -> list[Problem]:
    """Placeholders in a job's sparkProperties and in the tables it reads and writes that cannot be resolved."""
    problems = [
        Problem.of("UNRESOLVED_PLACEHOLDER", file=file, field=f"sparkProperties.{key}", subject="", name=name, also="")
        for key, name in unresolved(spark_properties, values)
    ]
    for table in tables:
        problems.extend(table_problems(table, values))
    return problems


def resolved_options(table: TableDef, values: Mapping[str, str]) -> dict[str, str]:
    """Table options with their placeholders resolved (never logged or stored)."""
    return {
        key: resolve(
            value,
            values,
            file=table.file,
            field=f"{table.name} option '{key}'",
            line=table.options_lines.get(key, table.line),
        )
        for key, value in table.options.items()
    }


def split_properties(properties: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(plain, with placeholders): the first may go on a command line, the second is resolved in the driver."""
    plain = {k: v for k, v in properties.items() if not names_in(v)}
    deferred = {k: v for k, v in properties.items() if names_in(v)}
    return plain, deferred


def resolved_properties(properties: Mapping[str, str], values: Mapping[str, str]) -> dict[str, str]:
    """Engine properties with their placeholders resolved (never logged or stored)."""
    return {key: resolve(value, values, field=f"sparkProperties.{key}") for key, value in properties.items()}


def driver_properties(properties: Mapping[str, str], values: Mapping[str, str]) -> dict[str, str]:
    """The properties that hold placeholders, resolved, plus a ``spark.redaction.regex`` that names
    them, so Spark's UI and event log show them redacted whatever their names."""
    resolved = resolved_properties(split_properties(properties)[1], values)
    if resolved:
        names = "|".join(re.escape(key) for key in sorted(resolved))
        base = properties.get("spark.redaction.regex", DEFAULT_REDACTION)
        resolved["spark.redaction.regex"] = f"{base}|^(?:{names})$"
    return resolved
