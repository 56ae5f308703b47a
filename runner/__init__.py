"""spark-sql-runner: deploys streaming SQL manifests to Spark Structured Streaming.

Subpackages by concern, in layers (docs/contributing.md): cli over deploy and aws, over
analysis, state and targets, over authoring (and the jobs/ package), over core.
"""
