"""Writing ``print`` tables in Spark: rows logged to stdout, prefixed with the print-identifier; a
changelog query's changes in Flink's notation, ``+I[...]``, ``-U[...]`` / ``+U[...]``, ``-D[...]``."""

from __future__ import annotations

import sys
from collections.abc import Callable

from pyspark.sql import DataFrame, SparkSession

from jobs.changelog.engine import KIND
from jobs.changelog.sinks import Written
from jobs.connectors.base import SparkConnector
from jobs.sinks import OutputSink
from runner.core.manifest import Manifest
from runner.core.tables import TableDef

DEFAULT_MAX_ROWS = "100"


class SparkPrint(SparkConnector):
    name = "print"

    def sink(
        self, frame: DataFrame, target: TableDef, options: dict[str, str], *, checkpoint: str, query: str, mode: str
    ) -> OutputSink:
        identifier = options.get("print-identifier", target.parts[-1])
        return OutputSink(frame, _printer(identifier, int(options.get("print.max-rows", DEFAULT_MAX_ROWS))), mode)

    def change_sink(
        self, spark: SparkSession, target: TableDef, options: dict[str, str], manifest: Manifest, query: str
    ) -> PrintChanges:
        identifier = options.get("print-identifier", target.parts[-1])
        return PrintChanges(identifier, int(options.get("print.max-rows", DEFAULT_MAX_ROWS)))


def _printer(identifier: str, max_rows: int) -> Callable[[DataFrame, int], None]:  # foreachBatch callback
    def print_batch(batch: DataFrame, batch_id: int) -> None:
        rows = batch.limit(max_rows + 1).collect()
        for row in rows[:max_rows]:
            values = ", ".join("NULL" if v is None else str(v) for v in row)
            sys.stdout.write(f"{identifier}> +I[{values}]\n")
        if len(rows) > max_rows:
            sys.stdout.write(f"{identifier}> ... batch {batch_id} has more rows (print.max-rows = {max_rows})\n")
        sys.stdout.flush()

    return print_batch


class PrintChanges:
    def __init__(self, identifier: str, max_rows: int):
        self.identifier, self.max_rows = identifier, max_rows

    def write(self, difference: DataFrame, batch_id: int, *, replace: bool) -> Written | None:
        del replace
        rows = difference.collect()
        deletes = sum(1 for row in rows if row[KIND] == "delete")
        for row in rows[: self.max_rows]:
            for sign, image in _signs(row[KIND], row["before"], row["after"]):
                values = ", ".join("NULL" if v is None else str(v) for v in image)
                sys.stdout.write(f"{self.identifier}> {sign}[{values}]\n")
        if len(rows) > self.max_rows:
            sys.stdout.write(f"{self.identifier}> ... batch {batch_id} has more changes (print.max-rows)\n")
        sys.stdout.flush()
        return Written(len(rows) - deletes, deletes)


def _signs(kind: str, before, after) -> list[tuple[str, object]]:
    if kind == "insert":
        return [("+I", after)]
    if kind == "delete":
        return [("-D", before)]
    return [("-U", before), ("+U", after)]
