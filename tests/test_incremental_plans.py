"""Changelog queries as chains of incremental operators (``jobs/changelog/incremental.py``): each shape of query
the chain covers, given thousands of random changes, leaves its target exactly as the same SQL gives over the
tables' current rows, after every micro-batch and across a restart from the checkpoint; and each shape it does not
cover is named.

The target is kept here as the sink keeps it: a row per key (an insert of a key held, an update or delete whose
``before`` is not the row held fails the test), or a multiset of rows for a target without key. Bad inputs tried,
in random changes with a fixed seed: deletes of keys never seen, the same change twice, changes to one key out of
order by source position (and, without positions, in file order), a key's row moving to another group and to
another join partner, NULL group and join keys, partners that come and go under outer joins.
"""

from __future__ import annotations

import json
import math
import random
import re
from collections import Counter
from decimal import Decimal
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from jobs.change_records import DELETE, SEQ, SEQ_TYPE
from jobs.changelog.engine import KIND, SOURCE, ChangelogSource, row_column
from jobs.changelog.incremental import batch_views, changes_of, not_covered
from jobs.jvm import analysed_plan
from jobs.schema import spark_schema
from runner.authoring.ddl import parse_ddl
from runner.core.engine_record import LAYOUT
from tests.jobhelpers import join_states

pytestmark = pytest.mark.spark

DDL = """
CREATE TABLE users (id BIGINT, account STRING, name STRING, score DOUBLE, amount DECIMAL(10, 2),
  PRIMARY KEY (id) NOT ENFORCED) WITH ('connector' = 'filesystem', 'path' = '/u', 'format' = 'json');
CREATE TABLE accounts (id STRING, region STRING, tier INT,
  PRIMARY KEY (id) NOT ENFORCED) WITH ('connector' = 'filesystem', 'path' = '/a', 'format' = 'json');
CREATE TABLE regions (id STRING, label STRING,
  PRIMARY KEY (id) NOT ENFORCED) WITH ('connector' = 'filesystem', 'path' = '/r', 'format' = 'json');
"""
TABLES = parse_ddl(DDL)

# name -> (the query, the target's key)
SHAPES = {
    "aggregates": (
        """SELECT account, COUNT(*) AS n, COUNT(name) AS named, SUM(amount) AS total, AVG(amount) AS mean,
             SUM(score) AS scores, AVG(score) AS mean_score, MIN(name) AS first, MAX(amount) AS top,
             COUNT(DISTINCT name) AS names
           FROM users GROUP BY account""",
        ("account",),
    ),
    "filtered": (
        "SELECT id, upper(name) AS name, amount * 2 AS doubled FROM users WHERE score > 0 OR name IS NULL",
        ("id",),
    ),
    "inner join with a condition": (
        "SELECT u.id, u.name, a.region, a.tier FROM users u JOIN accounts a ON u.account = a.id AND u.score < a.tier",
        ("id",),
    ),
    "three-table left join": (
        """SELECT u.id, u.name, a.tier, r.label FROM users u
           LEFT JOIN accounts a ON u.account = a.id LEFT JOIN regions r ON a.region = r.id""",
        ("id",),
    ),
    "joins on unique keys": (  # each side one row per join key: a table's, a GROUP BY's, a join's that kept it
        """SELECT a.id, a.tier, c.n, m.last FROM accounts a
           JOIN (SELECT account, COUNT(*) AS n FROM users GROUP BY account) c ON a.id = c.account
           LEFT JOIN (SELECT account, MAX(name) AS last FROM users WHERE score > 0 GROUP BY account) m
             ON a.id = m.account""",
        ("id",),
    ),
    "group by over a join": (
        """SELECT a.region, COUNT(*) AS n, SUM(u.amount) AS total, MAX(u.name) AS last, AVG(a.tier) AS tier
           FROM users u JOIN accounts a ON u.account = a.id GROUP BY a.region""",
        ("region",),
    ),
    "having": ("SELECT account, COUNT(*) AS n FROM users GROUP BY account HAVING COUNT(*) > 2", ("account",)),
    "group by a double": ("SELECT score, COUNT(*) AS n FROM users GROUP BY score", ("score",)),  # -0.0 is 0.0
    "full join": (
        """SELECT a.id AS account, a.tier, r.id AS region, r.label
           FROM accounts a FULL JOIN regions r ON a.region = r.id""",
        (),
    ),
    "right join over a join": (
        """SELECT u.id, r.id AS region FROM users u JOIN accounts a ON u.account = a.id
           RIGHT JOIN regions r ON a.region = r.id""",
        (),
    ),
    "a table joined with itself by its key, one side filtered": (  # each side takes the users' changes itself
        "SELECT u.id, u.name, v.score, v.account FROM users u LEFT JOIN users v ON u.id = v.id AND v.score > 0",
        ("id",),
    ),
    "a left join on the key of a filtered and renamed table": (  # a row leaving the filter leaves the side
        """SELECT u.id, u.name, a.region, a.tier FROM users u
           LEFT JOIN (SELECT id AS aid, region, tier FROM accounts WHERE tier > 1 OR region IS NULL) a
             ON u.account = a.aid""",
        ("id",),
    ),
    "three-table left join, as layout 4 keeps it": (
        """SELECT u.id, u.name, a.tier, r.label FROM users u
           LEFT JOIN accounts a ON u.account = a.id LEFT JOIN regions r ON a.region = r.id""",
        ("id",),
    ),
    "three-table left join, as layout 2 keeps it": (
        """SELECT u.id, u.name, a.tier, r.label FROM users u
           LEFT JOIN accounts a ON u.account = a.id LEFT JOIN regions r ON a.region = r.id""",
        ("id",),
    ),
    "aggregate without group by": ("SELECT COUNT(*) AS n, SUM(amount) AS total, MIN(score) AS low FROM users", ()),
    "union all and distinct": (
        """SELECT DISTINCT k, v FROM (SELECT account AS k, name AS v FROM users WHERE amount > 100
           UNION ALL SELECT id, region FROM accounts)""",
        (),
    ),
}

NOT_COVERED = {
    "SELECT id, ROW_NUMBER() OVER (PARTITION BY account ORDER BY id) AS r FROM users": "a window function (OVER)",
    "SELECT id FROM users ORDER BY id LIMIT 3": "LIMIT or OFFSET",
    "SELECT u.id FROM users u JOIN accounts a ON u.score > a.tier": "a join without an equality between its two sides",
    "SELECT u.id FROM users u LEFT JOIN accounts a ON u.account = a.id AND u.score > a.tier": "an outer join whose ON",
    "SELECT id, current_timestamp() AS t FROM users": "the current date or time",
    "SELECT account, SUM(DISTINCT amount) AS s FROM users GROUP BY account": "the aggregate sum(DISTINCT users.amount)",
    "SELECT id FROM users WHERE account IN (SELECT id FROM accounts)": "a LEFT SEMI join (IN, NOT IN or EXISTS",
    "SELECT account, COUNT(DISTINCT name), COUNT(DISTINCT id) FROM users GROUP BY account": "several COUNT(DISTINCT",
    "SELECT id, rand() AS r FROM users": "a nondeterministic expression",
    "SELECT id, CAST(name AS BINARY) AS b FROM users": "a result with a BINARY column (b)",
}


def stream_schema() -> T.StructType:
    fields = [
        T.StructField(SOURCE, T.IntegerType()),
        T.StructField(DELETE, T.BooleanType()),
        T.StructField(SEQ, SEQ_TYPE),
    ]
    fields += [T.StructField(row_column(i), spark_schema(table)) for i, table in enumerate(TABLES)]
    return T.StructType(fields)


def frames_of(changes: DataFrame) -> tuple[DataFrame, ...]:
    """Each source's own changes (``jobs/changelog/stream.py:rows``) from one stream of all of theirs."""
    return tuple(
        changes.where(F.col(SOURCE) == i).select(f"{row_column(i)}.*", DELETE, SEQ) for i in range(len(TABLES))
    )


def sources() -> list[ChangelogSource]:
    return [ChangelogSource(table.parts[-1], table, spark_schema(table)) for table in TABLES]


def row_of(index: int, rng: random.Random, key) -> dict:
    if index == 0:
        return {
            "id": key,
            "account": rng.choice(["a", "b", "c", "x", None]),
            "name": rng.choice(["ann", "bob", "cy", "dee", None]),
            "score": rng.choice([round(rng.uniform(-2, 4), 3), 1.5, None, 0.0, -0.0]),
            "amount": rng.choice([None, f"{rng.randrange(-500, 90000) / 100:.2f}"]),
        }
    if index == 1:
        return {"id": key, "region": rng.choice(["eu", "us", "ap", None]), "tier": rng.choice([1, 2, 3, None])}
    return {"id": key, "label": rng.choice(["Europe", "Americas", None])}


KEYS = [list(range(40)), ["a", "b", "c", "d", None], ["eu", "us", "ap"]]  # a NULL PRIMARY KEY value too


def micro_batch(rng: random.Random, batch: int, current: list[dict], positions: bool, sizes: list[int]) -> list[dict]:
    """One micro-batch of changes to the three tables (``sizes[i]`` to table i) as the change stream has them, in
    file order, and their effect on ``current`` (each table's rows by key): with ``positions``, the lines are
    shuffled and a key's last change is the one with the highest position in its place; without, the last line
    of the key counts."""
    lines: list[tuple[int, int | None, dict]] = []  # (table, position, record)
    for index, many in enumerate(sizes):
        for n in range(many):
            key = rng.choice(KEYS[index])
            delete = rng.random() < 0.25  # a key never seen is deleted too, now and then
            row = {"id": key} if delete else row_of(index, rng, key)
            place = f"{index}-{sum(map(ord, str(key))) % 3}"
            record = {
                SOURCE: index,
                DELETE: delete,
                SEQ: {"place": place, "position": batch * 1000 + n if positions else None},
                row_column(index): {**{f.name: None for f in spark_schema(TABLES[index]).fields}, **row},
            }
            lines.append((index, record[SEQ]["position"], record))
            if rng.random() < 0.1:
                lines.append((index, record[SEQ]["position"], dict(record)))  # the same change twice
    if positions:
        rng.shuffle(lines)
    ordered = sorted(range(len(lines)), key=lambda i: (lines[i][1] if lines[i][1] is not None else -1, i))
    for i in ordered:
        index, _position, record = lines[i]
        row = record[row_column(index)]
        if record[DELETE]:
            current[index].pop(row["id"], None)
        else:
            current[index][row["id"]] = row
    return [record for _index, _position, record in lines]


class Target:
    """A table as a sink of changes keeps it: a row per key, or a multiset of rows without key."""

    def __init__(self, key: tuple[str, ...]):
        self.key = key
        self.rows: dict = {}
        self.multiset: Counter = Counter()

    def __call__(self, batch: DataFrame, _batch_id: int) -> None:
        for kind, before, after in batch.select(KIND, "before", "after").collect():
            if not self.key:
                if kind == "insert":
                    self.multiset[canonical(after)] += 1
                else:
                    assert kind == "delete" and self.multiset[canonical(before)] > 0, (kind, before)
                    self.multiset[canonical(before)] -= 1
                continue
            row = after if after is not None else before
            key = tuple(row[k] for k in self.key)
            held = self.rows.get(key)
            assert (held is None) == (kind == "insert"), (kind, before, after, held)
            if kind != "insert":
                assert held == canonical(before), (kind, before, held)
            if kind == "delete":
                del self.rows[key]
            else:
                self.rows[key] = canonical(after)

    def contents(self) -> list[tuple]:
        found = list(self.rows.values()) if self.key else list(self.multiset.elements())
        return sorted(found, key=repr)


def canonical(row) -> tuple:
    return tuple("NaN" if isinstance(v, float) and math.isnan(v) else v for v in row)


def same(mine: list[tuple], theirs: list[tuple]) -> bool:
    """Equal rows, DOUBLE values within rounding (a sum kept by adding and taking away is not summed in Spark's
    order)."""
    if len(mine) != len(theirs):
        return False

    def close(a, b) -> bool:
        if isinstance(a, float) and isinstance(b, float):
            return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
        return a == b

    rest = list(theirs)
    for row in mine:
        match = next((r for r in rest if len(r) == len(row) and all(map(close, row, r))), None)
        if match is None:
            return False
        rest.remove(match)
    return True


def current_views(spark: SparkSession, current: list[dict]) -> None:
    for index, table in enumerate(TABLES):
        schema = spark_schema(table)

        def value(row: dict, field: T.StructField):
            raw = row.get(field.name)
            return Decimal(raw) if isinstance(field.dataType, T.DecimalType) and raw is not None else raw

        rows = [tuple(value(r, f) for f in schema.fields) for r in current[index].values()]
        spark.createDataFrame(rows, schema).createOrReplaceTempView(table.parts[-1])


# thirteen queries' micro-batches through RocksDB state, each checked against the batch answer: about 200 s alone but
# 580 s in a fresh clone's make test beside the other tests, at the suite's 600 s
@pytest.mark.timeout(1200)
def test_every_covered_shape_leaves_its_target_as_the_batch_answer_after_every_micro_batch_and_a_restart(
    rocksdb: SparkSession, tmp_path: Path
):
    spark = rocksdb
    folder = tmp_path / "changes"
    folder.mkdir()
    rng = random.Random(5600)
    current: list[dict] = [{}, {}, {}]
    targets = {name: Target(key) for name, (_sql, key) in SHAPES.items()}

    def start():
        found = []
        changes = spark.readStream.schema(stream_schema()).option("maxFilesPerTrigger", 1).json(str(folder))
        for name, (sql, key) in SHAPES.items():
            ids = batch_views(spark, sources())
            result = spark.sql(sql)
            assert not_covered(spark, result) is None, name
            earlier = re.search(r"as layout ([0-9]) keeps it$", name)  # a checkpoint of an earlier release
            layout = int(earlier.group(1)) if earlier else LAYOUT
            difference = changes_of(spark, frames_of(changes), sources(), ids, result, key, layout)
            checkpoint = tmp_path / "checkpoints" / name.replace(" ", "-").replace(",", "")
            found.append(
                difference.writeStream.foreachBatch(targets[name]).option("checkpointLocation", str(checkpoint)).start()
            )
        return found

    queries = start()
    changed = 0
    try:
        for batch in range(5):
            if batch == 3:  # a restart: every operator's state comes back from the checkpoint
                for query in queries:
                    query.stop()
                queries = start()
            # the first micro-batch has no user: the aggregate without GROUP BY has its row all the same
            sizes = [0, 6, 3] if batch == 0 else [400, 12, 4]
            records = micro_batch(rng, batch, current, positions=batch != 2, sizes=sizes)
            changed += len(records)
            (folder / f"{batch:03}.json").write_text("".join(json.dumps(r) + "\n" for r in records))
            for query in queries:
                query.processAllAvailable()
            current_views(spark, current)
            for name, (sql, _key) in SHAPES.items():
                expected = sorted((canonical(r) for r in spark.sql(sql).collect()), key=repr)
                got = targets[name].contents()
                assert same(got, expected), (batch, name, got, expected)
        assert changed > 1500
        assert any(row[0] is None for row in targets["aggregates"].contents()), "a NULL group was checked"
        # how each join keeps its sides: as one row where its input has one per join key, and a side that is a
        # table seen through filters and renames, joined by its PRIMARY KEY, given the table's changes, in this
        # release's layout; as earlier releases kept them, from their checkpoints
        checkpoints = tmp_path / "checkpoints"
        unique_keys = [{"leftRow", "rightRow"}, {"leftSource", "rightRow"}]  # the last join first
        assert join_states(checkpoints / "joins-on-unique-keys") == unique_keys
        assert join_states(checkpoints / "three-table-left-join") == [{"left", "rightSource"}] * 2
        assert join_states(checkpoints / "three-table-left-join-as-layout-4-keeps-it") == [{"left", "rightRow"}] * 2
        assert join_states(checkpoints / "three-table-left-join-as-layout-2-keeps-it") == [{"left", "right"}] * 2
        assert join_states(checkpoints / "a-table-joined-with-itself-by-its-key-one-side-filtered") == [
            {"leftSource", "rightSource"}
        ]
        assert join_states(checkpoints / "a-left-join-on-the-key-of-a-filtered-and-renamed-table") == [
            {"left", "rightSource"}
        ]
        assert any(row[1] is None for row in targets["full join"].contents()), "a padded row was checked"
    finally:
        for query in queries:
            query.stop()


@pytest.mark.parametrize("sql", list(NOT_COVERED))
def test_each_shape_the_operators_do_not_cover_is_named(spark: SparkSession, sql: str):
    batch_views(spark, sources())
    reason = not_covered(spark, spark.sql(sql))
    assert reason is not None and NOT_COVERED[sql] in reason, reason


def test_a_key_the_query_gives_two_rows_for_fails_the_micro_batch_before_the_target_sees_it(
    rocksdb: SparkSession, tmp_path: Path
):
    from pyspark.errors import StreamingQueryException

    spark = rocksdb
    folder = tmp_path / "changes"
    folder.mkdir()
    target = Target(("account",))
    ids = batch_views(spark, sources())
    result = spark.sql("SELECT account, name FROM users")  # a user's row per account: the key is not the query's
    frames = frames_of(spark.readStream.schema(stream_schema()).json(str(folder)))
    difference = changes_of(spark, frames, sources(), ids, result, ("account",))
    query = difference.writeStream.foreachBatch(target).option("checkpointLocation", str(tmp_path / "c")).start()
    try:
        records = [
            {SOURCE: 0, DELETE: False, SEQ: {"place": "0", "position": n}, row_column(0): row}
            for n, row in enumerate(
                [{"id": 1, "account": "a", "name": "ann"}, {"id": 2, "account": "a", "name": "bob"}]
            )
        ]
        (folder / "000.json").write_text("".join(json.dumps(r) + "\n" for r in records))
        with pytest.raises(
            StreamingQueryException, match=r"gives 2 rows for one value of the target's PRIMARY KEY \(account\)"
        ):
            query.processAllAvailable()
        assert target.contents() == [], "nothing of the failed micro-batch was written"
    finally:
        query.stop()


@pytest.mark.parametrize(
    ("recorded", "layout"),
    [(None, LAYOUT), ("incremental", 1), ("incremental 2", 2), ("incremental 3", 3), ("incremental 5", 5)],
)
def test_a_run_keeps_the_state_layout_its_checkpoint_records_and_a_new_one_records_what_its_plan_keeps(
    spark: SparkSession, tmp_path: Path, recorded: str | None, layout: int
):
    """A checkpoint's operators are planned in the layout it records (a layout 1 or 2 one keeps every join side as
    a map, as the release that made it did); a new checkpoint's layout is recorded once its plan is made, the
    earliest that keeps what the plan keeps, so that a release that reads no later layout goes on from it after a
    rollback: layout 4 for a plan without a copy of the target's rows (each account's count handed over with its
    old value), layout 5 for one whose join sides take their tables' changes themselves and that keeps that copy
    (the three-table join's last join is by region, not by the target's key), 6 for both, layout 3 for a join
    side kept as one row, 2 for none of those. A checkpoint of layout 1, 2, 3 or 5 keeps its copy of the target's
    rows (``KeyedDifference``) for every query, as the release that made it planned them."""
    from jobs.changelog import incremental

    folder = tmp_path / "changes"
    folder.mkdir()
    recorded_in = tmp_path / "checkpoint" / incremental.ENGINE_FILE
    if recorded is not None:
        recorded_in.parent.mkdir()
        recorded_in.write_text(recorded + "\n")
    shapes = (("three-table left join", 5), ("aggregates", 4), ("having", 4), ("filtered", 4))
    for name, kept in shapes:
        sql, key = SHAPES[name]
        checkpoint = str(tmp_path / "checkpoint")
        choice = incremental.choose_for(spark, "incremental", sources(), lambda sql=sql: spark.sql(sql), checkpoint)
        assert (choice.recomputed, choice.layout) == (None, layout), name
        assert choice.record == (checkpoint if recorded is None else None), name
        frames = frames_of(spark.readStream.schema(stream_schema()).json(str(folder)))
        made = changes_of(spark, frames, sources(), choice.rdd_ids, choice.result, key, choice.layout, choice.record)
        copied = "sqlrunner.engine.KeyedDifference" in analysed_plan(made).toString()
        assert copied == (recorded is not None or kept not in (4, 6)), (name, recorded)
        said = recorded_in.read_text().strip()
        assert said == (f"incremental {kept}" if recorded is None else recorded), (name, said)
        if recorded is None:
            recorded_in.unlink()  # the next query's checkpoint is new too


@pytest.mark.parametrize(("recorded", "runs", "refused_as"), [(4, "aggregates", 3), (6, "joins on unique keys", 5)])
def test_a_checkpoint_without_a_copy_of_the_targets_rows_is_refused_to_a_plan_that_needs_one(
    spark: SparkSession, tmp_path: Path, recorded: int, runs: str, refused_as: int
):
    """A layout 4 (or 6) checkpoint of a query whose operators hand over each target key's old and new rows
    together keeps no copy of the target's rows; a plan for the checkpoint that needs one (here a target keyed by
    a column the last join does not group by) is refused before its first micro-batch, as other state a run
    cannot serve is, and one that needs none runs from it (at layout 6, one whose join sides take their tables'
    changes)."""
    from jobs.changelog import incremental

    folder = tmp_path / "changes"
    folder.mkdir()
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    (checkpoint / incremental.ENGINE_FILE).write_text(f"incremental {recorded}\n")
    frames = frames_of(spark.readStream.schema(stream_schema()).json(str(folder)))
    for name in ("three-table left join", runs):
        sql, key = SHAPES[name]
        choice = incremental.choose_for(
            spark, "incremental", sources(), lambda sql=sql: spark.sql(sql), str(checkpoint)
        )
        assert (choice.layout, choice.record) == (recorded, None)
        assert choice.recorded

        def plan(choice=choice, key=key):
            layout, record = choice.layout, choice.record
            return changes_of(
                spark, frames, sources(), choice.rdd_ids, choice.result, key, layout, record, recorded=True
            )

        if name == runs:
            plan()
            continue
        with pytest.raises(RuntimeError) as refused:
            plan()
        said = str(refused.value)
        assert said.startswith(f"{incremental.REFUSAL}: the checkpoint holds the incremental operators' state"), said
        expected = f"as layout {recorded} keeps it, and this query's plan keeps layout {refused_as}'s (its target keyed"
        assert expected in said, said
