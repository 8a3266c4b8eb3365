"""`others_running`: how many other tasks want a core now, which decides whether the report's walk forks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from qualitycheck.core._process import others_running


def test_the_count_leaves_out_the_caller_and_takes_the_median(tmp_path: Path) -> None:
    loadavg = tmp_path / "loadavg"
    loadavg.write_text("1.95 1.20 0.80 1/312 4242\n")  # a lagging average from a run just ended; only this reader runs
    assert others_running(path=str(loadavg), gap_s=0) == 0
    loadavg.write_text("0.10 0.05 0.01 3/312 4242\n")
    assert others_running(path=str(loadavg), gap_s=0) == 2
    assert others_running(readings=0, path=str(loadavg), gap_s=0) == 2  # at least one reading


@pytest.mark.parametrize("text", ["", "0.1 0.1 0.1\n", "0.1 0.1 0.1 x/3 9\n"])
def test_no_count_is_none_never_a_guess(tmp_path: Path, text: str) -> None:
    loadavg = tmp_path / "loadavg"
    loadavg.write_text(text)
    assert others_running(path=str(loadavg), gap_s=0) is None
    assert others_running(path=str(tmp_path / "absent"), gap_s=0) is None


@pytest.mark.skipif(not Path("/proc/loadavg").is_file(), reason="Linux's /proc/loadavg only")
def test_a_busy_process_is_counted() -> None:
    """The kernel's own file read as documented: a process spinning on a core is runnable at every reading."""
    hog = subprocess.Popen(
        [sys.executable, "-c", "import sys\nsys.stdout.write('go\\n'); sys.stdout.flush()\nwhile True: pass"], stdout=subprocess.PIPE
    )
    try:
        assert hog.stdout is not None and hog.stdout.readline() == b"go\n"
        assert (others_running() or 0) >= 1
    finally:
        hog.kill()
        hog.wait()
