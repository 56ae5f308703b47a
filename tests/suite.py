"""``make test``: the whole suite, in the order that suits two cores.

    python -m tests.suite [pytest options for every run, e.g. --durations=20]

1. The platform's journey (``-m platform``: tests/test_local_aws.py, 15 to 80 minutes as the machine is busy) in a
   pytest of its own, beside 2. Most of its time is spent waiting on the pace of Terraform's AWS provider (it
   waits about a minute for each bucket's lifecycle rules and half a minute for the EMR cluster, whatever the
   endpoint) and of YARN, so it runs from the start next to the others instead of taking one of their two
   processes for its whole length. Its output is kept and shown when it ends.
2. Every other test but those marked ``alone``, in two test processes (pytest-xdist): most of a test waits on its
   Spark jobs. A third process running the same kind of tests makes the end-to-end tests' timing flaky.
3. The tests marked ``alone`` (they time what they check), one at a time.

The exit code is pytest's first non-zero one (each run says what failed).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile

from runner.core import terminal

PYTEST = [sys.executable, "-m", "pytest", "-q"]
RUNS = {
    "platform": ["-m", "platform and not alone"],
    "others": ["-n", "2", "--dist", "worksteal", "-m", "not platform and not alone"],
    "alone": ["-m", "alone"],
}


def _stop(process: subprocess.Popen | None, *, interrupted: bool) -> None:
    """Let a pytest end as after Ctrl-C, its fixtures stopping what they started. Ctrl-C at the terminal reaches
    it too (it shares the terminal's process group): it is given three minutes before being interrupted, which
    would cut its teardown short. Otherwise it is interrupted at once. Killed if it hangs."""
    if process is None or process.poll() is not None:
        return
    if interrupted:
        try:
            process.wait(timeout=180)
            return
        except subprocess.TimeoutExpired:
            pass
    process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout=180)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def main(extra: list[str]) -> int:
    if "SPARK_SUBMIT_OPTS" not in os.environ:
        # the class-data archive the suite's JVMs map (tests/jvmcds.py), built once for the runs below instead of by
        # two of them at once on a fresh machine
        from tests.jvmcds import spark_options

        os.environ["SPARK_SUBMIT_OPTS"] = spark_options()
    codes = []
    interrupted = False
    with tempfile.TemporaryFile("w+") as log:
        print("==> the platform's journey runs beside the other tests; its output follows theirs", flush=True)
        # started so that a Ctrl-C as either starts is handled as one that comes later (runner/core/terminal.py)
        platform, interrupted = terminal.start(
            [*PYTEST, *RUNS["platform"], *extra], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        others = None
        try:
            if interrupted:
                raise KeyboardInterrupt
            others, interrupted = terminal.start([*PYTEST, *RUNS["others"], *extra])
            if interrupted:
                raise KeyboardInterrupt
            codes.append(others.wait())
            if platform.poll() is None:
                print("==> waiting for the platform's journey", flush=True)
            codes.append(platform.wait())
        except KeyboardInterrupt:
            interrupted = True
        finally:
            for process in (others, platform):
                _stop(process, interrupted=interrupted)
        print("==> the platform's journey (-m platform)", flush=True)
        log.seek(0)
        sys.stdout.write(log.read())
        sys.stdout.flush()
    if interrupted:
        return 130
    codes.append(subprocess.run([*PYTEST, *RUNS["alone"], *extra], check=False).returncode)
    return next((code for code in codes if code != 0), 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
