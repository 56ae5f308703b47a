"""Where a team's state lives (PRODUCT.md §3), for a local folder standing in for buckets.

    <root>/manifests/deployed/<name>.yaml                        what is deployed (merged + meta)
    <root>/checkpoints/checkpoints/<name>/<version>/<run-id>/    Spark checkpoint of one run
    <root>/checkpoints/dead-letter/<name>/<source-table>/        rejected records (JSON lines)
    <root>/savepoints/savepoints/<name>/<version>/...            savepoints

The three top folders play the manifests, checkpoints and savepoints buckets.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

DEFAULT_STATE_DIR = ".sql-runner"


@dataclass(frozen=True)
class StateLayout:
    root: Path

    @property
    def manifests(self) -> Path:
        return self.root / "manifests"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def savepoints(self) -> Path:
        return self.root / "savepoints"

    def deployed_manifest(self, name: str) -> Path:
        return self.manifests / "deployed" / f"{name}.yaml"

    def version_checkpoints(self, name: str, version: int) -> Path:
        return self.checkpoints / "checkpoints" / name / str(version)

    def checkpoint(self, name: str, version: int, run_id: str) -> Path:
        return self.version_checkpoints(name, version) / run_id

    def dead_letter(self, name: str) -> Path:
        return self.checkpoints / "dead-letter" / name


def state_layout(project_root: Path, state: Path | None) -> StateLayout:
    """``--state PATH`` when given, else ``.sql-runner/`` inside the project."""
    return StateLayout((state or project_root / DEFAULT_STATE_DIR).resolve())
