"""How the suite's Spark JVMs start in half the CPU: compiled by C1 only, one GC thread, and their classes
mapped from the drivers' class-data archive (``runner/core/classdata.py``) instead of read, parsed and
verified again by every JVM.

The suite starts a Spark driver well over a hundred times (each job, session, analysis and the test
processes' own), on two cores shared by two test processes. A driver with the JVM's defaults spends
about 25 CPU seconds getting to its first query; these options bring that to about 9, with the same
classes and the same results: they change how the JVM compiles and loads code, nothing it runs. The
drivers the runner starts map the archive anyway; these options give it to every other JVM the suite
starts too (the test processes' own Spark), with the compiler settings that suit short-lived JVMs.
"""

from __future__ import annotations

from runner.core import classdata

# and room for the compiled code of a test process's Spark that runs a dozen queries side by side (C1's default 48
# MiB filled up in test_incremental_plans.py's shapes test, and the JVM stopped compiling: 481 s, 463 s with room)
JIT = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:ReservedCodeCacheSize=160m"


def spark_options() -> str:
    """``SPARK_SUBMIT_OPTS`` for the suite: the JIT options, and the class-data archive (built if missing)."""
    classdata.build(say=lambda line: print(line, flush=True))
    return f"{JIT} {classdata.options()}".strip()
