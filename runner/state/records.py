"""What the runner writes about deployments: the deployed record and the history of decisions.

``deployed/<name>.yaml`` is the merged manifest with its ``meta``, plus a ``deployment``
section: the table definitions the query was deployed with (so a later DDL edit is seen
as a change), the run folder in use, the target, where the version's sources started,
and whether the job was removed.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import yaml

from runner.core import layout
from runner.core.bucket import Blob, Bucket
from runner.core.manifest import Manifest
from runner.core.starts import Source
from runner.core.stateref import StateRef
from runner.core.tables import TableDef

# libyaml's safe loader and dumper where PyYAML has them: a record (manifest, tables and columns) parses
# about ten times faster, which is most of planning many manifests.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


@dataclass(frozen=True)
class DeploymentRecord:
    manifest: Manifest  # merged, with meta
    tables: tuple[TableDef, ...]  # read and written, as deployed
    sources: tuple[Source, ...]
    run_id: str
    target: str
    deployed_at: datetime
    removed: bool = False
    continued_from: StateRef | None = None

    @property
    def name(self) -> str:
        return self.manifest.name

    @property
    def version(self) -> int:
        assert self.manifest.meta is not None
        return self.manifest.meta.query_version

    def to_yaml(self) -> str:
        data = self.manifest.to_dict()
        data["deployment"] = {
            "status": "removed" if self.removed else "active",
            "run-id": self.run_id,
            "target": self.target,
            "deployed-at": self.deployed_at.isoformat(),
            "sources": [{"table": s.table, "connector": s.connector} for s in self.sources],
            "continued-from": _ref_to_dict(self.continued_from),
            "tables": [t.to_dict() for t in self.tables],
        }
        return yaml.dump(data, Dumper=_DUMPER, sort_keys=False, allow_unicode=True)

    @staticmethod
    def from_yaml(text: str) -> DeploymentRecord:
        data = yaml.load(text, Loader=_LOADER)  # noqa: S506 - a safe loader (libyaml's when built with it)
        deployment = data.pop("deployment")
        return DeploymentRecord(
            manifest=Manifest.model_validate(data),
            tables=tuple(TableDef.from_dict(t) for t in deployment["tables"]),
            sources=tuple(Source(s["table"], s["connector"]) for s in deployment["sources"]),
            run_id=deployment["run-id"],
            target=deployment["target"],
            deployed_at=datetime.fromisoformat(deployment["deployed-at"]),
            removed=deployment["status"] == "removed",
            continued_from=_ref_from_dict(deployment.get("continued-from")),
        )


def _ref_to_dict(ref: StateRef | None) -> dict | None:
    if ref is None:
        return None
    return {
        "kind": ref.kind,
        "version": ref.version,
        "key": ref.key,
        "created": ref.created.isoformat() if ref.created else None,
    }


def _ref_from_dict(data: dict | None) -> StateRef | None:
    if not data:
        return None
    created = datetime.fromisoformat(data["created"]) if data.get("created") else None
    return StateRef(data["kind"], data["version"], data["key"], created)


def read_deployed(bucket: Bucket, name: str) -> tuple[DeploymentRecord | None, Blob | None]:
    """The deployed record and the blob it came from (its etag guards the next write)."""
    blob = bucket.read(layout.deployed(name))
    if blob is None:
        return None, None
    return DeploymentRecord.from_yaml(blob.text), blob


def deployed_names(bucket: Bucket) -> list[str]:
    return sorted(
        k.removeprefix("deployed/").removesuffix(".yaml") for k in bucket.keys("deployed/") if k.endswith(".yaml")
    )
