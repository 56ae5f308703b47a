"""The test suite.

Test modules (``test_*.py``) hold tests and what only they use; what several of them share lives in the
helper modules beside them, and a test module never imports another one (tests/test_architecture.py):

- ``conftest.py``: the fixtures (Spark, the Kafka broker, PostgreSQL, throw-away projects) and the demo
  project's tables and manifest;
- ``clihelpers.py``: the ``sql-runner`` command, run as its own process or in this one, what it and its jobs
  report (status, history), and waiting on a condition;
- ``jobhelpers.py``: a manifest's query run in the test process, on the test's SparkSession;
- ``tablehelpers.py``: tables declared, filled and read back (PostgreSQL's metadata columns, keyed targets,
  files of a folder table written whole);
- ``consolehelpers.py``: ``sql-runner console`` as its own process and calls to its API;
- ``s3events.py``, ``recording_target.py``, ``fake_yarn.py``, ``motoserver.py``, ``standalone_cluster.py``,
  ``services.py``, ``browser.py``: what the runner talks to, real or stood in for;
- ``jvmcds.py``: how the suite's JVMs start; ``classfiles.py``: reading Java class files.
"""
