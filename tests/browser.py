"""A real browser for the console's tests: Debian's Chromium, driven by Playwright.

Playwright's own browser download does not work everywhere (no network but the package registries), so
the browser is the system's ``chromium`` (``make test`` installs Debian's package where it is missing),
launched by path. Without it the tests fail and say why; they never skip.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import tiers

SCREENSHOTS = Path(__file__).resolve().parents[1] / "docs" / "console"  # linked from the README


def chromium_path() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.fail(
            "the console's browser tests need Chromium: `make test` installs Debian's chromium package "
            "(apt-get install chromium); it is not on this machine's PATH"
        )
    return found


@contextlib.contextmanager
def browser() -> Iterator:
    from playwright.sync_api import sync_playwright

    tiers.require("browser", "Chromium")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()


def screenshot(page, name: str) -> Path:
    """A full-page screenshot into docs/console/ (the README shows them)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
