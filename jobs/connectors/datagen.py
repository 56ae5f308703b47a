"""Reading ``datagen`` tables in Spark: generated rows, at a set rate (``jobs/datagen.py``). They are
never malformed."""

from __future__ import annotations

from pyspark.sql import SparkSession

from jobs.connectors.base import SparkConnector
from jobs.datagen import datagen_frame
from jobs.records import NO_ERRORS
from jobs.sources import Source
from runner.core.starts import Start
from runner.core.tables import TableDef


class SparkDatagen(SparkConnector):
    name = "datagen"

    def source(self, spark: SparkSession, table: TableDef, options: dict[str, str], start: Start | None) -> Source:
        return Source(table, datagen_frame(spark, table, options), NO_ERRORS)
