"""Where the CLI writes: results on stdout, progress and problems on stderr."""

from __future__ import annotations

from rich.console import Console

out = Console(highlight=False)
err = Console(stderr=True, highlight=False)


def line(text: str) -> None:
    """One result line on stdout, printed as is."""
    out.print(text, markup=False, soft_wrap=True)
