"""Fixtures shared by the tests: scripted OpenAI-compatible servers."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from qualitycheck.testserver import TestServer


@pytest.fixture
def pair_servers() -> Iterator[tuple[TestServer, TestServer]]:
    """A baseline and a candidate that answer identically unless a test scripts otherwise."""
    with TestServer(default="The answer is 42.") as b, TestServer(default="The answer is 42.") as c:
        yield b, c
