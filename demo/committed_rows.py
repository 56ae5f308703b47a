"""Reading what a Spark file sink committed, without starting Spark.

The file sink lists every committed file in ``<path>/_spark_metadata/<batch>`` (JSON
lines after a ``v1`` header, compacted every few batches into ``<batch>.compact``).
Files not listed there belong to an unfinished batch and are ignored, as Spark does.
"""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import unquote, urlparse


def committed_files(folder: Path) -> list[Path]:
    """Data files of committed batches, oldest batch first."""
    log = folder / "_spark_metadata"
    if not log.is_dir():
        return []
    batches: dict[int, Path] = {}
    for entry in log.iterdir():
        stem = entry.name.removesuffix(".compact")
        if stem.isdigit():
            batches[int(stem)] = entry
    if not batches:
        return []
    compacts = [b for b, p in batches.items() if p.name.endswith(".compact")]
    first = max(compacts) if compacts else min(batches)
    files: list[Path] = []
    for batch in sorted(b for b in batches if b >= first):
        lines = batches[batch].read_text(encoding="utf-8").splitlines()[1:]
        for line in lines:
            if not line.strip():
                continue
            record = json.loads(line)
            if record.get("action", "add") == "add":
                files.append(Path(unquote(urlparse(record["path"]).path)))
    return files


def committed_json_rows(folder: Path) -> list[dict]:
    """Rows of a JSON file sink's committed files."""
    rows: list[dict] = []
    for path in committed_files(folder):
        rows.extend(json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip())
    return rows
