"""The six metadata columns every output row carries.

Values come from the deployed manifest and are bound as SQL literals by
``jobs/sqltext.py``, which never lets a quote or backslash into a literal, so no name or
description can change a query. The columns are one ``selectExpr``: one parse in the JVM
instead of a Py4J call per literal, cast and alias.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import types as T

from jobs import sqltext
from jobs.schema import spark_type, type_sql
from runner.core.errors import UserError
from runner.core.manifest import Manifest
from runner.core.tables import METADATA_COLUMNS, METADATA_NAMES


def with_metadata(frame: DataFrame, manifest: Manifest) -> DataFrame:
    """``frame`` plus the metadata columns, in their declared order."""
    meta = manifest.meta
    if meta is None:
        raise UserError.of("JOB_SPEC_WITHOUT_META", name=manifest.name)
    description = manifest.description
    # The instant exactly as Spark stores it (microseconds since the epoch; naive means local time).
    created = T.TimestampType().toInternal(meta.query_create_timestamp)
    values = {
        "__create_timestamp": "current_timestamp()",
        "__query_name": sqltext.string(manifest.name),
        "__query_description": "NULL" if description is None else sqltext.string(description),
        "__query_id": sqltext.string(meta.query_id),
        "__query_version": str(int(meta.query_version)),
        "__query_create_timestamp": f"timestamp_micros({int(created)})",
    }
    types = dict(METADATA_COLUMNS)
    columns = [
        f"CAST({values[name]} AS {type_sql(spark_type(types[name]))}) AS {sqltext.identifier(name)}"
        for name in METADATA_NAMES
    ]
    return frame.selectExpr("*", *columns)
