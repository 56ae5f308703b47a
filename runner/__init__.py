"""Control plane of spark-sql-runner: manifests, tables, validation, the CLI."""
