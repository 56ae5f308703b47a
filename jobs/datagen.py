"""The ``datagen`` connector: rows at a set rate, one generator per declared column.

Built on Spark's ``rate`` source. Values are a deterministic function of the row number
and the seed (hash based), so a restarted job regenerates the same rows for the same
offsets. Per-column options (``fields.<col>.<option>``):

    kind         random (default) or sequence
    min, max     bounds for numbers (random)            default 0 .. 1000
    start, end   range for sequences (wraps around)     default 0 .. unbounded
    length       length of random strings               default 10
    cardinality  distinct values of a string or number  (e.g. keys: 'account-17')
    values       comma-separated list to pick from
    null-rate    share of NULLs, 0..1                   default 0
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from jobs.schema import spark_schema
from runner.core.tables import TableDef

_INTEGRAL = (T.ByteType, T.ShortType, T.IntegerType, T.LongType)
_FRACTIONAL = (T.FloatType, T.DoubleType, T.DecimalType)


def datagen_frame(spark: SparkSession, table: TableDef, options: dict[str, str]) -> DataFrame:
    """A streaming DataFrame with the table's physical columns."""
    rate = (
        spark.readStream.format("rate")
        .option("rowsPerSecond", options.get("rows-per-second", "10"))
        .option("numPartitions", "1")
        .load()
    )
    if "number-of-rows" in options:
        rate = rate.where(F.col("value") < F.lit(int(options["number-of-rows"])))
    return generate(rate, table, options)


def generate(rows: DataFrame, table: TableDef, options: dict[str, str]) -> DataFrame:
    """Columns generated from ``rows`` (needs ``value`` BIGINT and ``timestamp`` TIMESTAMP)."""
    seed = int(options.get("seed", "0"))
    columns = []
    for index, field in enumerate(spark_schema(table).fields):
        field_options = _field_options(options, field.name)
        expr = _generator(field.name, field.dataType, field_options, seed, index)
        null_rate = float(field_options.get("null-rate", "0"))
        if null_rate > 0:
            draw = F.pmod(F.xxhash64(F.col("value"), F.lit(seed), F.lit(index), F.lit("null")), F.lit(10_000))
            expr = F.when(draw < F.lit(int(null_rate * 10_000)), F.lit(None).cast(field.dataType)).otherwise(expr)
        columns.append(expr.cast(field.dataType).alias(field.name))
    return rows.select(*columns)


def _field_options(options: dict[str, str], column: str) -> dict[str, str]:
    prefix = "fields."
    result = {}
    for key, value in options.items():
        parts = key.split(".")
        if key.startswith(prefix) and len(parts) == 3 and parts[1].lower() == column.lower():
            result[parts[2]] = value
    return result


def _draw(seed: int, index: int, salt: str = "") -> Column:
    """A non-negative pseudo-random BIGINT per row, stable for a given row number."""
    return F.abs(F.xxhash64(F.col("value"), F.lit(seed), F.lit(index), F.lit(salt)) % F.lit(1 << 62))


def _generator(name: str, dtype: T.DataType, opts: dict[str, str], seed: int, index: int) -> Column:
    draw = _draw(seed, index)
    if "values" in opts:
        choices = [v.strip() for v in opts["values"].split(",")]
        return F.element_at(F.array(*[F.lit(v) for v in choices]), (F.pmod(draw, F.lit(len(choices))) + 1).cast("int"))
    if opts.get("kind") == "sequence":
        start = int(float(opts.get("start", "0")))
        if "end" in opts:
            span = int(float(opts["end"])) - start + 1
            return F.lit(start) + F.pmod(F.col("value"), F.lit(max(span, 1)))
        return F.lit(start) + F.col("value")
    if isinstance(dtype, T.StringType):
        if "cardinality" in opts:
            return F.concat(F.lit(f"{name}-"), F.pmod(draw, F.lit(int(opts["cardinality"]))).cast("string"))
        length = int(opts.get("length", "10"))
        return F.substring(F.sha2(draw.cast("string"), 256), 1, length)
    if isinstance(dtype, _INTEGRAL):
        low, high = int(float(opts.get("min", "0"))), int(float(opts.get("max", "1000")))
        if "cardinality" in opts:
            high = low + int(opts["cardinality"]) - 1
        return F.lit(low) + F.pmod(draw, F.lit(max(high - low + 1, 1)))
    if isinstance(dtype, _FRACTIONAL):
        low, high = float(opts.get("min", "0")), float(opts.get("max", "1000"))
        unit = F.pmod(draw, F.lit(1_000_000)) / F.lit(1_000_000.0)
        value = F.lit(low) + unit * F.lit(high - low)
        return F.round(value, dtype.scale) if isinstance(dtype, T.DecimalType) else value
    if isinstance(dtype, T.BooleanType):
        return F.pmod(draw, F.lit(2)) == F.lit(0)
    if isinstance(dtype, T.TimestampType | T.TimestampNTZType):
        return F.col("timestamp")
    if isinstance(dtype, T.DateType):
        return F.to_date(F.col("timestamp"))
    if isinstance(dtype, T.BinaryType):
        return F.unhex(F.substring(F.sha2(draw.cast("string"), 256), 1, 2 * int(opts.get("length", "8"))))
    if isinstance(dtype, T.ArrayType):
        return F.array(
            _generator(name, dtype.elementType, {}, seed, index * 31 + 1),
            _generator(name, dtype.elementType, {}, seed, index * 31 + 2),
        )
    if isinstance(dtype, T.MapType):
        return F.create_map(
            _generator(name, dtype.keyType, {}, seed, index * 31 + 3),
            _generator(name, dtype.valueType, {}, seed, index * 31 + 4),
        )
    if isinstance(dtype, T.StructType):
        return F.struct(
            *[
                _generator(f.name, f.dataType, {}, seed, index * 31 + 5 + i).cast(f.dataType).alias(f.name)
                for i, f in enumerate(dtype.fields)
            ]
        )
    raise ValueError(f"datagen has no generator for {dtype.simpleString()} (column {name})")
