"""``deployed/<name>.yaml``: what is deployed under a name, written by the runner's executor only.

The merged manifest with its ``meta``, plus a ``deployment`` section: the table definitions the query
was deployed with (so a later DDL edit is seen as a change), the run folder in use, the target, where
the version's sources started, and whether the job was removed. It is written in YAML's JSON form (any
YAML reader reads it; the runner reads it as JSON, much faster) and read in either form (an earlier
runner wrote block YAML, and a person may edit it). ``runner/state/records.py`` reads and lists them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

import yaml

from runner.core.manifest import Manifest
from runner.core.starts import Source
from runner.core.stateref import StateRef
from runner.core.tables import TableDef

# A record written before records were written in JSON form is read as YAML (libyaml's loader where PyYAML
# has it).
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


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
        # In YAML's JSON form: still YAML for any YAML reader, and read back some fifty times faster than
        # block YAML (planning hundreds of manifests reads as many records).
        return json.dumps(data, indent=2, ensure_ascii=False) + "\n"

    @staticmethod
    def from_yaml(text: str) -> DeploymentRecord:
        try:
            data = json.loads(text)
        except ValueError:  # block YAML: written by an earlier runner, or edited by hand
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
