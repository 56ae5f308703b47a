"""Where a new version's sources start so that it continues exactly where the last one stopped.

Read from the previous version's final state (a savepoint or checkpoint) of the job's
query (its dead letters come from the same read of its sources, so they follow it), the way
each source's connector continues (``ContinueBy``, ``runner/core/connectors/``):

- offsets (Kafka): the offsets of the last committed batch (``offsets/<n>`` for the highest
  ``commits/<n>``) of the source that read the table's topics (a ``topic`` list, or the
  topics a ``topic-pattern`` matched), every topic-partition of it, become the new query's
  ``startingOffsets``; the job adds partitions and topics that appeared since, from their
  start (``jobs/kafka.py``).
- skipping the files read (files): Spark's file source keeps no position, and a new
  checkpoint seeded with the old logs fails on the new query's stateful operators.
  Instead, the files the previous version's committed batches read (its ``sources/<i>/``
  log up to the committed ``logOffset``) are listed, and the new version skips exactly
  those files: its file source is anti-joined with that list on ``_metadata.file_path``.
  Every file is read by exactly one version: no duplicates, no gap.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from runner.core import connectors, layout
from runner.core.bucket import Bucket
from runner.core.connectors import ContinueBy
from runner.core.placeholders import resolved_options
from runner.core.starts import (
    MAIN,
    KafkaOffsets,
    SkipFiles,
    Starts,
    kafka_topics,
    normalise_file_path,
)
from runner.core.tables import TableDef
from runner.state.savepoints import last_committed_batch


@dataclass(frozen=True)
class Committed:
    batch: int
    sources: list[dict | None]  # one parsed offset per source, in the query's source order


def committed(bucket: Bucket, query_key: str) -> Committed | None:
    """The offsets of the last committed batch of the query checkpointed at ``query_key``."""
    batch = last_committed_batch(bucket, query_key)
    if batch is None:
        return None
    blob = bucket.read(f"{query_key}offsets/{batch}")
    if blob is None:
        return None
    lines = blob.text.splitlines()
    # line 0: log version, line 1: batch metadata, then one offset per source ("-" when absent)
    offsets = [None if line.strip() in ("", "-") else json.loads(line) for line in lines[2:]]
    return Committed(batch, offsets)


def kafka_offsets(found: Committed, topics: list[str], pattern: str | None = None) -> dict | None:
    """The committed ``{"topic": {"partition": offset}}`` of the Kafka source that read ``topics`` (or the
    topics ``pattern`` matches), if the query had one: one reading exactly those topics first, else one
    reading most of them (a topic created since, or without partitions yet, left none)."""
    kafka_sources = [
        offset
        for offset in found.sources
        if isinstance(offset, dict) and offset and all(isinstance(v, dict) for v in offset.values())
    ]
    if pattern is not None:
        return next((dict(o) for o in kafka_sources if all(_matches(pattern, topic) for topic in o)), None)
    wanted = set(topics)
    exact = [o for o in kafka_sources if set(o) == wanted]
    some = sorted((o for o in kafka_sources if set(o) <= wanted), key=len, reverse=True)  # most topics first
    chosen = (exact or some or [None])[0]
    return dict(chosen) if chosen is not None else None


def _matches(pattern: str, topic: str) -> bool:
    try:
        return re.fullmatch(pattern, topic) is not None
    except re.error:
        return False


def files_read(bucket: Bucket, query_key: str, found: Committed, table_path: str) -> list[str] | None:
    """Files under ``table_path`` the committed batches read, or None if no file source matches."""
    base = normalise_file_path(table_path).rstrip("/") + "/"
    for index, offset in enumerate(found.sources):
        if not (isinstance(offset, dict) and "logOffset" in offset):
            continue
        entries = _file_log(bucket, f"{query_key}sources/{index}/")
        paths = [normalise_file_path(e["path"]) for e in entries if e.get("batchId", 0) <= offset["logOffset"]]
        if entries and all(p.startswith(base) for p in paths):
            return sorted(set(paths))
    return None


def _file_log(bucket: Bucket, prefix: str) -> list[dict]:
    """Entries of a file source log: numbered files and ``.compact`` files (which hold all before them)."""
    entries: list[dict] = []
    for key in bucket.keys(prefix):
        name = key.rsplit("/", 1)[-1]
        if not (name.isdigit() or name.endswith(".compact")):
            continue
        blob = bucket.read(key)
        if blob is None:
            continue
        entries.extend(json.loads(line) for line in blob.text.splitlines()[1:] if line.strip())
    unique = {e["path"]: e for e in entries}
    return list(unique.values())


@dataclass(frozen=True)
class Continuation:
    """Starts for one new version, per query role ("main") and table name."""

    starts: Starts
    notes: list[str]


def plan_starts(
    checkpoints: Bucket,
    state_bucket: Bucket,
    state_key: str,
    tables: list[TableDef],
    name: str,
    version: int,
    env: Mapping[str, str],
) -> Continuation:
    """Work out each source's start from the previous version's state at ``state_key``.

    ``state_bucket`` holds that state (savepoints or checkpoints); file lists are written to
    ``continue/<name>/<version>/`` in the checkpoints bucket, where the job reads them.
    Paths and topics are compared with their ``${NAME}`` placeholders resolved from ``env``.
    """
    starts: Starts = {}
    notes: list[str] = []
    roles = {MAIN: state_key}
    for role, query_key in roles.items():
        found = committed(state_bucket, query_key)
        for table in tables:
            if found is None:
                notes.append(f"{table.name} ({role}): the previous version committed no batch; startup position")
                continue
            connector_options = resolved_options(table, env)
            continue_by = connectors.named(table.connector).continue_by
            if continue_by is ContinueBy.OFFSETS:
                pattern = connector_options.get("topic-pattern")
                offsets = kafka_offsets(found, kafka_topics(connector_options), pattern)
                if offsets is None:
                    what = f"topics matching {pattern!r}" if pattern else "its topics"
                    notes.append(f"{table.name} ({role}): no committed offsets for {what}; startup position")
                    continue
                starts.setdefault(role, {})[table.name] = KafkaOffsets(offsets=offsets)
                notes.append(f"{table.name} ({role}): Kafka offsets of batch {found.batch}: {json.dumps(offsets)}")
            elif continue_by is ContinueBy.SKIPPING_READ_FILES:
                paths = files_read(state_bucket, query_key, found, connector_options.get("path", ""))
                if paths is None:
                    notes.append(f"{table.name} ({role}): no file source log found; startup position")
                    continue
                key = f"{layout.continuation(name, version)}{role.replace('/', '-')}-{table.slug}.json"
                checkpoints.write(key, "".join(json.dumps({"path": p}) + "\n" for p in paths).encode())
                starts.setdefault(role, {})[table.name] = SkipFiles(uri=checkpoints.uri(key), count=len(paths))
                notes.append(f"{table.name} ({role}): skips the {len(paths)} files read up to batch {found.batch}")
    return Continuation(starts, notes)
