"""Deciding and deploying: the pure plan, the spark-submit command, and carrying decisions out."""
