"""Lets `pytest` in this repository gate its own suites/ against two endpoints.

    pytest --qc-baseline URL --qc-candidate URL --qc-model NAME

runs every suite in suites/ as a gate (the qualitycheck pytest plugin does
the work); `--qc-run DIR` re-gates a stored run. With any --qc- option the
repository's own unit tests are not collected (unless paths are named on
the command line), so the session's outcome is the gate's. Without --qc-
options this file changes nothing: the normal test run is unaffected.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from qualitycheck.pytest_plugin import qc_requested

SUITES = Path(__file__).parent / "suites"


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    if not qc_requested(config):
        return
    explicit = config.getoption("qc_run") or config.getoption("qc_suite") or config.getoption("qc_config")
    if not explicit and SUITES.is_dir():
        config.option.qc_suite = [str(SUITES)]


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    if qc_requested(config) and config.args_source != pytest.Config.ArgsSource.ARGS:
        return True
    return None
