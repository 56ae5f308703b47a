"""Reading what a Spark file sink committed, without starting Spark.

The file sink lists every committed file in ``<path>/_spark_metadata/<batch>`` (JSON
lines after a ``v1`` header, compacted every few batches into ``<batch>.compact``).
Files not listed there belong to an unfinished batch and are ignored, as Spark does.
The table may be a local folder or a prefix of a bucket (``s3://``, through the
runner's own bucket code).
"""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import unquote, urlparse

from runner.core.bucket import Bucket


def committed_paths(log: dict[str, str]) -> list[str]:
    """Paths of the committed data files, oldest batch first, from the sink log's files (name -> text)."""
    batches: dict[int, str] = {}
    for name in log:
        stem = name.removesuffix(".compact")
        if stem.isdigit():
            batches[int(stem)] = name
    if not batches:
        return []
    compacts = [b for b, name in batches.items() if name.endswith(".compact")]
    first = max(compacts) if compacts else min(batches)
    paths: list[str] = []
    for batch in sorted(b for b in batches if b >= first):
        for line in log[batches[batch]].splitlines()[1:]:
            if not line.strip():
                continue
            record = json.loads(line)
            if record.get("action", "add") == "add":
                paths.append(record["path"])
    return paths


def committed_files(folder: Path) -> list[Path]:
    """Data files of committed batches of a local table, oldest batch first."""
    log = folder / "_spark_metadata"
    if not log.is_dir():
        return []
    # Hadoop's checksummed local file system writes a hidden ``.<name>.crc`` beside each file: not the log's
    texts = {
        entry.name: entry.read_text(encoding="utf-8")
        for entry in log.iterdir()
        if entry.is_file() and not entry.name.startswith(".")
    }
    return [Path(unquote(urlparse(path).path)) for path in committed_paths(texts)]


def committed_json_rows(folder: Path) -> list[dict]:
    """Rows of a local JSON file sink's committed files."""
    rows: list[dict] = []
    for path in committed_files(folder):
        rows.extend(json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip())
    return rows


def committed_bucket_rows(bucket: Bucket, prefix: str) -> list[dict]:
    """Rows of a JSON file sink at ``prefix`` of ``bucket`` (e.g. ``s3://<bucket>/<prefix>``)."""
    log_prefix = f"{prefix.rstrip('/')}/_spark_metadata/"
    texts = {}
    for key in bucket.keys(log_prefix):
        blob = bucket.read(key)
        if blob is not None and not key.endswith("/"):
            texts[key.rsplit("/", 1)[-1]] = blob.text
    rows: list[dict] = []
    for path in committed_paths(texts):
        key = unquote(urlparse(path).path).lstrip("/")
        blob = bucket.read(key)
        assert blob is not None, f"the sink log lists {path}, which is not there"
        rows.extend(json.loads(line) for line in blob.text.splitlines() if line.strip())
    return rows
