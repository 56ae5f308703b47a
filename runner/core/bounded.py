"""Running code the session does not control (a query's ``code`` snippet) with a time limit."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class TimedOut(Exception):
    """The work did not return in time; it keeps running on its (daemon) thread."""


def within(seconds: float, work: Callable[[], T], name: str) -> T:
    """``work()`` on a daemon thread named ``name``: its result or its exception, or TimedOut after ``seconds``.

    Python cannot stop a thread, so code that never returns stays parked on that thread; the
    caller goes on and says so (the session counts such threads as stuck builds)."""
    outcome: dict[str, object] = {}

    def run() -> None:
        try:
            outcome["result"] = work()
        except BaseException as error:  # noqa: BLE001 - handed to the waiting thread
            outcome["error"] = error

    worker = threading.Thread(target=run, name=name, daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        raise TimedOut(f"{name} did not return within {seconds:.0f}s")
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return outcome["result"]  # type: ignore[return-value]
