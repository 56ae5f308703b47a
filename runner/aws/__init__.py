"""The runner on AWS: the deploy Lambda and the EMR steps it adds.

Shipped in the Lambda's zip with runner/core and runner/authoring only: no Spark, no CLI.
"""
