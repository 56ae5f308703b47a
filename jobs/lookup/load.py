"""Loading one snapshot of a lookup table: its rows now, cached on the executors.

Where the rows come from is the table's connector's (``SparkConnector.lookup``: a PostgreSQL table,
a folder of files). Whichever it is, a row with NULL in a NOT NULL column fails the load. The rows
are then held by a DataFrame over the driver's copy of them, cached: should a cached block be lost,
Spark rebuilds it from that copy, never from a database or folder that may have changed since.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from jobs.connectors import lookup_rows
from jobs.connectors.base import LoadFailed
from jobs.jdbc import first_line
from jobs.schema import spark_schema
from runner.core.tables import TableDef

__all__ = ["LoadFailed", "Loaded", "Loader"]


@dataclass(frozen=True)
class Loaded:
    frame: DataFrame  # cached and materialised
    rows: int
    seconds: float  # how long the load took


class Loader:
    """Loads snapshots of one lookup table."""

    def __init__(self, spark: SparkSession, table: TableDef, env: Mapping[str, str]):
        self.spark, self.table = spark, table
        self.schema = spark_schema(table)
        self.source = lookup_rows(spark, table, env)  # holds the resolved options: secrets stay in it

    @property
    def where(self) -> str:
        return self.source.where

    def load(self) -> Loaded:
        """A new snapshot, cached; LoadFailed with the reason when the rows cannot be had."""
        began = time.monotonic()
        rows = self.source.rows()
        self._check_not_null(rows)
        frame = self.spark.createDataFrame(rows, self.schema, verifySchema=False).cache()
        try:
            count = frame.count()
        except Exception as error:  # noqa: BLE001 - a value Spark cannot take
            frame.unpersist()
            raise LoadFailed(f"{self.table.name}: {first_line(error)}") from None
        return Loaded(frame, count, time.monotonic() - began)

    def _check_not_null(self, rows: list[Any]) -> None:
        required = [(i, f.name) for i, f in enumerate(self.schema.fields) if not f.nullable]
        for i, name in required:
            nulls = sum(1 for row in rows if row[i] is None)
            if nulls:
                raise LoadFailed(f"{self.table.name}: {nulls} rows have no value in NOT NULL column {name}")
