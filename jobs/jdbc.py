"""The jdbc sink's database: PostgreSQL, written from the driver, one transaction per micro-batch.

Each micro-batch's rows go to the table in one transaction that also records the
query's batch id in a fence table (``sql_runner_batches``, created on first use in the
target's schema). A batch whose id the fence already holds is skipped: a batch replayed
after a crash writes nothing twice, and a crash before the commit leaves nothing of the
batch. With a PRIMARY KEY rows are upserted (``INSERT ... ON CONFLICT (key) DO UPDATE``)
and keys deleted; without one rows are appended.

Rows travel with ``COPY`` into a temporary table, then one statement moves them: the
cost per row is PostgreSQL's, not a round trip's. Spark's own JDBC writer commits per
partition, so it could not make a micro-batch all or nothing; psycopg from the driver can.

Secrets: ``username`` and ``password`` are placeholders resolved in the driver
(``runner/core/placeholders.py``); they are passed to the driver library as arguments,
never put in a URL, a log line or an error message.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from runner.core.errors import UserError
from runner.core.tables import METADATA_NAMES, TableDef

FENCE_TABLE = "sql_runner_batches"


@dataclass(frozen=True)
class Database:
    """Where a jdbc table is: connection settings (without secrets in any text) and the table's name."""

    host: str
    port: int
    dbname: str
    schema: str
    table: str
    user: str | None
    password: str | None
    params: tuple[tuple[str, str], ...] = ()

    @property
    def where(self) -> str:
        """For messages: host, port, database and table, no credentials."""
        return f"{self.host}:{self.port}/{self.dbname} table {self.schema}.{self.table}"

    def connect(self, *, timeout: int = 10):  # psycopg.Connection
        import psycopg

        settings = dict(self.params)
        return psycopg.connect(
            host=self.host,
            port=self.port,
            dbname=self.dbname,
            user=self.user,
            password=self.password,
            connect_timeout=timeout,
            application_name="sql-runner",
            **settings,
        )


def database(target: TableDef, options: dict[str, str]) -> Database:
    """The database of a jdbc table, from its resolved options."""
    url = options["url"]
    if not url.startswith("jdbc:postgresql://"):
        raise UserError.of(
            "DDL_INVALID_CONNECTOR_OPTION",
            file=target.file,
            line=target.line,
            table=target.name,
            reason="option 'url' is not a PostgreSQL JDBC URL",
            hint="'jdbc:postgresql://<host>:<port>/<database>'",
        )
    parts = urlsplit(url.removeprefix("jdbc:"))
    params = [(k, v) for k, v in parse_qsl(parts.query) if k in ("sslmode", "sslrootcert", "options")]
    name = options["table-name"]
    schema, _, table = name.rpartition(".")
    return Database(
        host=parts.hostname or "localhost",
        port=parts.port or 5432,
        dbname=parts.path.lstrip("/") or "postgres",
        schema=schema or "public",
        table=table,
        user=options.get("username"),
        password=options.get("password"),
        params=tuple(params),
    )


def quote_identifier(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def qualified(db: Database) -> str:
    return f"{quote_identifier(db.schema)}.{quote_identifier(db.table)}"


def declared_columns(target: TableDef) -> list[str]:
    """The columns of a jdbc target the query writes: its declared columns but the computed and metadata ones."""
    return [c.name for c in target.columns if not c.computed and c.name not in METADATA_NAMES]


def output_columns(target: TableDef) -> list[str]:
    """The columns a jdbc target receives: its declared columns, then the metadata columns."""
    return [*declared_columns(target), *METADATA_NAMES]


def unreachable(target: TableDef, db: Database, error: Exception) -> UserError:
    said = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return UserError.of(
        "JDBC_UNREACHABLE", file=target.file, line=target.line, table=target.name, where=db.where, reason=said
    )


def check_table(target: TableDef, db: Database) -> dict[str, str]:
    """The database's own table has every column the target writes, and the target's PRIMARY KEY is a key of
    it (upserts need one); raises a UserError naming what is missing. Names match as PostgreSQL folds them
    (``accountId`` is the column ``accountid``, or ``"accountId"``): the declared name -> the database's."""
    try:
        with db.connect() as conn:
            columns = {
                row[0]
                for row in conn.execute(
                    "SELECT column_name FROM information_schema.columns WHERE table_schema = %s AND table_name = %s",
                    (db.schema, db.table),
                )
            }
            keys = _unique_keys(conn, db) if columns else []
    except UserError:
        raise
    except Exception as error:  # noqa: BLE001 - psycopg's OperationalError and friends
        raise unreachable(target, db, error) from None
    where = {"file": target.file, "line": target.line, "table": target.name}
    if not columns:
        raise UserError.of("JDBC_TABLE_MISSING", where_db=db.where, **where)
    names = {name: match_column(name, columns) for name in output_columns(target)}
    missing = [name for name, found in names.items() if found is None]
    if missing:
        raise UserError.of("JDBC_COLUMN_MISSING", where_db=db.where, columns=", ".join(missing), **where)
    key = sorted(str(names[k]) for k in target.primary_key)
    if target.primary_key and key not in [sorted(k) for k in keys]:
        raise UserError.of(
            "JDBC_KEY_MISMATCH",
            where_db=db.where,
            key=", ".join(target.primary_key),
            keys="; ".join("(" + ", ".join(k) + ")" for k in keys) or "none",
            **where,
        )
    return {name: str(found) for name, found in names.items()}


def match_column(name: str, columns: set[str]) -> str | None:
    """The database column ``name`` denotes: itself, else the one equal but for case (if only one is)."""
    if name in columns:
        return name
    same = [c for c in columns if c.lower() == name.lower()]
    return same[0] if len(same) == 1 else None


def _unique_keys(conn, db: Database) -> list[list[str]]:
    """The column lists of the table's primary key and unique constraints or indexes."""
    rows = conn.execute(
        """
        SELECT array_agg(a.attname ORDER BY k.ordinality)
        FROM pg_index i
        JOIN pg_class c ON c.oid = i.indrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ordinality)
        JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum
        WHERE n.nspname = %s AND c.relname = %s AND i.indisunique AND i.indpred IS NULL
        GROUP BY i.indexrelid
        """,
        (db.schema, db.table),
    ).fetchall()
    return [list(row[0]) for row in rows]


class Writer:
    """Writes micro-batches to one table, each in one transaction fenced by the query's batch id."""

    def __init__(self, target: TableDef, db: Database, query: str, names: dict[str, str]):
        """``query``: the job's identity (``jobs/runtime.py:fence_name``); the fence keeps one batch id per
        query and table. ``names``: each output column's name in the database (``check_table``)."""
        self.target, self.db = target, db
        self.query = f"{query} -> {db.schema}.{db.table}"
        self.columns = [names[c] for c in output_columns(target)]
        self.declared = [names[c] for c in declared_columns(target)]
        self.metadata = [names[c] for c in METADATA_NAMES]
        self.key = [names[k] for k in target.primary_key]
        self._conn = None

    def _connection(self):
        if self._conn is None or self._conn.closed:
            try:
                self._conn = self.db.connect()
            except Exception as error:  # noqa: BLE001 - a clear error; the restart strategy retries
                raise ConnectionError(f"PostgreSQL {self.db.where}: {first_line(error)}") from None
            self._conn.execute(
                f"CREATE TABLE IF NOT EXISTS {quote_identifier(self.db.schema)}.{FENCE_TABLE} "
                "(query TEXT PRIMARY KEY, batch_id BIGINT NOT NULL, committed_at TIMESTAMPTZ NOT NULL DEFAULT now())"
            )
            self._conn.commit()
        return self._conn

    def committed(self, batch_id: int) -> bool:
        """The fence holds ``batch_id`` (or a later batch) of this query."""
        conn = self._connection()
        row = conn.execute(
            f"SELECT batch_id FROM {quote_identifier(self.db.schema)}.{FENCE_TABLE} WHERE query = %s", (self.query,)
        ).fetchone()
        conn.rollback()
        return row is not None and row[0] >= batch_id

    def write(self, batch_id: int, rows: Iterable[Sequence]) -> bool:
        """Write one micro-batch of an ordinary query: ``rows`` (every output column) upserted by the key, or
        appended without one. False when the fence shows the batch written already (nothing is written)."""
        return self._transaction(batch_id, lambda conn: self._copy_rows(conn, rows)) is not None

    def write_changes(
        self, batch_id: int, changes: Iterable[Sequence] | ChangeText, metadata: Sequence, *, replace: bool
    ) -> tuple[int, int] | None:
        """Write one micro-batch of a changelog query: each change is its kind (insert, update, delete), then
        the declared output columns (a delete's key, the rest NULL), as rows or as ``COPY`` text
        (:class:`ChangeText`); ``metadata`` is the metadata columns' values, the same for every row of a
        micro-batch, sent once. With ``replace`` every other row goes first (the changes are the whole result).
        The number of upserts and deletes; None when the fence shows the batch written already (nothing is
        written)."""
        return self._transaction(batch_id, lambda conn: self._copy_changes(conn, changes, metadata, replace))

    def _transaction(self, batch_id: int, body: Callable[[Any], Any]) -> Any:
        conn = self._connection()
        try:
            with conn.transaction():
                fence = f"{quote_identifier(self.db.schema)}.{FENCE_TABLE}"
                conn.execute(
                    f"INSERT INTO {fence} (query, batch_id) VALUES (%s, -1) ON CONFLICT (query) DO NOTHING",
                    (self.query,),
                )
                last = conn.execute(f"SELECT batch_id FROM {fence} WHERE query = %s FOR UPDATE", (self.query,))
                (done,) = last.fetchone()
                if done >= batch_id:
                    return None
                result = body(conn)
                conn.execute(
                    f"UPDATE {fence} SET batch_id = %s, committed_at = now() WHERE query = %s", (batch_id, self.query)
                )
            return result
        except Exception as error:
            if conn.closed or conn.broken:
                self._conn = None
            raise ConnectionError(f"PostgreSQL {self.db.where}: {first_line(error)}") from error

    def _staging(self, conn, name: str, extra: str | None, columns: Sequence[str]) -> None:
        """An empty temporary table of ``extra`` (a column of its own, if any) and the target's ``columns`` (no
        constraints: a delete's row is only its key)."""
        table = qualified(self.db)
        names = ", ".join([*([extra] if extra else []), *(quote_identifier(c) for c in columns)])
        conn.execute(f"CREATE TEMP TABLE IF NOT EXISTS {name} AS SELECT {names} FROM {table} WITH NO DATA")
        conn.execute(f"TRUNCATE {name}")

    def _copy_rows(self, conn, rows: Iterable[Sequence]) -> int:
        table = qualified(self.db)
        names = ", ".join(quote_identifier(c) for c in self.columns)
        count = null_keys = 0
        if not self.key:
            with conn.cursor().copy(f"COPY {table} ({names}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
                    count += 1
            return count
        self._staging(conn, "sql_runner_rows", "0::bigint AS __sql_runner_order", self.columns)
        places = [self.columns.index(k) for k in self.key]
        with conn.cursor().copy(f"COPY sql_runner_rows (__sql_runner_order, {names}) FROM STDIN") as copy:
            for row in rows:
                count += 1
                copy.write_row((count, *row))
                null_keys += any(row[i] is None for i in places)
        # Upserted as if one by one in the batch's order: the last row of a key wins (one INSERT may not update a
        # row twice), and the rows of a key with a NULL part are one key, as GROUP BY takes them
        keys = ", ".join(self._quoted_key())
        last = f"(SELECT DISTINCT ON ({keys}) {names} FROM sql_runner_rows ORDER BY {keys}, __sql_runner_order DESC)"
        self._upsert(conn, last, "TRUE", null_keys=null_keys > 0)
        return count

    def _copy_changes(self, conn, changes: Iterable[Sequence], metadata: Sequence, replace: bool) -> tuple[int, int]:
        table = qualified(self.db)
        declared, meta = self.declared, self.metadata
        self._staging(conn, "sql_runner_changes", "''::text AS __sql_runner_kind", declared)
        # the metadata once, as a row of its own: COPY reads its values as it would read them in every row
        self._staging(conn, "sql_runner_metadata", None, meta)
        with conn.cursor().copy(
            f"COPY sql_runner_metadata ({', '.join(map(quote_identifier, meta))}) FROM STDIN"
        ) as copy:
            copy.write_row(metadata)
        deletes = upserts = null_keys = 0
        places = [1 + declared.index(k) for k in self.key]
        names = ", ".join(quote_identifier(c) for c in declared)
        with conn.cursor().copy(f"COPY sql_runner_changes (__sql_runner_kind, {names}) FROM STDIN") as copy:
            if isinstance(changes, ChangeText):
                for block in changes.blocks:
                    copy.write(block.text)
                    upserts += block.changes - block.deletes
                    deletes += block.deletes
                    null_keys += block.null_keys
            else:
                for change in changes:
                    copy.write_row(change)
                    null_keys += any(change[i] is None for i in places)
                    if change[0] == "delete":
                        deletes += 1
                    else:
                        upserts += 1
        if replace:
            conn.execute(f"DELETE FROM {table}")
        elif deletes:  # by equality, which the key's index serves; a key with a NULL part only if the batch holds one
            deleted = f"DELETE FROM {table} t USING sql_runner_changes d WHERE d.__sql_runner_kind = 'delete' AND"
            conn.execute(f"{deleted} {' AND '.join(f't.{k} = d.{k}' for k in self._quoted_key())}")
            if null_keys:
                conn.execute(f"{deleted} ({self._null_key()}) AND {self._same_key()}")
        if upserts:
            picked = ", ".join(
                [f"c.{quote_identifier(n)}" for n in declared] + [f"m.{quote_identifier(n)}" for n in meta]
            )
            staged = (
                f"(SELECT c.__sql_runner_kind, {picked} FROM sql_runner_changes c CROSS JOIN sql_runner_metadata m)"
            )
            self._upsert(conn, staged, "__sql_runner_kind <> 'delete'", null_keys=null_keys > 0 and not replace)
        return upserts, deletes

    def _quoted_key(self) -> list[str]:
        return [quote_identifier(k) for k in self.key]

    def _null_key(self) -> str:
        """The staged row ``d``'s key has a NULL part."""
        return " OR ".join(f"d.{k} IS NULL" for k in self._quoted_key())

    def _same_key(self) -> str:
        """The target's row ``t`` and the staged row ``d`` have the same key, a NULL part equal to a NULL part."""
        return " AND ".join(f"t.{k} IS NOT DISTINCT FROM d.{k}" for k in self._quoted_key())

    def _upsert(self, conn, staged: str, which: str, *, null_keys: bool) -> None:
        """Insert the ``staged`` rows ``which`` are upserts, or update the target's row of their key.

        A key with a NULL part (a UNIQUE constraint takes one) meets no conflict: with ``null_keys`` (the batch
        holds such a key) the target's rows of such keys are updated first, by IS NOT DISTINCT FROM (no index
        serves that), and only those without a row are inserted. Either way a row is updated in place, never
        deleted and inserted again: the columns the query does not write keep their values and nothing that
        references the row sees it go."""
        table = qualified(self.db)
        names = ", ".join(quote_identifier(c) for c in self.columns)
        others = [quote_identifier(c) for c in self.columns if c not in self.key]
        update = "DO UPDATE SET " + ", ".join(f"{c} = EXCLUDED.{c}" for c in others) if others else "DO NOTHING"
        if null_keys:
            nulls = self._null_key()
            if others:
                conn.execute(
                    f"UPDATE {table} t SET {', '.join(f'{c} = d.{c}' for c in others)} FROM {staged} d "
                    f"WHERE ({which}) AND ({nulls}) AND {self._same_key()}"
                )
            which = f"({which}) AND NOT (({nulls}) AND EXISTS (SELECT 1 FROM {table} t WHERE {self._same_key()}))"
        conn.execute(
            f"INSERT INTO {table} ({names}) SELECT {names} FROM {staged} d WHERE {which} "
            f"ON CONFLICT ({', '.join(self._quoted_key())}) {update}"
        )

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


@dataclass(frozen=True)
class TextBlock:
    """Changes as ``COPY`` text, whole lines of PostgreSQL's text format (a line per change, its values separated
    by tabs, NULL as ``\\N``, backslashes, tabs and line ends escaped), and what they hold, counted where the
    text was made."""

    text: str
    changes: int
    deletes: int
    null_keys: bool  # a change's key has a NULL part


@dataclass(frozen=True)
class ChangeText:
    """A micro-batch's changes as ``COPY`` text, block after block, read once."""

    blocks: Iterable[TextBlock]


def first_line(error: BaseException) -> str:
    said = str(error).strip()
    return said.splitlines()[0] if said else type(error).__name__
