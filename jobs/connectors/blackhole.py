"""Writing ``blackhole`` tables in Spark: every row (or change) computed, then discarded, as Spark's noop
sink does."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

from jobs.changelog.sinks import Written, kinds
from jobs.connectors.base import SparkConnector
from jobs.jvm import java_frame
from jobs.sinks import OutputSink
from runner.core.manifest import Manifest
from runner.core.tables import TableDef


class SparkBlackhole(SparkConnector):
    name = "blackhole"

    def sink(
        self, frame: DataFrame, target: TableDef, options: dict[str, str], *, checkpoint: str, query: str, mode: str
    ) -> OutputSink:
        return OutputSink(frame, _discard, mode, runs_plan=True)

    def change_sink(
        self, spark: SparkSession, target: TableDef, options: dict[str, str], manifest: Manifest, query: str
    ) -> Discard:
        return Discard()


def _discard(batch: DataFrame, _batch_id: int) -> None:
    """Spark's noop sink: every row of the batch computed, none kept."""
    java_frame(batch).queryExecution().toRdd().count()


class Discard:
    def write(self, difference: DataFrame, batch_id: int, *, replace: bool) -> Written | None:
        del batch_id, replace
        return kinds(difference)
