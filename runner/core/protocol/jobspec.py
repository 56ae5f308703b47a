"""What the runner hands a job: the deployed manifest, the tables and where state goes.

Serialised as JSON into the state store (``specs/<name>/<run-id>.json``); the job's
command line names only that key, so a YARN cluster-mode driver on any node finds it and
nothing of the spec shows in ``ps`` or YARN's application page. Table options and
engine properties keep their placeholders; the job's driver resolves them when it starts
(``runner/core/placeholders.py``), from its environment and the sources named here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from runner.core.catalog import Catalog
from runner.core.manifest import Manifest
from runner.core.placeholders import Sources
from runner.core.starts import Starts, starts_from_dict, starts_to_dict
from runner.core.tables import TableDef


@dataclass(frozen=True)
class Judging:
    """A launch whose driver judges the manifest before it starts (``runner/core/protocol/launch.py``)."""

    file: str  # the manifest's file as its author knows it: where the problems found are located
    deployed: Manifest | None = None  # the deployed manifest (with meta) the query is compared with
    deployed_tables: tuple[TableDef, ...] = ()  # the tables it was deployed over
    wait: float = 600.0  # seconds the driver waits for the runner's release before exiting, having done nothing

    def to_dict(self) -> dict:
        return {
            "file": self.file,
            "deployed": self.deployed.to_dict() if self.deployed is not None else None,
            "deployed-tables": [t.to_dict() for t in self.deployed_tables],
            "wait": self.wait,
        }

    @staticmethod
    def from_dict(data: dict) -> Judging:
        deployed = data.get("deployed")
        return Judging(
            file=data["file"],
            deployed=Manifest.model_validate(deployed) if deployed is not None else None,
            deployed_tables=tuple(TableDef.from_dict(t) for t in data.get("deployed-tables") or ()),
            wait=float(data.get("wait", 600.0)),
        )


@dataclass(frozen=True)
class JobSpec:
    manifest: Manifest  # merged, with meta (judging: without, as desired)
    catalog: Catalog
    checkpoint: str  # <checkpoints>/checkpoints/<name>/<version>/<run-id>
    dead_letter: str  # <checkpoints>/dead-letter/<name>
    once: bool = False  # process what is available, then stop
    store: dict | None = None  # Store.describe(): where to watch for stop requests and publish progress
    run_id: str = ""
    # where sources start when continuing a previous version: role -> table name -> start
    starts: Starts = field(default_factory=dict)
    placeholders: Sources = field(default_factory=Sources)  # where placeholders are looked up besides the env
    # one per start by the runner: a YARN re-attempt of the same launch counts on from its failures; a new
    # launch (a deploy resuming the same run) starts counting afresh
    launch_id: str = ""
    judging: Judging | None = None  # judge the manifest first, then start only when released

    def to_json(self) -> str:
        return json.dumps(
            {
                "manifest": self.manifest.to_dict(),
                "tables": [t.to_dict() for t in self.catalog.tables],
                "checkpoint": self.checkpoint,
                "dead_letter": self.dead_letter,
                "once": self.once,
                "store": self.store,
                "run_id": self.run_id,
                "starts": starts_to_dict(self.starts),
                "placeholders": self.placeholders.to_dict(),
                "launch-id": self.launch_id,
                "judging": self.judging.to_dict() if self.judging is not None else None,
            },
            separators=(",", ":"),
        )

    @staticmethod
    def from_json(text: str) -> JobSpec:
        data = json.loads(text)
        return JobSpec(
            manifest=Manifest.model_validate(data["manifest"]),
            catalog=Catalog(tuple(TableDef.from_dict(t) for t in data["tables"])),
            checkpoint=data["checkpoint"],
            dead_letter=data["dead_letter"],
            once=bool(data.get("once", False)),
            store=data.get("store"),
            run_id=data.get("run_id", ""),
            starts=starts_from_dict(data.get("starts") or {}),
            placeholders=Sources.from_dict(data.get("placeholders")),
            launch_id=data.get("launch-id", ""),
            judging=Judging.from_dict(data["judging"]) if data.get("judging") else None,
        )

    @property
    def label(self) -> str:
        """``name v3`` for log lines (``name`` while it judges a manifest not deployed yet)."""
        version = self.manifest.version
        return f"{self.manifest.name} v{version}" if version else self.manifest.name
