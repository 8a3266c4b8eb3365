"""One headless Chromium for the whole session, shared by the browser tests (marker `browser`).

Debian's /usr/bin/chromium through playwright (never `playwright install`). Playwright's sync API keeps an
event loop running in the thread that started it until it stops, and `asyncio.run` fails in that thread
meanwhile; so the browser tests run after every other test of the session (`pytest_collection_modifyitems`),
and the runs they load are built by the CLI in a thread of its own (`tests.helpers.in_thread`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]


@pytest.fixture(scope="session")
def chromium() -> Iterator[Any]:
    """The session's browser: each test opens its own pages or context in it, and closes them."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is not installed (apt-get install -y chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield browser
        finally:
            browser.close()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Browser tests last (in their collected order): once the session's browser is up, asyncio.run fails in this thread."""
    items.sort(key=lambda item: item.get_closest_marker("browser") is not None)
