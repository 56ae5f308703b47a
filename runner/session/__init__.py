"""Session mode: one long-running Spark application per team hosts many streaming queries."""
