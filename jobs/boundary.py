"""The line a stopping query's micro-batches may not cross: no batch begins writing once a stop began.

Spark stops a query by interrupting it, wherever it is. A micro-batch interrupted while its sink
writes is not committed, so the next run replays it: the file sink's log makes that harmless, but
a Kafka topic (or any sink without transactions) receives the part already written twice. A
graceful stop (a stop request, a savepoint, a session's change) must therefore stop a query only
between batches, and a busy query, whose next batch begins the moment one ends, may never be
between batches when someone looks.

So every job's ``foreachBatch`` callback passes its query's ``Boundary`` before it writes anything.
Closing it answers which batch last began writing; the stopper waits until that batch is
committed, then stops the query. A batch that comes to the boundary after it closed writes
nothing and ends its query with ``StoppedAtBoundary`` — not a failure: the batch is not
committed, and whoever restores the checkpoint runs it, once.
"""

from __future__ import annotations

import threading

from pyspark.sql.streaming import StreamingQuery


class StoppedAtBoundary(RuntimeError):
    """A micro-batch reached a closed boundary: it wrote nothing, its query ends uncommitted."""


class Boundary:
    """Where one query's micro-batches begin writing (see the module's docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._closed = False
        self.began: int | None = None  # the last batch that began writing
        self.refused: int | None = None  # the batch stopped at the boundary, if one was

    def enter(self, batch_id: int) -> None:
        """Called before batch ``batch_id`` writes: raises ``StoppedAtBoundary`` once closed."""
        with self._lock:
            if self._closed:
                self.refused = batch_id
                raise StoppedAtBoundary(f"batch {batch_id} not begun: the query is stopping; it runs on restore")
            self.began = batch_id

    def close(self) -> int | None:
        """No batch begins writing from now on; returns the last one that did (it may still be writing)."""
        with self._lock:
            self._closed = True
            return self.began


_ATTRIBUTE = "_sql_runner_boundary"


def attach(query: StreamingQuery, boundary: Boundary) -> None:
    """Keep ``boundary`` with the query object ``runtime.start`` returns (and its callers hold)."""
    setattr(query, _ATTRIBUTE, boundary)


def of(query: StreamingQuery) -> Boundary:
    found = getattr(query, _ATTRIBUTE, None)
    if found is None:
        raise ValueError(f"query {query.name} was not started by jobs/runtime.py: it has no boundary")
    return found


def stopped_at_boundary(query: StreamingQuery) -> bool:
    """Whether ``query`` ended because a batch reached its closed boundary (a graceful stop, not a failure)."""
    found = getattr(query, _ATTRIBUTE, None)
    return found is not None and found.refused is not None
