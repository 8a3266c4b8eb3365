"""pytest gate: `pytest --qc-...` runs a suite (or reads a stored run) and gates it.

Registered through the `pytest11` entry point, so it is loaded by every pytest
run in an environment where qualitycheck is installed: without a `--qc-`
option it must do nothing at all.
"""

from __future__ import annotations

import pytest

__all__ = ["pytest_addoption"]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("qualitycheck", "qualitycheck gate (speculative decoding candidate vs baseline)")
    group.addoption("--qc-baseline", metavar="URL", help="baseline endpoint; with --qc-candidate, runs the suite as a gate")
    group.addoption("--qc-candidate", metavar="URL", help="speculative candidate endpoint")
    group.addoption("--qc-control", metavar="URL", help="second baseline endpoint for the A/A noise floor")
    group.addoption("--qc-model", metavar="NAME", help="served model name")
    group.addoption("--qc-suite", action="append", metavar="PATH", help="suite file or folder (repeatable)")
    group.addoption("--qc-out", metavar="DIR", help="run folder for the generated run (default: reports/pytest-<time>)")
    group.addoption("--qc-config", metavar="FILE", help="qualitycheck config file (targets, guardrails)")
    group.addoption("--qc-run", metavar="DIR", help="gate a stored run folder without calling endpoints")
