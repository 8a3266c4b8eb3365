"""The e2e tests' own helpers, without an engine: subprocesses run this checkout's qualitycheck, and a test's cost is counted."""

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


def test_the_cpu_of_a_tree_counts_a_child_while_it_runs_and_after_it_ended() -> None:
    from tests.e2e.machine import tree_cpu_s

    spin = "import time\nend = time.process_time() + 0.6\nwhile time.process_time() < end:\n    pass\nimport sys; sys.stdout.write('x'); sys.stdout.flush(); time.sleep(30)"
    before = tree_cpu_s()
    child = subprocess.Popen([sys.executable, "-c", spin], stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdout.read(1) == b"x"
        running = tree_cpu_s()
    finally:
        child.kill()
        child.wait()
    ended = tree_cpu_s()
    assert running - before >= 0.5, (before, running)
    assert ended - before >= 0.5 and ended >= running - 0.05, (before, running, ended)


def test_file_costs_add_up_per_file() -> None:
    from tests.e2e.machine import FileCosts

    costs = FileCosts()
    costs.add("tests/e2e/test_a.py::test_one", 10.0, 4.0)
    costs.add("tests/e2e/test_a.py::test_two[x]", 5.0, 1.0)
    costs.add("tests/e2e/test_b.py::test_three", 1.0, 0.5)
    lines = costs.report()
    assert lines[0].endswith(": 16 s, CPU 6 s") and "  tests/e2e/test_a.py: 15 s, CPU 5 s" in lines and len(lines) == 3
    assert FileCosts().report() == []
