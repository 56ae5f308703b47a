"""Spark's own streaming checks, run at ``validate`` and ``plan`` time instead of on start.

Spark refuses to start a streaming query whose plan it cannot run incrementally in the
sink's output mode (an aggregation without a watermark into an append sink, a sort, a
distinct aggregate, ...). The same check (``UnsupportedOperationChecker.checkForStreaming``,
which ``DataStreamWriter.start`` runs) is applied here to the analysed streaming plan the
job will run, with the output mode its sink will use, so the error is one line naming the
manifest, with what to do about it, and nothing is deployed.
"""

from __future__ import annotations

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame

from jobs.jvm import analysed_plan, jvm_of
from jobs.query import first_line
from runner.core.errors import UserError

# What to do, by what Spark said (first match wins; patterns are parts of Spark's messages).
_HINTS = (
    (
        "distinct aggregation",
        "use approx_count_distinct(...) instead of COUNT(DISTINCT ...), or deduplicate first "
        "(SELECT DISTINCT over a watermarked event-time column) and count in a second step",
    ),
    (
        "sorting is not supported",
        "remove the ORDER BY: a stream never ends, so it cannot be sorted; sort when reading the target table",
    ),
    (
        "aggregations without watermark",
        "declare a WATERMARK on the source's event-time column and group by a window over it (or by "
        "that column), so closed groups can be appended; or give the target table a PRIMARY KEY "
        "(update mode, e.g. a Kafka table) to emit updated results",
    ),
    (
        "without a watermark",
        "declare a WATERMARK on each source and bound the join by event time (e.g. "
        "a.ts BETWEEN b.ts AND b.ts + INTERVAL 1 MINUTE), so unmatched rows can be dropped from state",
    ),
    ("join", "check the join type and condition against Spark's supported stream-stream joins"),
    (
        "limit",
        "a streaming LIMIT is supported only in append mode and without an aggregation above it",
    ),
)
_DEFAULT_HINT = "rewrite the query so Spark can run it incrementally (Spark's guide: 'Unsupported Operations')"


def hint_for(reason: str) -> str:
    lowered = reason.lower()
    return next((hint for pattern, hint in _HINTS if pattern in lowered), _DEFAULT_HINT)


def check(output: DataFrame, mode: str, *, file: str | None, field: str, line: int | None = None) -> None:
    """Raise UserError (STREAMING_UNSUPPORTED) if Spark would refuse ``output`` in ``mode``."""
    jvm = jvm_of(output.sparkSession)
    modes = jvm.org.apache.spark.sql.streaming.OutputMode
    spark_mode = {"append": modes.Append, "update": modes.Update, "complete": modes.Complete}[mode]()
    checker = jvm.org.apache.spark.sql.catalyst.analysis.UnsupportedOperationChecker
    try:
        checker.checkForStreaming(analysed_plan(output), spark_mode)
    except AnalysisException as error:
        reason = first_line(error.getMessage()).rstrip(";")
        raise UserError.of(
            "STREAMING_UNSUPPORTED", file=file, field=field, line=line, mode=mode, reason=reason, hint=hint_for(reason)
        ) from None
