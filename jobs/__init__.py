"""What runs inside Spark: the job entry point, sources, sinks and metadata columns."""
