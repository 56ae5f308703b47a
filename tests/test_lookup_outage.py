"""A lookup table's database goes away under running queries (a real session and PostgreSQL server).

Two queries in the team's session enrich the same stream of events with the same PostgreSQL table. One
keeps the last good snapshot for as long as reloads fail (it shows ``degraded``, with why and how old
its snapshot is); the other declares ``'lookup.max-staleness'`` and is failed once its snapshot is older,
so its restart strategy takes over. The database is stopped for several reload intervals, then started
again: both run on, and a change made meanwhile reaches both outputs.
"""

from __future__ import annotations

import json
import re
import time
from datetime import datetime
from pathlib import Path

import pytest

from demo.postgres_server import PostgresServer
from tests.clihelpers import cli, history, status, wait_for
from tests.conftest import METADATA_DDL, ProjectDir
from tests.tablehelpers import Events

pytestmark = [pytest.mark.spark, pytest.mark.e2e, pytest.mark.postgres]

INTERVAL = 2  # seconds between reloads, due at a fixed rate
STALENESS = 14  # the strict query's 'lookup.max-staleness'
# A reload reads the rows on the driver and caches them with a Spark job: seconds on a busy machine. One that took
# longer than the interval has the next due at once, so two reads may be a load apart
LOAD = 6


def rows(folder: Path) -> list[tuple[float, int, str | None]]:
    """When each row's micro-batch began, its user and the name it gave, for the rows written to ``folder``, in
    time order."""
    found = []
    for path in folder.glob("*.json"):
        for line in path.read_text().splitlines():
            row = json.loads(line)
            began = datetime.fromisoformat(row["__create_timestamp"]).timestamp()
            found.append((began, row["user_id"], row.get("name")))
    return sorted(found, key=lambda seen: seen[0])


def named(folder: Path, user: int) -> list[tuple[float, str | None]]:
    """When each micro-batch written to ``folder`` began, and the name it gave ``user``'s rows, in time order."""
    return [(at, name) for at, who, name in rows(folder) if who == user]


def names(folder: Path, since: float) -> dict[int, set[str | None]]:
    """The names each user's rows carry in the micro-batches written to ``folder`` that began after ``since``."""
    seen: dict[int, set[str | None]] = {}
    for at, user, name in rows(folder):
        if at > since:
            seen.setdefault(user, set()).add(name)
    return seen


def test_a_database_outage_degrades_one_query_and_fails_the_other_past_its_staleness(project: ProjectDir):
    data = project.root / "data"
    with PostgresServer() as database:  # its own server: this test stops it
        database.execute("CREATE TABLE users (id BIGINT PRIMARY KEY, name TEXT)")
        database.execute("INSERT INTO users VALUES (1, 'ann'), (2, 'bob')")
        lookup = (
            f"'connector' = 'jdbc', 'url' = '{database.url}', 'table-name' = 'users', 'username' = 'runner', "
            f"'password' = '${{PG_PASSWORD}}', 'lookup.full-cache.periodic-reload.interval' = '{INTERVAL} s', "
            "'lookup.max-retries' = '0'"
        )
        project.ddl(
            "tables",
            f"""
            CREATE TABLE events (id BIGINT, user_id BIGINT, proc_time AS PROCTIME())
            WITH ('connector' = 'filesystem', 'path' = '{data}/events', 'format' = 'json');
            CREATE TABLE users_kept (id BIGINT, name STRING) WITH ({lookup});
            CREATE TABLE users_strict (id BIGINT, name STRING)
            WITH ({lookup}, 'lookup.max-staleness' = '{STALENESS} s');
            CREATE TABLE out_kept (event_id BIGINT, user_id BIGINT, name STRING{METADATA_DDL})
            WITH ('connector' = 'filesystem', 'path' = '{data}/out_kept', 'format' = 'json');
            CREATE TABLE out_strict (event_id BIGINT, user_id BIGINT, name STRING{METADATA_DDL})
            WITH ('connector' = 'filesystem', 'path' = '{data}/out_strict', 'format' = 'json');
            """,
        )
        project.template(
            "mode: session\ntrigger-interval: 500 milliseconds\nsparkProperties: {spark.sql.shuffle.partitions: '2'}\n"
            "restart-strategy: {attempts: unlimited, delay: 1 second, backoff: 1}\n"
        )
        for which in ("kept", "strict"):
            project.manifest(
                which,
                f"""
                name: {which}
                target-table: out_{which}
                sql: |
                  SELECT e.id AS event_id, e.user_id, u.name
                  FROM events AS e JOIN users_{which} FOR SYSTEM_TIME AS OF e.proc_time AS u ON u.id = e.user_id
                """,
            )
        env = {"PG_PASSWORD": database.password}
        cli(project, "session", "start", env=env)
        try:
            with Events(data / "events", range(1, 3), every=0.5):
                began = time.time()
                for which in ("kept", "strict"):
                    wait_for(lambda w=which: names(data / f"out_{w}", began), f"{which}'s first rows", 180)
                pausing = time.time()
                database.pause()
                paused = time.time()
                kept = wait_for(
                    lambda: (s := status(project, "kept"))["state"] == "degraded" and s,
                    "the query that keeps its snapshot to say it is degraded",
                    60,
                )
                assert "reloads failing since" in kept["why"] and "PostgreSQL" in kept["why"], kept["why"]
                assert database.password not in kept["why"]
                assert "`users_kept` 2 rows" in kept["lookups"] and "reload failing" in kept["lookups"], kept
                strict = wait_for(
                    lambda: (s := status(project, "strict"))["state"] == "failing" and s,
                    "the strict query to fail past its staleness",
                    60,
                )
                # failed past its staleness; each restart then finds the database still down. The session
                # publishes the state, then records the failure in the history: the entry may follow a moment later.
                stale = f"more than 'lookup.max-staleness' allows ({STALENESS}s)"
                said = wait_for(
                    lambda: (
                        stale in (text := " ".join(e.encode().decode() for e in history(project, "strict"))) and text
                    ),
                    "the strict query's history to say it failed past its staleness",
                    30,
                    explain=lambda: [e.summary for e in history(project, "strict")],
                )
                assert "PostgreSQL" in strict["why"] and database.password not in said + strict["why"], strict["why"]
                # failed once its snapshot was older than its staleness allows, not at the first failed reload: as it
                # says, and as seen from here, its last good snapshot being read at most an interval (or a load, when
                # that took longer) before the database stopped (as pause() began, at the earliest)
                age = re.search(r"its snapshot is (\d+)s old", said)
                assert age is not None and int(age.group(1)) >= STALENESS, said
                assert time.time() - pausing > STALENESS - max(INTERVAL, LOAD)
                # never an empty lookup: the kept query's inner join still finds both users, by their old names
                assert names(data / "out_kept", paused + 1) == {1: {"ann"}, 2: {"bob"}}
                database.resume()
                database.execute("UPDATE users SET name = 'anna' WHERE id = 1")
                resumed = time.time()
                # the first reload after the database is back swaps in its rows: from the micro-batch that first
                # joins the new name on, every one does (a batch planned before that swap, however late it was
                # written, still has the old snapshot: the load itself takes seconds on a busy machine)
                for which in ("kept", "strict"):
                    out = data / f"out_{which}"
                    first = wait_for(
                        lambda o=out: min((at for at, n in named(o, 1) if at > resumed and n == "anna"), default=None),
                        f"{which} to join the database's rows again",
                        120,
                    )
                    wait_for(lambda o=out, f=first: any(at > f for at, _ in named(o, 1)), f"{which}'s next batch", 60)
                    assert {n for at, n in named(out, 1) if at >= first} == {"anna"}, (which, named(out, 1)[-5:])
                for which in ("kept", "strict"):
                    wait_for(lambda w=which: status(project, w)["state"] == "running", f"{which} running", 60)
                assert status(project, "kept")["why"] is None
        finally:
            cli(project, "session", "stop", env=env)
