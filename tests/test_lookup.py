"""Lookup tables in running queries: a stream enriched with a PostgreSQL table and with a folder of files,
reloaded while the query runs (real Spark, a real PostgreSQL server)."""

from __future__ import annotations

import statistics
import time
import uuid

import pytest

from jobs import runtime
from jobs.lookup.refresh import LookupTable, lookups_of
from tests.clihelpers import cli, wait_for
from tests.conftest import METADATA_DDL, ProjectDir
from tests.jobhelpers import start_query
from tests.tablehelpers import PG_METADATA_TZ, Events, refs

pytestmark = pytest.mark.spark

INTERVAL = 2.0  # seconds between reloads in these tests
CHANGES_INTERVAL = 4.0  # in the test of 21 changes: micro-batches between a change and the reload after it


@pytest.fixture
def pg(postgres):
    """Tables unique to the test: ``pg.table(columns)`` creates one and returns its name."""

    class Tables:
        server = postgres

        def table(self, columns: str) -> str:
            name = f"t_{uuid.uuid4().hex[:10]}"
            postgres.execute(f"CREATE TABLE {name} ({columns})")
            return name

        def jdbc(self, table: str, extra: str = "") -> str:
            return (
                f"'connector' = 'jdbc', 'url' = '{postgres.url}', 'table-name' = '{table}', "
                f"'username' = 'runner', 'password' = '${{PG_PASSWORD}}'{extra}"
            )

    return Tables()


def enrichment_project(project: ProjectDir, pg, users_options: str, users_ddl_columns: str = "") -> str:
    """Events (a folder stream) joined with the users lookup table into a PostgreSQL table; returns its name."""
    out = pg.table(f"event_id BIGINT, user_id BIGINT, name TEXT{PG_METADATA_TZ}")
    project.ddl(
        "tables",
        f"""
        CREATE TABLE events (id BIGINT, user_id BIGINT, proc_time AS PROCTIME())
        WITH ('connector' = 'filesystem', 'path' = '{project.root}/data/events', 'format' = 'json');

        CREATE TABLE users (id BIGINT, name STRING{users_ddl_columns}) WITH ({users_options});

        CREATE TABLE enriched (event_id BIGINT, user_id BIGINT, name STRING{METADATA_DDL})
        WITH ({pg.jdbc(out)});
        """,
    )
    project.manifest(
        "enrich",
        """
        name: enrich
        target-table: enriched
        trigger-interval: 200 milliseconds
        sql: |
          SELECT e.id AS event_id, e.user_id, u.name
          FROM events AS e
          LEFT JOIN users FOR SYSTEM_TIME AS OF e.proc_time AS u ON u.id = e.user_id
        """,
    )
    return out


def outputs(pg, out: str, user: int) -> list[tuple[float, str | None]]:
    """(batch time in epoch seconds, name) of every output row for ``user``, in batch order."""
    rows = pg.server.execute(
        f"SELECT extract(epoch FROM __create_timestamp)::float8, name FROM {out} WHERE user_id = %s "
        "ORDER BY __create_timestamp",
        (user,),
    )
    return [(float(at), name) for at, name in rows]


# A micro-batch's time (its rows' __create_timestamp) is stamped before Spark plans it, and the plan takes the
# snapshot current then: a batch stamped this long before a swap may already join the new snapshot.
PLANNED_WITHIN = 0.3


def reload_after(table: LookupTable, moment: float) -> tuple[float, float] | None:
    """The first reload that could have seen a change made at ``moment`` (it swapped in after it): when it
    began and when it swapped its snapshot in (epoch seconds)."""
    return next(((began, swapped) for began, swapped, _ in table.history if swapped > moment), None)


def test_a_postgres_lookup_table_follows_inserts_updates_and_deletes_within_one_interval(
    spark, project: ProjectDir, pg, tmp_path
):
    """21 changes (7 inserts, 7 updates, 7 deletes), one user each, made while the query runs: each shows in
    the output after the first reload that read it and never in a micro-batch that began before that reload,
    within one reload interval (and the load and micro-batch after it)."""
    users = pg.table("id BIGINT PRIMARY KEY, name TEXT")
    ids = range(1, 22)
    inserted, updated, deleted = ids[:7], ids[7:14], ids[14:]
    for user in (*updated, *deleted):
        pg.server.execute(f"INSERT INTO {users} VALUES (%s, %s)", (user, f"old-{user}"))
    out = enrichment_project(
        project, pg, pg.jdbc(users, f", 'lookup.full-cache.periodic-reload.interval' = '{CHANGES_INTERVAL:g} s'")
    )
    env = {"PG_PASSWORD": pg.server.password}
    session = spark.newSession()
    with Events(project.root / "data" / "events", ids):
        queries = start_query(session, project, "enrich", tmp_path / "state", env)
        try:
            lookup = lookups_of(queries[0]).tables[0]
            wait_for(lambda: outputs(pg, out, ids[-1]), "the first enriched rows", 60)
            changes: list[tuple[int, float, str | None, str | None]] = []  # user, when, before, after
            for user in ids:
                time.sleep(0.6)
                if user in inserted:
                    pg.server.execute(f"INSERT INTO {users} VALUES (%s, %s)", (user, f"new-{user}"))
                    changes.append((user, time.time(), None, f"new-{user}"))
                elif user in updated:
                    pg.server.execute(f"UPDATE {users} SET name = %s WHERE id = %s", (f"new-{user}", user))
                    changes.append((user, time.time(), f"old-{user}", f"new-{user}"))
                else:
                    pg.server.execute(f"DELETE FROM {users} WHERE id = %s", (user,))
                    changes.append((user, time.time(), f"old-{user}", None))
            last = changes[-1][1]
            wait_for(
                lambda: reload_after(lookup, last + CHANGES_INTERVAL + 0.5), "two reloads after the last change", 60
            )
            wait_for(
                lambda: any(at > last + CHANGES_INTERVAL + 2 for at, _ in outputs(pg, out, ids[-1])), "the output", 60
            )
        finally:
            runtime.stop_all(queries)
    delays, checked_early = [], 0
    for user, changed_at, before, after in changes:
        seen = outputs(pg, out, user)
        reload = reload_after(lookup, changed_at)
        assert reload is not None
        began, swapped = reload
        assert began - changed_at <= CHANGES_INTERVAL + 1.0, (user, began - changed_at)  # read within one interval
        early = [(at, name) for at, name in seen if changed_at <= at < began - PLANNED_WITHIN]
        assert all(name == before for _, name in early), (user, early)  # never before the reload read it
        checked_early += bool(early)
        first_new = next(at for at, name in seen if name == after and at >= changed_at)
        assert all(name == after for at, name in seen if at >= first_new), user  # and kept since
        delays.append(first_new - changed_at)
    assert checked_early >= 3, checked_early  # changes with batches before their reload
    delays.sort()
    p50, worst = statistics.median(delays), delays[-1]
    print(
        f"\nlookup delay over {len(delays)} changes: p50 {p50:.2f}s, max {worst:.2f}s, interval {CHANGES_INTERVAL:g}s"
    )
    assert worst <= CHANGES_INTERVAL + 5.0, delays  # the interval, the load and a micro-batch (on a busy machine)


def names_after(pg, out: str, moment: float, users: range) -> dict[int, set[str | None]]:
    """The names each user's rows carry in micro-batches that began after ``moment``."""
    return {user: {name for at, name in outputs(pg, out, user) if at > moment} for user in users}


def test_a_lookup_folder_sees_files_added_and_replaced_and_keeps_its_snapshot_over_a_malformed_one(
    spark, project: ProjectDir, pg, tmp_path
):
    """Bad input tried: a file with a line that is not JSON in the lookup folder (the reload fails, the
    last good snapshot stays, never an empty one), then removed (reloads work again)."""
    folder = project.root / "data" / "users"
    refs(folder, "a.json", [{"id": 1, "name": "ann"}, {"id": 2, "name": "bob"}])
    options = (
        f"'connector' = 'filesystem', 'path' = '{folder}', 'format' = 'json', 'lookup.cache' = 'FULL', "
        f"'lookup.full-cache.periodic-reload.interval' = '{INTERVAL:g} s', 'lookup.max-retries' = '0'"
    )
    out = enrichment_project(project, pg, options)
    env = {"PG_PASSWORD": pg.server.password}
    users = range(1, 4)
    with Events(project.root / "data" / "events", users):
        queries = start_query(spark.newSession(), project, "enrich", tmp_path / "state", env)
        try:
            lookup = lookups_of(queries[0]).tables[0]
            began = time.time()
            wait_for(lambda: names_after(pg, out, began, users)[3], "the first enriched rows", 60)
            assert names_after(pg, out, 0, users) == {1: {"ann"}, 2: {"bob"}, 3: {None}}

            refs(folder, "b.json", [{"id": 3, "name": "cy"}])  # a file added
            added = time.time()
            wait_for(lambda: "cy" in names_after(pg, out, added, users)[3], "the added file", 3 * INTERVAL + 5)

            refs(folder, "a.json", [{"id": 1, "name": "anna"}])  # a file replaced: bob is gone
            replaced = time.time()
            wait_for(lambda: "anna" in names_after(pg, out, replaced, users)[1], "the new file", 3 * INTERVAL + 5)
            settled = time.time() + 0.5
            wait_for(lambda: names_after(pg, out, settled, users)[2], "rows after the replacement", 30)
            assert names_after(pg, out, settled, users) == {1: {"anna"}, 2: {None}, 3: {"cy"}}

            refs(folder, "c.json", '{"id": 4, "name": "dee"}\n{"id": 5, "name": \n')  # malformed
            broken = time.time()
            wait_for(lambda: lookup.status().error, "the failed reload", 3 * INTERVAL + 5)
            status, reloads = lookup.status(), lookup.reloads
            assert "Malformed" in status.error, status.error
            assert status.rows == 2 and status.failing_since is not None
            assert lookups_of(queries[0]).degraded()
            # another failed reload: the query runs on the last good snapshot
            wait_for(lambda: lookup.failed_reloads >= 2, "another failed reload", 3 * INTERVAL + 5)
            assert lookup.reloads == reloads
            assert names_after(pg, out, broken, users) == {1: {"anna"}, 2: {None}, 3: {"cy"}}
            assert queries[0].isActive

            (folder / "c.json").unlink()
            wait_for(lambda: lookup.status().error is None, "a reload that works again", 3 * INTERVAL + 5)
            assert not lookups_of(queries[0]).degraded()
        finally:
            runtime.stop_all(queries)
    assert lookup.snapshot is None, "the snapshot is let go with its query"


def test_preview_joins_the_lookup_tables_rows_of_now(project: ProjectDir, pg):
    """``sql-runner preview`` loads the lookup table as a job starting now would: never an empty stand-in."""
    folder = project.root / "data" / "users"
    refs(folder, "a.json", [{"id": 1, "name": "ann"}, {"id": 2, "name": "bob"}])
    options = f"'connector' = 'filesystem', 'path' = '{folder}', 'format' = 'json', 'lookup.cache' = 'FULL'"
    enrichment_project(project, pg, options)
    Events(project.root / "data" / "events", range(1, 3)).write()
    shown = cli(project, "preview", "manifests/enrich.yaml", env={"PG_PASSWORD": pg.server.password}).stdout
    assert "ann" in shown and "bob" in shown, shown
