"""The Spark-free core: the data types the control plane and the jobs share.

Manifests, declared tables and their catalog, column types, job specs, state references,
sources' starts, query differences, the state store's key layout and buckets, and the
user errors every layer raises. Nothing here imports pyspark, the control plane or the CLI.
"""
