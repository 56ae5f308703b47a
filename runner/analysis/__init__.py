"""Where the control plane runs Spark itself: validating and comparing queries, previews.

Everything here analyses on an in-process local Spark session and reads no data except
for previews. Nothing else in the control plane imports pyspark.
"""
