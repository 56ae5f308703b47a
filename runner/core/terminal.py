"""Starting a program that shares this terminal's process group, so that Ctrl-C reaches it as well as us.

Python raises KeyboardInterrupt at the first step after the signal. If that step is inside ``subprocess.Popen``
(after the fork, before Popen returns), the program is running, has the interrupt too, and is lost to us: nothing
waits for its graceful stop or says what it did. ``start`` notes an interrupt that comes while the program is
being started instead of raising it there, and says whether one came; ``wait`` then handles it as one that came
while it waited.
"""

from __future__ import annotations

import signal
import subprocess
import threading


def start(command: list[str], **popen: object) -> tuple[subprocess.Popen, bool]:
    """Start ``command`` (``subprocess.Popen``'s keywords); the process and whether Ctrl-C came meanwhile."""
    noted: list[int] = []
    # Python raises KeyboardInterrupt in its main thread only, and only while the handler is its own (not when
    # SIGINT is ignored, as in a script's background job: a handler of ours would undo that for the program)
    deferring = (
        threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    )
    if deferring:
        signal.signal(signal.SIGINT, lambda number, frame: noted.append(number))
    try:
        process = subprocess.Popen(command, **popen)  # noqa: S603 - the callers' own commands
    finally:
        if deferring:
            signal.signal(signal.SIGINT, signal.default_int_handler)
    return process, bool(noted)


def wait(process: subprocess.Popen, interrupted: bool = False) -> tuple[int, bool]:
    """Wait for a program ``start`` started; its exit code, and whether Ctrl-C came (as it started, or meanwhile).
    Ctrl-C reached the program too: it is waited for through its own stop, never killed. A second Ctrl-C is
    raised, as the program has it too and stops at once."""
    try:
        return process.wait(), interrupted
    except KeyboardInterrupt:
        return process.wait(), True
