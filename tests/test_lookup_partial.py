"""PARTIAL lookup tables: keyed look-ups from the executors through bounded caches, over a PostgreSQL table
of a million keys (real Spark, a real PostgreSQL server)."""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path

import pytest

from jobs import runtime
from jobs.lookup.refresh import lookups_of
from tests.clihelpers import wait_for
from tests.conftest import METADATA_DDL, ProjectDir
from tests.jobhelpers import start_query
from tests.tablehelpers import PG_METADATA_TZ, write_whole

pytestmark = pytest.mark.spark

KEYS = 1_000_000
MAX_ROWS = 5_000
EXPIRE = 2  # seconds a cached key's row is used


def worker_memory_mib() -> list[float]:
    """The resident memory of each Python worker of this process's Spark (pyspark.daemon's forks)."""
    children: dict[int, list[int]] = {}
    commands: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            commands[int(entry.name)] = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        parent = int(stat[stat.rindex(")") + 2 :].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    mine, pending = [], [os.getpid()]
    while pending:
        pid = pending.pop()
        for child in children.get(pid, []):
            pending.append(child)
            if "pyspark.daemon" in commands.get(child, ""):
                mine.append(child)
    sizes = []
    for pid in mine:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    sizes.append(int(line.split()[1]) / 1024)
        except OSError:
            continue
    return sizes


def events(folder: Path, name: str, ids: list[int]) -> None:
    write_whole(folder / name, "".join(json.dumps({"id": n, "user_id": user}) + "\n" for n, user in enumerate(ids)))


def test_a_partial_cache_over_a_million_keys_joins_exactly_with_bounded_memory(
    spark, project: ProjectDir, postgres, tmp_path
):
    users = "users_partial"
    if not postgres.execute("SELECT to_regclass(%s)", (users,))[0][0]:
        postgres.execute(f"CREATE TABLE {users} (id BIGINT PRIMARY KEY, name TEXT)")
        postgres.execute(f"INSERT INTO {users} SELECT n, 'user ' || n FROM generate_series(1, {KEYS}) AS n")
    out = f"partial_{os.urandom(4).hex()}"
    postgres.execute(f"CREATE TABLE {out} (event_id BIGINT, user_id BIGINT, name TEXT{PG_METADATA_TZ})")
    jdbc = f"'connector' = 'jdbc', 'url' = '{postgres.url}', 'username' = 'runner', 'password' = '${{PG_PASSWORD}}'"
    project.ddl(
        "tables",
        f"""
        CREATE TABLE events (id BIGINT, user_id BIGINT, proc_time AS PROCTIME())
        WITH ('connector' = 'filesystem', 'path' = '{project.root}/data/events', 'format' = 'json');
        CREATE TABLE users (id BIGINT, name STRING)
        WITH ({jdbc}, 'table-name' = '{users}', 'lookup.cache' = 'PARTIAL',
              'lookup.partial-cache.max-rows' = '{MAX_ROWS}',
              'lookup.partial-cache.expire-after-write' = '{EXPIRE} s');
        CREATE TABLE enriched (event_id BIGINT, user_id BIGINT, name STRING{METADATA_DDL})
        WITH ({jdbc}, 'table-name' = '{out}');
        """,
    )
    project.manifest(
        "enrich",
        """
        name: enrich
        target-table: enriched
        trigger-interval: 500 milliseconds
        sparkProperties: {spark.sql.shuffle.partitions: '2'}
        sql: |
          SELECT e.id AS event_id, e.user_id, u.name
          FROM events AS e
          LEFT JOIN users FOR SYSTEM_TIME AS OF e.proc_time AS u ON u.id = e.user_id
        """,
    )
    rng = random.Random(5)
    folder = project.root / "data" / "events"
    sent: list[int] = []
    queries = start_query(spark.newSession(), project, "enrich", tmp_path / "state", {"PG_PASSWORD": postgres.password})
    try:
        lookups = lookups_of(queries[0])
        for part in range(6):  # 120 000 events over about 115 000 keys, one in twenty missing from the table
            ids = [
                rng.randrange(1, KEYS + 1) if rng.random() >= 0.05 else KEYS + rng.randrange(1, 1000)
                for _ in range(20_000)
            ]
            events(folder, f"{part:03d}.json", ids)
            sent.extend(ids)
        wait_for(
            lambda: postgres.execute(f"SELECT count(*) FROM {out}")[0][0] >= len(sent), "every event enriched", 180
        )
        memory = worker_memory_mib()
        status = lookups.statuses()[0]

        hot = sent[-1]
        postgres.execute(f"UPDATE {users} SET name = 'renamed' WHERE id = %s", (hot,))
        changed = time.time()
        name = f"{len(sent):09d}"
        events(folder, f"{name}.json", [hot])  # cached: served from the cache until it expires
        deadline = time.time() + EXPIRE + 30
        seen = None
        while time.time() < deadline:
            time.sleep(0.3)
            events(folder, f"{time.time_ns()}.json", [hot])
            rows = postgres.execute(
                f"SELECT name FROM {out} WHERE user_id = %s AND extract(epoch FROM __create_timestamp) > %s "
                "ORDER BY __create_timestamp DESC LIMIT 1",
                (hot, changed),
            )
            if rows and rows[0][0] == "renamed":
                seen = time.time() - changed
                break
        assert seen is not None, "the renamed user never reached the output"
    finally:
        runtime.stop_all(queries)
    rows = postgres.execute(f"SELECT user_id, name FROM {out}")
    wrong = [
        (user, name) for user, name in rows if name != (f"user {user}" if user <= KEYS else None) and name != "renamed"
    ]
    assert not wrong, wrong[:10]  # every event beside its own user's row, or NULL for a key the table lacks
    missing = sum(1 for user in sent if user > KEYS)
    assert missing > 1000 and sum(1 for _, name in rows if name is None) >= missing
    print(
        f"\nPARTIAL over {KEYS:,} keys: {status.misses:,} keys read, {status.hits:,} from cache, at most "
        f"{status.held:,} rows held per cache (max {MAX_ROWS:,}); "
        f"Python workers {', '.join(f'{m:.0f}' for m in memory)} MiB; "
        f"a change seen after {seen:.1f}s (expire-after-write {EXPIRE}s)"
    )
    assert status.held <= MAX_ROWS and status.misses >= 100_000, status
    assert memory and max(memory) < 400, memory
    assert seen <= EXPIRE + 10
