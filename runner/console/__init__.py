"""The web console (``sql-runner console``, and served by the session) and the one HTTP stack under it."""
