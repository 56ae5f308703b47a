"""One logging configuration for every process the runner starts: the CLI, the jobs and the session.

Modules log through ``logging.getLogger(__name__)`` (the ``runner`` and ``jobs`` trees); a line about one
job says which with ``extra=job(name, version)`` (or ``job_label(...)`` when only the name is known).
``configure`` gives both trees one handler and format:

- a job's driver and the session application: ``2026-11-25T10:00:00.123 [high-value v3] message``, every
  line labelled (a job's lines with its own name and version, the session's with the query they are
  about, else ``session``); warnings and errors go to stderr, the rest to stdout;
- the CLI: ``10:00:00 [high-value v3] message`` on stderr (results go to stdout, ``runner/cli/output.py``).
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

TREES = ("runner", "jobs")


def job(name: str, version: int | None = None) -> dict[str, str]:
    """``extra`` for a line about one job: its name and, where known, its version."""
    return label(name if version is None else f"{name} v{version}")


def label(text: str) -> dict[str, str]:
    """``extra`` for a line about one job, labelled as ``text`` (``name v3``, as ``JobSpec.label`` says)."""
    return {"label": text}


class _Format(logging.Formatter):
    def __init__(self, label: str | None, clock: str, *, millis: bool):
        super().__init__()
        self.label = label
        self.clock = clock
        self.millis = millis

    def format(self, record: logging.LogRecord) -> str:
        label = getattr(record, "label", None) or self.label
        stamp = self.formatTime(record, self.clock)
        if self.millis:
            stamp += f".{int(record.msecs):03d}"
        text = f"{stamp} {f'[{label}] ' if label else ''}{record.getMessage()}"
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


class _Below(logging.Filter):
    def __init__(self, level: int):
        super().__init__()
        self.level = level

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno < self.level


def configure(label: str | None = None, *, stream: TextIO | None = None) -> None:
    """Send the ``runner`` and ``jobs`` loggers' INFO and above to one handler (replacing any earlier).

    ``label``: a process that runs jobs (a job's driver: its name and version; the session: ``session``)
    labels every line and stamps it with the date and milliseconds, INFO to stdout, warnings to stderr.
    None: the CLI, ``HH:MM:SS`` lines on ``stream`` (stderr)."""
    if label is None:
        handlers: list[logging.Handler] = [logging.StreamHandler(stream or sys.stderr)]
        form = _Format(None, "%H:%M:%S", millis=False)
    else:
        out, err = logging.StreamHandler(stream or sys.stdout), logging.StreamHandler(sys.stderr)
        out.addFilter(_Below(logging.WARNING))
        err.setLevel(logging.WARNING)
        handlers = [out, err]
        form = _Format(label, "%Y-%m-%dT%H:%M:%S", millis=True)
    for handler in handlers:
        handler.setFormatter(form)
    for tree in TREES:
        logger = logging.getLogger(tree)
        for old in list(logger.handlers):
            logger.removeHandler(old)
        for handler in handlers:
            logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
