"""Fixtures shared by the tests (scripted OpenAI-compatible servers), and where each kind of test lives.

The README's test command runs the tests in tiers (scripts/tiers.py): the browser tests from tests/unit, the
end-to-end tests from tests/e2e, the rest in parallel. A test marked `browser` or `e2e` anywhere else would
run in no tier, so collection refuses it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from qualitycheck.testserver import TestServer

HOMES = {"browser": Path(__file__).parent / "unit", "e2e": Path(__file__).parent / "e2e"}
"""Where the tests of each tier that runs a folder live."""


@pytest.fixture
def pair_servers() -> Iterator[tuple[TestServer, TestServer]]:
    """A baseline and a candidate that answer identically unless a test scripts otherwise."""
    with TestServer(default="The answer is 42.") as b, TestServer(default="The answer is 42.") as c:
        yield b, c


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    strays = [
        f"{item.nodeid} is marked {mark} but lives outside {home}"
        for item in items
        for mark, home in HOMES.items()
        if item.get_closest_marker(mark) is not None and not item.path.is_relative_to(home)
    ]
    if strays:
        raise pytest.UsageError("the README's test tiers would not run these tests (scripts/tiers.py):\n" + "\n".join(strays))
