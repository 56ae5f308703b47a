"""The history of each job: one JSON record per event under ``history/<name>/``.

The runner records every deploy decision (inputs, reasons, outcome); a job records what
happened to it that nobody decided, such as Spark refusing its restored state. Records
are never overwritten and sort by time.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from runner.core import layout
from runner.core.bucket import Bucket, PreconditionFailed


def timestamp(now: datetime) -> str:
    """Sortable, filename-safe UTC time with milliseconds."""
    return now.astimezone(UTC).strftime("%Y%m%dT%H%M%S.%f")[:-3] + "Z"


def write_history(bucket: Bucket, name: str, record: dict[str, Any], now: datetime) -> str:
    """``history/<name>/<timestamp>.json``; never overwrites an earlier record."""
    for attempt in range(100):
        key = f"{layout.history(name)}{timestamp(now)}{'' if attempt == 0 else f'-{attempt}'}.json"
        try:
            bucket.write(key, json.dumps(record, indent=2, default=str).encode(), if_absent=True)
            return key
        except PreconditionFailed:  # two records in the same millisecond: take the next name
            continue
    raise RuntimeError(f"could not write a history record for {name}")


def read_history(bucket: Bucket, name: str) -> list[dict[str, Any]]:
    records = []
    for key in bucket.keys(layout.history(name)):
        blob = bucket.read(key)
        if blob is not None:
            records.append(json.loads(blob.text))
    return records
