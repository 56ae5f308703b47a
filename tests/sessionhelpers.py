"""What the session tests share, on local Spark and on YARN: a project of one events table and file sinks, its
session template, manifests of a plain and a deduplicating query, a feeder of events and what the sinks hold."""

from __future__ import annotations

import json
import threading
from collections import Counter
from pathlib import Path

import yaml

from demo.committed_rows import committed_json_rows
from tests.conftest import METADATA_DDL, ProjectDir

OUT = ["out-a", "out-b", "out-c", "out-d", "out-e", "out-f", "out-bad"]
DDL = """
CREATE TABLE `demo`.`events` (id STRING, account STRING, amount DOUBLE, ts TIMESTAMP(3))
WITH ('connector' = 'filesystem', 'path' = 'data/events', 'format' = 'json');
""" + "".join(
    f"""
CREATE TABLE `demo`.`{name}` (id STRING, amount DOUBLE{METADATA_DDL})
WITH ('connector' = 'filesystem', 'path' = 'data/{name}', 'format' = 'json');
"""
    for name in OUT
)
TEMPLATE = """
mode: session
trigger-interval: 2 seconds
sparkProperties: {spark.sql.shuffle.partitions: "2"}
"""


def query(name: str, target: str, sql: str) -> str:
    return f'name: {name}\ntarget-table: "`demo`.`{target}`"\nsql: "{sql}"\n'


def dedup(name: str, target: str, keys: str) -> str:
    """A stateful query: rows deduplicated on ``keys`` (kept in state, no watermark needed)."""
    return (
        f'name: {name}\ntarget-table: "`demo`.`{target}`"\ncode: |\n'
        f'  execution_output = table("`demo`.`events`").dropDuplicates([{keys}]).select("id", "amount")\n'
    )


class Feeder:
    """Writes one small JSON-lines file of events every ``every`` seconds (ids unique across files)."""

    def __init__(self, folder: Path, every: float = 1.5):
        self.folder = folder
        self.every = every
        self.files = 0
        self.amounts: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def write(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        lines = []
        for row in range(4):
            number = self.files * 4 + row
            key, amount = f"e{number:05d}", float(number % 40)
            self.amounts[key] = amount
            lines.append(json.dumps({"id": key, "account": f"a{number % 3}", "amount": amount, "ts": "2026-01-01"}))
        tmp = self.folder / f".f{self.files:05d}.tmp"
        tmp.write_text("\n".join(lines) + "\n")
        tmp.rename(self.folder / f"f{self.files:05d}.json")  # files appear whole
        self.files += 1

    def start(self) -> None:
        def run() -> None:
            while not self._stop.wait(self.every):
                self.write()

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


def rows(project: ProjectDir, table: str) -> Counter:
    return Counter(r["id"] for r in committed_json_rows(project.root / "data" / table))


def record_status(project: ProjectDir, name: str) -> str | None:
    """The deployed record's status: active or removed (read from the store, no CLI)."""
    path = project.root / ".sql-runner" / "manifests" / "deployed" / f"{name}.yaml"
    return yaml.safe_load(path.read_text())["deployment"]["status"] if path.exists() else None
