"""``deployed/<name>.yaml``: what is deployed under a name, written by the runner's executor only.

The merged manifest with its ``meta``, plus a ``deployment`` section: the table definitions the query
was deployed with (so a later DDL edit is seen as a change), the run folder in use, the target, where
the version's sources started, and whether the job was removed. It is written in YAML's JSON form (any
YAML reader reads it; the runner reads it as JSON, much faster) and read in either form (an earlier
runner wrote block YAML, and a person may edit it). ``runner/state/records.py`` reads and lists them.

A record of the release before it was a document (no ``schema``; a table's ``primary_key`` and
``partitioned_by``) reads as this release's.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Self

import yaml
from pydantic import ValidationError, model_serializer, model_validator

from runner.core.manifest import Manifest
from runner.core.protocol.document import Document
from runner.core.starts import SourceTable
from runner.core.stateref import StateRef
from runner.core.tables import TableDef

# A record written before records were written in JSON form is read as YAML (libyaml's loader where PyYAML
# has it).
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class DeploymentRecord(Document):
    """Written as the manifest's keys, ``schema``, and the other fields in the ``deployment`` section (with
    ``status``, ``active`` or ``removed``, for ``removed``)."""

    manifest: Manifest  # merged, with meta
    run_id: str
    target: str
    deployed_at: datetime
    removed: bool = False
    sources: tuple[SourceTable, ...] = ()
    continued_from: StateRef | None = None
    tables: tuple[TableDef, ...] = ()  # read and written, as deployed

    @property
    def name(self) -> str:
        return self.manifest.name

    @property
    def version(self) -> int:
        assert self.manifest.meta is not None
        return self.manifest.meta.query_version

    @model_serializer(mode="wrap")
    def _as_written(self, fields: Any) -> dict[str, Any]:
        deployment = dict(fields(self))
        manifest, schema = deployment.pop("manifest"), deployment.pop("schema", None)
        status = "removed" if deployment.pop("removed") else "active"
        stamp = {"schema": schema} if schema is not None else {}
        return {**manifest, **stamp, "deployment": {"status": status, **deployment}}

    @model_validator(mode="before")
    @classmethod
    def _as_read(cls, data: Any) -> Any:
        if not isinstance(data, dict) or "deployment" not in data:
            return data
        manifest = {key: value for key, value in data.items() if key not in ("deployment", "schema")}
        deployment = dict(data["deployment"])
        removed = deployment.pop("status", "active") == "removed"
        return {"manifest": manifest, "schema": data.get("schema", 0), "removed": removed, **deployment}

    @classmethod
    def decode(cls, text: str | bytes) -> Self:
        """The record in YAML's JSON form, or in block YAML (written by an earlier runner, or edited by hand)."""
        try:
            return cls.model_validate_json(text)
        except ValidationError as error:
            if not any(e["type"] == "json_invalid" for e in error.errors()):
                raise
        return cls.model_validate(yaml.load(text, Loader=_LOADER))  # noqa: S506 - a safe loader (libyaml's when built with it)
