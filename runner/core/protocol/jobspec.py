"""What the runner hands a job: the deployed manifest, the tables and where state goes.

Written into the state store (``specs/<name>/<run-id>.json``); the job's command line names only that
key, so a YARN cluster-mode driver on any node finds it and nothing of the spec shows in ``ps`` or YARN's
application page. Table options and engine properties keep their placeholders; the job's driver resolves
them when it starts (``runner/core/placeholders.py``), from its environment and the sources named here.

A spec is read by the job its runner launched, but not always by the same release: a YARN re-attempt
reads it again with whatever runner the node now has, and a session started anew reads the start requests
an earlier one left (``control/<name>/start.json``). So the spec of the release before it was a document
still reads: no ``schema``, and keys spelt as fields (``dead_letter``, ``run_id``, a table's
``primary_key``), read as this release's fields.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, PlainSerializer, PlainValidator

from runner.core.bucket import BucketAddress
from runner.core.catalog import Catalog
from runner.core.manifest import Manifest
from runner.core.part import Part
from runner.core.placeholders import Sources
from runner.core.protocol.deployed import DeploymentRecord
from runner.core.protocol.document import Document
from runner.core.starts import Starts
from runner.core.tables import TableDef


def _catalog(value: Any) -> Catalog:
    return value if isinstance(value, Catalog) else Catalog(tuple(TableDef.model_validate(t) for t in value))


# The declared tables, written as the list of them.
DeclaredTables = Annotated[
    Catalog, PlainValidator(_catalog), PlainSerializer(lambda catalog: catalog.tables, return_type=tuple[TableDef, ...])
]


class Judging(Part):
    """A launch whose driver judges the manifest before it starts (``runner/core/protocol/launch.py``)."""

    file: str  # the manifest's file as its author knows it: where the problems found are located
    deployed: Manifest | None = None  # the deployed manifest (with meta) the query is compared with
    deployed_tables: tuple[TableDef, ...] = ()  # the tables it was deployed over
    wait: float = 600.0  # seconds the driver waits for the runner's release before exiting, having done nothing

    @classmethod
    def against(cls, file: str, record: DeploymentRecord | None, **more: Any) -> Judging:
        """Judging the manifest of ``file`` against the deployed ``record`` (none: nothing deployed yet)."""
        if record is None:
            return cls(file=file, **more)
        return cls(file=file, deployed=record.manifest, deployed_tables=record.tables, **more)


class JobSpec(Document):
    manifest: Manifest  # merged, with meta (judging: without, as desired)
    catalog: DeclaredTables = Field(alias="tables")
    checkpoint: str  # <checkpoints>/checkpoints/<name>/<version>/<run-id>
    dead_letter: str  # <checkpoints>/dead-letter/<name>
    once: bool = False  # process what is available, then stop
    # Store.describe(): where to watch for stop requests and publish progress (a job only needs its manifests)
    store: dict[str, BucketAddress] | None = None
    run_id: str = ""
    # where sources start when continuing a previous version: role -> table name -> start
    starts: Starts = {}
    placeholders: Sources = Sources()  # where placeholders are looked up besides the env
    # one per start by the runner: a YARN re-attempt of the same launch counts on from its failures; a new
    # launch (a deploy resuming the same run) starts counting afresh
    launch_id: str = ""
    judging: Judging | None = None  # judge the manifest first, then start only when released

    @property
    def label(self) -> str:
        """``name v3`` for log lines (``name`` while it judges a manifest not deployed yet)."""
        version = self.manifest.version
        return f"{self.manifest.name} v{version}" if version else self.manifest.name
