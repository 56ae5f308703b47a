"""What the runner hands a job: the deployed manifest, the tables and where state goes.

Serialised as JSON on the ``spark-submit`` command line, so a job needs no shared
filesystem with the runner. Table options keep their ``${NAME}`` placeholders; the job
resolves them from its own environment.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from runner.core.catalog import Catalog
from runner.core.errors import UserError
from runner.core.manifest import Manifest
from runner.core.starts import Starts, starts_from_dict, starts_to_dict
from runner.core.tables import TableDef

MAX_SPEC_BYTES = 100_000  # well under Linux's 128 KiB limit for one argument


@dataclass(frozen=True)
class JobSpec:
    manifest: Manifest  # merged, with meta
    catalog: Catalog
    checkpoint: str  # <checkpoints>/checkpoints/<name>/<version>/<run-id>
    dead_letter: str  # <checkpoints>/dead-letter/<name>
    once: bool = False  # process what is available, then stop
    store: dict | None = None  # Store.describe(): where to watch for stop requests and publish progress
    run_id: str = ""
    # where sources start when continuing a previous version: role -> table name -> start
    starts: Starts = field(default_factory=dict)

    def to_json(self) -> str:
        text = json.dumps(
            {
                "manifest": self.manifest.to_dict(),
                "tables": [t.to_dict() for t in self.catalog.tables],
                "checkpoint": self.checkpoint,
                "dead_letter": self.dead_letter,
                "once": self.once,
                "store": self.store,
                "run_id": self.run_id,
                "starts": starts_to_dict(self.starts),
            },
            separators=(",", ":"),
        )
        if len(text.encode()) > MAX_SPEC_BYTES:
            raise UserError.of(
                "JOB_SPEC_TOO_LARGE", name=self.manifest.name, size=len(text.encode()), limit=MAX_SPEC_BYTES
            )
        return text

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
        )

    @property
    def label(self) -> str:
        """``name v3`` for log lines."""
        return f"{self.manifest.name} v{self.manifest.version}"
