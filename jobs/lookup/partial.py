"""PARTIAL lookup tables: keyed look-ups from the executors, through a bounded cache of recent keys.

A table too large to load whole (``'lookup.cache' = 'PARTIAL'``, ``jdbc`` only) is never read as a
relation. The rule (``rule.py``) turns ``stream JOIN table ON table.k = stream.x`` (or ``LEFT JOIN``)
into the stream's rows mapped, an Arrow batch at a time, through ``look_up`` below: in each
executor's Python worker it takes the batch's keys, serves those it holds from its cache, reads the
others from PostgreSQL in one ``SELECT ... WHERE (key) IN (...)``, and puts each stream row beside
every row of the table with its key (or, for a LEFT JOIN, beside NULLs when there is none).

The cache is per worker process and table: at most ``lookup.partial-cache.max-rows`` rows (the least
recently used keys go first), each kept ``lookup.partial-cache.expire-after-write`` at most, so a
change in the database reaches the output within that time. ``lookup.partial-cache.cache-missing-key``
keeps "no such key" too. A look-up the database cannot answer (after ``lookup.max-retries`` more
attempts) fails the micro-batch, and the query's restart strategy takes over: a key never read has no
last good value to fall back on. The workers connect with the table's credentials, so those travel to
the executors with the task (a FULL table is read by the driver alone).
"""

from __future__ import annotations

import functools
import json
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark import AccumulatorParam
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as S

from jobs.jvm import analysed_plan, java_session
from runner.core.errors import UserError
from runner.core.lookup import LookupOptions

KEY = "__sql_runner_key:"  # the rule names each key column of the stream's rows so
RETRY_PAUSE_SECONDS = 0.5


class _Max(AccumulatorParam):
    """An accumulator of the largest value seen (the cache's high-water mark)."""

    def zero(self, value: int) -> int:
        return 0

    def addInPlace(self, value1: int, value2: int) -> int:  # noqa: N802 - pyspark's name
        return max(value1, value2)


@dataclass(frozen=True)
class Spec:
    """What a worker needs to look keys up: where the table is (with its secrets: only in the task), its
    columns as declared and as named in the database, and the cache's bounds."""

    table: str  # as users write it, for messages
    connection: dict[str, Any]  # psycopg.connect's arguments
    relation: str  # "schema"."table", quoted
    columns: tuple[tuple[str, str, str], ...]  # (declared name, database name quoted, PostgreSQL type)
    schema_json: str  # the declared columns' Spark schema
    max_rows: int
    expire_seconds: float
    cache_missing: bool
    max_retries: int
    identity: str  # one cache per table and query


class Cache:
    """Rows per key, least recently used first; at most ``max_rows`` rows, each at most ``expire`` old."""

    def __init__(self, max_rows: int, expire: float):
        self.max_rows, self.expire = max_rows, expire
        self.entries: OrderedDict[tuple, tuple[float, list[tuple]]] = OrderedDict()
        self.rows = 0

    def get(self, key: tuple, now: float) -> list[tuple] | None:
        entry = self.entries.get(key)
        if entry is None:
            return None
        if now - entry[0] > self.expire:
            self._drop(key)
            return None
        self.entries.move_to_end(key)
        return entry[1]

    def put(self, key: tuple, rows: list[tuple], now: float) -> None:
        if key in self.entries:
            self._drop(key)
        self.entries[key] = (now, rows)
        self.rows += max(1, len(rows))  # a missing key takes a place too
        while self.rows > self.max_rows and self.entries:
            self._drop(next(iter(self.entries)))

    def _drop(self, key: tuple) -> None:
        _, rows = self.entries.pop(key)
        self.rows -= max(1, len(rows))


# One cache and connection per table and query, per worker process (a worker runs one task at a time; the
# lock guards against anything else).
_CACHES: dict[str, Cache] = {}
_CONNECTIONS: dict[str, Any] = {}
_LOCK = threading.Lock()


def _connection(spec: Spec) -> Any:
    import psycopg

    conn = _CONNECTIONS.get(spec.identity)
    if conn is None or conn.closed:
        conn = psycopg.connect(**spec.connection, autocommit=True)
        _CONNECTIONS[spec.identity] = conn
    return conn


def _fetch(spec: Spec, key_names: list[str], keys: list[tuple]) -> dict[tuple, list[tuple]]:
    """The table's rows for ``keys`` (values of the columns ``key_names``), by key."""
    columns = {name: (quoted, pg) for name, quoted, pg in spec.columns}
    selected = ", ".join(f"{quoted}::{pg}" for _, quoted, pg in spec.columns)
    arrays = ", ".join(f"%s::{columns[name][1]}[]" for name in key_names)
    matched = " AND ".join(f"{columns[name][0]}::{columns[name][1]} = k.c{i}" for i, name in enumerate(key_names))
    aliases = ", ".join(f"c{i}" for i in range(len(key_names)))
    sql = f"SELECT {selected} FROM {spec.relation} JOIN unnest({arrays}) AS k({aliases}) ON {matched}"  # noqa: S608
    position = [next(i for i, (name, _, _) in enumerate(spec.columns) if name == key) for key in key_names]
    failure: Exception | None = None
    pause = RETRY_PAUSE_SECONDS
    for attempt in range(spec.max_retries + 1):
        if attempt:
            time.sleep(pause)
            pause *= 2
        try:
            rows = _connection(spec).execute(sql, [list(column) for column in zip(*keys, strict=True)]).fetchall()
        except Exception as error:  # noqa: BLE001 - retried, then reported in one line
            failure = error
            _CONNECTIONS.pop(spec.identity, None)
            continue
        found: dict[tuple, list[tuple]] = {}
        for row in rows:
            found.setdefault(tuple(row[i] for i in position), []).append(tuple(row))
        return found
    said = str(failure).strip().splitlines()[0] if failure is not None and str(failure).strip() else "no answer"
    raise RuntimeError(f"lookup table {spec.table}: PostgreSQL did not answer a look-up: {said}")


def look_up(spec: Spec, outer: bool, stats: dict[str, Any]) -> Any:
    """The function the rule maps a stream's rows through (``DataFrame.mapInArrow``'s kind). A partial of a
    function of this module: the worker imports the module, with its caches, rather than unpickling them."""
    return functools.partial(serve, spec, outer, stats)


def serve(spec: Spec, outer: bool, stats: dict[str, Any], batches: Iterator[Any]) -> Iterator[Any]:
    """Each batch of stream rows (their columns, then the key columns the rule added) beside their rows of the
    table: one output row per match, or for a LEFT JOIN one with NULLs when there is none."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    arrow = to_arrow_schema(S.StructType.fromJson(json.loads(spec.schema_json)))
    for batch in batches:
        names = batch.schema.names
        key_at = [i for i, name in enumerate(names) if name.startswith(KEY)]
        key_names = [names[i][len(KEY) :] for i in key_at]
        width = len(names) - len(key_at)  # the stream's own columns come first
        keys = list(zip(*(batch.column(i).to_pylist() for i in key_at), strict=True)) if batch.num_rows else []
        with _LOCK:
            cache = _CACHES.setdefault(spec.identity, Cache(spec.max_rows, spec.expire_seconds))
            now = time.time()
            found: dict[tuple, list[tuple]] = {}
            missing = []
            for key in set(keys):
                if any(value is None for value in key):
                    continue  # NULL equals nothing
                rows = cache.get(key, now)
                if rows is None:
                    missing.append(key)
                else:
                    found[key] = rows
            hits = len(found)
            if missing:
                fetched = _fetch(spec, key_names, missing)
                for key in missing:
                    rows = fetched.get(key, [])
                    found[key] = rows
                    if rows or spec.cache_missing:
                        cache.put(key, rows, now)
            held = cache.rows
        stats["hits"].add(hits)
        stats["misses"].add(len(missing))
        stats["held"].add(held)
        take: list[int] = []
        matched: list[tuple | None] = []
        for position, key in enumerate(keys):
            rows = found.get(key) or []
            for row in rows:
                take.append(position)
                matched.append(row)
            if not rows and outer:
                take.append(position)
                matched.append(None)
        indices = pa.array(take, type=pa.int64())
        stream = [batch.column(i).take(indices) for i in range(width)]
        table = [
            pa.array([None if row is None else row[i] for row in matched], type=field.type)
            for i, field in enumerate(arrow)
        ]
        columns = stream + table  # by position: the stream's and the table's columns may share names
        yield pa.RecordBatch.from_arrays(columns, names=[f"_{i}" for i in range(len(columns))])


def functions(spark: SparkSession, spec: Spec, schema: S.StructType) -> tuple[Any, Any, dict[str, Any]]:
    """The look-up functions for JOIN and LEFT JOIN, as the Python UDFs the rule puts in the plan, and the
    accumulators they count their look-ups in (``hits``, ``misses``, ``held``: the most rows a cache held)."""
    context = spark.sparkContext
    stats = {"hits": context.accumulator(0), "misses": context.accumulator(0), "held": context.accumulator(0, _Max())}
    template: DataFrame = spark.createDataFrame(context.emptyRDD(), "x INT")
    made = []
    for outer in (False, True):
        frame = template.mapInArrow(look_up(spec, outer, stats), schema)
        made.append(analysed_plan(frame).functionExpr())
    return made[0], made[1], stats


def check_joins(
    spark: SparkSession, result: DataFrame, markers: Sequence[Any], *, file: str | None, field: str, line: int | None
) -> None:
    """Each PARTIAL lookup table of the query is joined as the rule can look it up (UserError otherwise): the
    query's plan is optimised once with stand-in look-up functions, which are never called."""
    partial = [m for m in markers if LookupOptions.of(m.table).cache == "PARTIAL"]
    if not partial:
        return
    from jobs.lookup import rule

    lookups = rule.rule(spark)
    for marker in partial:
        stand_in = spark.createDataFrame(spark.sparkContext.emptyRDD(), "x INT").mapInArrow(_never, marker.frame.schema)
        function = analysed_plan(stand_in).functionExpr()
        lookups.putPartial(marker.id, function, function, marker.table.name)
    try:
        optimizer = java_session(spark).sessionState().optimizer()  # a stream's plan cannot be planned as a batch's
        optimizer.execute(analysed_plan(result))
    except Exception as error:  # noqa: BLE001 - the rule's refusal, in one line
        said = next((line for line in str(error).splitlines() if "PARTIAL lookup table" in line), None)
        if said is None:
            raise
        reason = (
            said[said.index("PARTIAL lookup table") :]
            if "LEFT JOIN of" not in said
            else said[said.index("LEFT JOIN of") :]
        )
        raise UserError.of("LOOKUP_PARTIAL_JOIN", file=file, field=field, line=line, reason=reason) from None
    finally:
        for marker in partial:
            lookups.forgetPartial(marker.id)


def _never(batches: Iterator[Any]) -> Iterator[Any]:
    raise RuntimeError("a stand-in look-up function is never called")


def spec_of(
    table_name: str, db: Any, names: Mapping[str, str], schema: S.StructType, identity: str, options: LookupOptions
) -> Spec:
    from jobs.connectors.jdbc import pg_type
    from jobs.jdbc import quote_identifier

    connection = {
        "host": db.host,
        "port": db.port,
        "dbname": db.dbname,
        "user": db.user,
        "password": db.password,
        "connect_timeout": 5,
        "application_name": "sql-runner lookup",
        **dict(db.params),
    }
    return Spec(
        table=table_name,
        connection=connection,
        relation=f"{quote_identifier(db.schema)}.{quote_identifier(db.table)}",
        columns=tuple((f.name, quote_identifier(names[f.name]), str(pg_type(f.dataType))) for f in schema.fields),
        schema_json=schema.json(),
        max_rows=options.max_rows,
        expire_seconds=options.expire_seconds,
        cache_missing=options.cache_missing,
        max_retries=options.max_retries,
        identity=identity,
    )
