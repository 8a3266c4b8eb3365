"""The e2e tests' subprocesses run this checkout's qualitycheck, from whatever folder they start in."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.e2e.e2e_helpers import CHECKOUT, checkout_env


def test_a_cli_started_in_another_folder_imports_this_checkout(tmp_path: Path) -> None:
    """What `qc("demo", cwd=tmp_path)` and the pytest-gate test rely on: the venv's editable install may point at
    another checkout (the one scripts/dev.sh last set up), and the code under test is this one."""
    proc = subprocess.run(
        [sys.executable, "-c", "import qualitycheck; print(qualitycheck.__file__)"],
        cwd=tmp_path,
        env=checkout_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    assert Path(proc.stdout.strip()).resolve() == CHECKOUT / "qualitycheck" / "__init__.py"
