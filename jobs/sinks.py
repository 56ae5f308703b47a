"""Writing a streaming DataFrame's micro-batches to a declared table.

Every query writes through ``foreachBatch`` (``OutputSink``); how a batch reaches the table is the
target's connector's (``jobs/connectors/``): Spark's file sink, a Kafka producer, a database
transaction, stdout, or nowhere.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql.streaming import DataStreamWriter

from runner.core import connectors
from runner.core.errors import UserError
from runner.core.tables import TableDef


@dataclass(frozen=True)
class Trigger:
    """How often micro-batches run: every ``interval`` or once over what is available."""

    interval: str | None = None
    available_now: bool = False

    def apply(self, writer: DataStreamWriter) -> DataStreamWriter:
        if self.available_now:
            return writer.trigger(availableNow=True)
        return writer.trigger(processingTime=self.interval or "10 seconds")


def check_sink(target: TableDef) -> None:
    """The target's connector can be written, in a mode it supports."""
    connector = connectors.named(target.connector)
    if not connector.sink:
        raise UserError.of(
            "CONNECTOR_NOT_A_SINK", file=target.file, line=target.line, table=target.name, connector=target.connector
        )
    if target.primary_key and not connector.keyed_sink:
        raise UserError.of("SINK_PRIMARY_KEY_UNSUPPORTED", file=target.file, line=target.line, table=target.name)


def output_mode(target: TableDef) -> str:
    return "update" if target.primary_key else "append"


@dataclass(frozen=True)
class OutputSink:
    """How a job's micro-batches reach its target: every query writes through ``foreachBatch``, so the
    same batch can also set its malformed records aside (``jobs/deadletters.py``)."""

    frame: DataFrame  # what the query streams (for Kafka: the key and value records)
    write: Callable[[DataFrame, int], None]
    mode: str  # append, or update for a keyed target
    committed: Callable[[int], bool] = lambda _batch_id: False  # a replayed batch the sink already holds
    # ``write`` only runs the batch's executed plan (Spark's file sink, the noop sink), so it can take the
    # micro-batch as Spark hands it to its own sinks (``jobs/runtime.py:streamed``).
    runs_plan: bool = False
    changes: Any = None  # a changelog query's engine (jobs/changelog/engine.py), which says what each batch did
