"""Where the CLI writes: results on stdout, progress and problems on stderr."""

from __future__ import annotations

import time

from rich.console import Console

out = Console(highlight=False)
err = Console(stderr=True, highlight=False)


def step(message: str) -> None:
    """One timestamped progress line on stderr."""
    err.print(f"{time.strftime('%H:%M:%S')} {message}", markup=False, highlight=False, soft_wrap=True)


def line(text: str) -> None:
    """One result line on stdout, printed as is."""
    out.print(text, markup=False, soft_wrap=True)
