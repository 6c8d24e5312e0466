"""A real browser for the viewer's tests: Debian's chromium driven by playwright (never its own download). A
missing browser or playwright is a failure, not a skip: `bash scripts/setup_tests.sh` installs both."""

import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import pytest

if TYPE_CHECKING:
    from playwright.sync_api import Page

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


@contextmanager
def chromium_page(width: int = 1300, height: int = 1000) -> Iterator["Page"]:
    """A page of a fresh headless chromium with its own empty profile."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:
        pytest.fail(f"playwright is not installed ({exc}): run `bash scripts/setup_tests.sh`")
    if not CHROMIUM.is_file():
        pytest.fail(f"{CHROMIUM} is missing: run `bash scripts/setup_tests.sh` as root (apt-get install chromium)")
    with tempfile.TemporaryDirectory(prefix="ng_view_chromium_") as profile, sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            profile, executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True,
            viewport={"width": width, "height": height})
        try:
            yield context.pages[0] if context.pages else context.new_page()
        finally:
            context.close()
