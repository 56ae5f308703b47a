"""The six metadata columns every output row carries.

Values come from the deployed manifest and are bound as literals in the plan
(``F.lit``), never pasted into SQL text, so no description can change a query.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from jobs.schema import spark_type
from runner.core.errors import UserError
from runner.core.manifest import Manifest
from runner.core.tables import METADATA_COLUMNS

METADATA_NAMES = tuple(name for name, _ in METADATA_COLUMNS)


def with_metadata(frame: DataFrame, manifest: Manifest) -> DataFrame:
    """``frame`` plus the metadata columns, in their declared order."""
    meta = manifest.meta
    if meta is None:
        raise UserError.of("JOB_SPEC_WITHOUT_META", name=manifest.name)
    types = dict(METADATA_COLUMNS)
    values = {
        "__create_timestamp": F.current_timestamp(),
        "__query_name": F.lit(manifest.name),
        "__query_description": F.lit(manifest.description),
        "__query_id": F.lit(meta.query_id),
        "__query_version": F.lit(meta.query_version),
        "__query_create_timestamp": F.lit(meta.query_create_timestamp),
    }
    return frame.select("*", *[values[name].cast(spark_type(types[name])).alias(name) for name in METADATA_NAMES])
