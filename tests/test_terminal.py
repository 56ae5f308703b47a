"""runner/core/terminal.py: Ctrl-C that comes while a program is being started is noted, not raised there."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Ctrl-C's signal reaches this program while it is inside Popen for certain: the child sends it between its fork
# and its exec, while Popen waits to learn that the exec succeeded.
PROGRAM = """
import os, signal, subprocess, sys
from runner.core import terminal
child = lambda: os.kill(os.getppid(), signal.SIGINT)
{start}
print("returned", process.wait(), interrupted)
try:
    signal.raise_signal(signal.SIGINT)
except KeyboardInterrupt:
    print("Ctrl-C raises again")
"""


def _run(start: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", PROGRAM.format(start=start)], cwd=ROOT, capture_output=True, text=True, timeout=60
    )


def test_ctrl_c_while_a_program_starts_is_noted_and_the_program_is_kept():
    started = _run("process, interrupted = terminal.start(['true'], preexec_fn=child)")
    assert started.returncode == 0, started.stderr
    # the program is there to wait for, the interrupt is said, and Ctrl-C raises KeyboardInterrupt again after
    assert started.stdout.split("\n")[:2] == ["returned 0 True", "Ctrl-C raises again"], started.stdout

    # the same through Popen itself: the interrupt is raised inside it and the started program is lost
    plain = _run("process, interrupted = subprocess.Popen(['true'], preexec_fn=child), False")
    assert plain.returncode != 0 and "KeyboardInterrupt" in plain.stderr and "returned" not in plain.stdout


def test_a_program_started_without_ctrl_c_is_not_said_to_be_interrupted():
    quiet = _run("process, interrupted = terminal.start([sys.executable, '-c', 'import sys; sys.exit(3)'])")
    assert quiet.stdout.startswith("returned 3 False"), quiet.stdout + quiet.stderr
