"""Headless Chromium (Debian's /usr/bin/chromium, driven by Playwright; no browser is ever
downloaded) over the local API's /dashboard page."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.local_api import QueueNames, api, api_url, names

CHROMIUM = Path(os.environ.get("TIERQ_TEST_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]

__all__ = ["QueueNames", "api", "api_url", "browser", "names", "page"]


@pytest.fixture(scope="package")
def browser() -> Iterator[Any]:
    # (package scope: Playwright's sync API runs an event loop on the main thread while it
    # is open, and later tests call asyncio.run there)
    if not CHROMIUM.is_file():
        pytest.skip(f"no Chromium at {CHROMIUM}: install Debian's `chromium` package (the "
                    "dashboard tests drive it headless; no browser is downloaded)")
    sync_api = pytest.importorskip("playwright.sync_api",
                                   reason="playwright is not installed (pip install "
                                          "'tierq[browser]')")
    with sync_api.sync_playwright() as playwright:
        instance = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                              args=CHROMIUM_ARGS)
        try:
            yield instance
        finally:
            instance.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(15_000)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        yield page
    finally:
        context.close()
    assert errors == [], f"JavaScript errors on the page: {errors}"
