"""Tables the tests declare, fill and read back, beside the queries that use them.

- PostgreSQL tables a job writes: the metadata columns every sink table has, as ``TIMESTAMP`` columns
  (``PG_METADATA``) or as ``TIMESTAMPTZ`` ones (``PG_METADATA_TZ``, for tests that read batch times back
  as epoch seconds); the ``pg_table`` fixture (tests/conftest.py) makes one unique to a test.
- ``Target``: a keyed sink table, a PostgreSQL table or an upsert-kafka topic, and its rows read back
  (``compacted``: a keyed topic's latest value per key).
- ``COUNTS_DDL`` and ``COUNTS_MANIFEST``: a per-minute count of the demo's transactions, and ``events_between``
  the events that fill and close its windows.
- Folder tables: ``refs`` writes (or replaces) one file of a lookup folder, ``Events`` writes files of
  events into a source folder while a query runs; a file always appears whole.
"""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest

from demo.transactions import transactions
from tests.clihelpers import START
from tests.conftest import METADATA_DDL

PG_METADATA = """,
  __create_timestamp TIMESTAMP, __query_name TEXT, __query_description TEXT, __query_id TEXT,
  __query_version INTEGER, __query_create_timestamp TIMESTAMP"""

PG_METADATA_TZ = """,
  __create_timestamp TIMESTAMPTZ, __query_name TEXT, __query_description TEXT, __query_id TEXT,
  __query_version INTEGER, __query_create_timestamp TIMESTAMPTZ"""

PG_TYPES = {"STRING": "TEXT", "BIGINT": "BIGINT"}


def compacted(kafka, topic: str) -> dict[str, dict]:
    """A keyed topic as a compacted view: each key's latest value, keys whose latest record is a tombstone gone."""
    latest: dict[str, bytes | None] = {}
    for record in kafka.records(topic):
        assert record.key is not None, "every record of an upsert-kafka topic has a key"
        latest[record.key.decode()] = record.value
    return {key: json.loads(value) for key, value in latest.items() if value is not None}


# A ``Target``'s kinds, each marked with the server it takes (it asks for the server's fixture as the test runs,
# which the marks taken from a test's fixtures at collection cannot see: tests/tiers.py).
TARGET_KINDS = [
    pytest.param("jdbc", marks=pytest.mark.postgres),
    pytest.param("upsert-kafka", marks=pytest.mark.kafka),
]


class Target:
    """A keyed target table of one kind (a PostgreSQL table or an upsert-kafka topic), and its rows as read back
    from the database or the topic's compacted view (``read``; ``stamps``: each key's query name, version and
    ``__create_timestamp``, the metadata its row was last written with)."""

    def __init__(self, kind: str, request):
        self.kind, self.request = kind, request

    def ddl(self, name: str, columns: list[tuple[str, str]], key: str) -> str:
        declared = ", ".join(f"{n} {t}" for n, t in columns)
        if self.kind == "jdbc":
            postgres = self.request.getfixturevalue("postgres")
            self.where = self.request.getfixturevalue("pg_table")(
                ", ".join(f"{n.lower()} {PG_TYPES[t]}" for n, t in columns), key.lower()
            )
            self.read = lambda: postgres.execute(
                f"SELECT {', '.join(n.lower() for n, _ in columns)} FROM {self.where} ORDER BY 1, 2"
            )
            self.stamps = lambda: {
                row[0]: row[1:]
                for row in postgres.execute(
                    f"SELECT {key.lower()}, __query_name, __query_version, __create_timestamp FROM {self.where}"
                )
            }
            options = (
                f"'connector' = 'jdbc', 'url' = '{postgres.url}', 'table-name' = '{self.where}', "
                "'username' = 'runner', 'password' = '${PG_PASSWORD}'"
            )
            self.env = {"PG_PASSWORD": postgres.password}
        else:
            kafka = self.request.getfixturevalue("kafka")
            self.where = self.request.getfixturevalue("topic")("out")
            self.read = lambda: sorted(tuple(v[n] for n, _ in columns) for v in compacted(kafka, self.where).values())
            self.stamps = lambda: {
                v[key]: (v["__query_name"], v["__query_version"], v["__create_timestamp"])
                for v in compacted(kafka, self.where).values()
            }
            options = (
                f"'connector' = 'upsert-kafka', 'topic' = '{self.where}', "
                f"'properties.bootstrap.servers' = '{kafka.bootstrap}', 'key.format' = 'json', 'value.format' = 'json'"
            )
            self.env = {}
        return f"CREATE TABLE {name} ({declared}{METADATA_DDL}, PRIMARY KEY ({key}) NOT ENFORCED) WITH ({options});"


def write_whole(path: Path, text: str) -> None:
    """Write ``path`` so that a query listing its folder sees it whole or not at all (a hidden file renamed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    hidden = path.with_name(f".{path.name}")
    hidden.write_text(text)
    hidden.rename(path)


def refs(folder: Path, name: str, rows: list[dict] | str) -> None:
    """Write (or replace) one file of the lookup folder, whole."""
    write_whole(folder / name, rows if isinstance(rows, str) else "".join(json.dumps(r) + "\n" for r in rows))


class Events:
    """Writes a file of events to a folder every ``every`` seconds, one event per user id, until stopped."""

    def __init__(self, folder: Path, users: range, every: float = 0.25):
        self.folder, self.users, self.every = folder, users, every
        folder.mkdir(parents=True, exist_ok=True)
        self.stopping = threading.Event()
        self.next_id = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def write(self) -> None:
        lines = []
        for user in self.users:
            self.next_id += 1
            lines.append(json.dumps({"id": self.next_id, "user_id": user}))
        write_whole(self.folder / f"{self.next_id:09d}.json", "\n".join(lines) + "\n")

    def _run(self) -> None:
        while not self.stopping.wait(self.every):
            self.write()

    def __enter__(self) -> Events:
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stopping.set()
        self.thread.join()


# A windowed count over the demo's card transactions (tests/conftest.py's TRANSACTIONS_DDL), into a folder table.
COUNTS_DDL = (
    """
CREATE TABLE `demo`.`counts` (
  k STRING, window_start TIMESTAMP(3), n BIGINT"""
    + METADATA_DDL
    + """
) WITH ('connector' = 'filesystem', 'path' = 'data/counts', 'format' = 'json');
"""
)

COUNTS_MANIFEST = """
name: counts
target-table: "`demo`.`counts`"
trigger-interval: 1 second
sparkProperties: {spark.sql.shuffle.partitions: "2"}  # small state for small data
sql: |
  SELECT account_id AS k, window.start AS window_start, COUNT(*) AS n
  FROM `demo`.`card-transactions`
  GROUP BY window(ts, '1 minute'), account_id
"""


def events_between(first_minute: int, last_minute: int, seed: int, prefix: str) -> list:
    """Transactions inside [first_minute, last_minute), then one 'tick' 3 minutes later that closes their windows
    (``COUNTS_MANIFEST``'s one-minute windows; its own stays open until later events close it)."""
    rows = [
        t
        for t in transactions(40, start=START + timedelta(minutes=first_minute), seed=seed)
        if t.ts < START + timedelta(minutes=last_minute)
    ]
    tick = replace(rows[0], ts=START + timedelta(minutes=last_minute + 3))
    return [replace(t, transaction_id=f"{prefix}-{i:03d}") for i, t in enumerate([*rows, tick])]
