"""Reading a job's dead letters back (``dead-letter/<name>/<source-table>/`` in the checkpoints bucket).

Each source table's folder is a Spark file table of JSON lines (``jobs/deadletters.py``) whose log,
``_spark_metadata/<n>`` (and every tenth entry compacted into ``<n>.compact``), lists each file with
the time it was written. The log, not a listing, says which files are committed and how recent they
are, so a reader needs neither Spark nor object timestamps: the newest entries are read back to the
first written before the time asked about.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from runner.core import layout
from runner.core.bucket import Bucket

LOG = "_spark_metadata/"
_ENTRY = re.compile(r"^(\d+)(\.compact)?$")
MAX_ENTRIES = 200  # log entries read per table and look, newest first


@dataclass(frozen=True)
class DeadLetterFile:
    table: str  # the source table's folder
    key: str  # in the checkpoints bucket
    written: datetime
    size: int


def _log_entries(bucket: Bucket, folder: str) -> list[tuple[int, str]]:
    """The folder's log entries, newest first, from the latest compaction on."""
    found = []
    for key in bucket.keys(f"{folder}{LOG}"):
        match = _ENTRY.match(key.rsplit("/", 1)[-1])
        if match:
            found.append((int(match.group(1)), key, bool(match.group(2))))
    found.sort(reverse=True)
    entries = []
    for number, key, compact in found[:MAX_ENTRIES]:
        entries.append((number, key))
        if compact:  # it lists every file of the entries before it
            break
    return entries


def files(bucket: Bucket, name: str, since: datetime) -> list[DeadLetterFile]:
    """The dead-letter files of job ``name`` written at or after ``since``, newest first."""
    prefix = layout.dead_letter(name)
    tables = sorted({key[len(prefix) :].split("/", 1)[0] for key in bucket.keys(prefix) if LOG in key})
    found: list[DeadLetterFile] = []
    for table in tables:
        folder = f"{prefix}{table}/"
        for _, key in _log_entries(bucket, folder):
            blob = bucket.read(key)
            if blob is None:
                continue
            older = False
            for line in blob.text.splitlines()[1:]:  # the first line is the log's version
                entry = json.loads(line)
                written = datetime.fromtimestamp(entry["modificationTime"] / 1000, UTC)
                if entry.get("action", "add") != "add" or entry.get("isDir"):
                    continue
                if written < since:
                    older = True
                    continue
                file_name = entry["path"].rsplit("/", 1)[-1]
                found.append(DeadLetterFile(table, f"{folder}{file_name}", written, int(entry.get("size", 0))))
            if older:
                break
    return sorted(found, key=lambda f: f.written, reverse=True)


def records(bucket: Bucket, chosen: list[DeadLetterFile], limit: int | None = None) -> list[dict[str, Any]]:
    """The records of ``chosen`` files (newest file first), at most ``limit``."""
    rows: list[dict[str, Any]] = []
    for file in chosen:
        blob = bucket.read(file.key)
        if blob is None:
            continue
        for line in blob.text.splitlines():
            if line.strip():
                rows.append(json.loads(line))
                if limit is not None and len(rows) >= limit:
                    return rows
    return rows
