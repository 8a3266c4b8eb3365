"""`qualitycheck report` of one 10,000-pair run by two checkouts, alternated, on one machine at one time.

    python bench/report_ab.py OTHER_CHECKOUT [--rounds 5] [--pairs 10000]

A report build is a whole process (start-up, imports, the walk, rendering), so
its time moves with whatever else the machine runs: two checkouts measured
minutes apart are not comparable. Here both build the same run, each in a
copy of its own (a checkout's statistics memo and comparisons are its own),
turn by turn, and the figure is the ratio of their medians.
Prints `report_build_s[this]`, `report_build_s[other]` and their ratio.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.figures_scoring import build_report_run  # noqa: E402


def _report(checkout: Path, folder: Path) -> float:
    env = dict(os.environ, PYTHONPATH=str(checkout))
    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "qualitycheck", "report", str(folder)], capture_output=True, text=True, env=env, cwd=checkout
    )
    wall = time.perf_counter() - t0
    if done.returncode not in (0, 1):
        raise SystemExit(f"{checkout}: qualitycheck report failed (exit {done.returncode}): {done.stderr[-600:]}")
    return wall


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("other", type=Path, help="the other checkout (e.g. a git worktree of the commit before)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--pairs", type=int, default=10_000)
    a = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="qc-report-ab-") as tmp:
        run = build_report_run(Path(tmp), a.pairs)
        sides = {"this": ROOT, "other": a.other.resolve()}
        folders = {}
        for name, checkout in sides.items():
            folders[name] = Path(tmp) / name
            shutil.copytree(run, folders[name])
            _report(checkout, folders[name])  # a first build writes the memo and the comparisons, as a run's finish does
        times: dict[str, list[float]] = {name: [] for name in sides}
        for _ in range(a.rounds):
            for name, checkout in sides.items():
                times[name].append(_report(checkout, folders[name]))
    med = {name: statistics.median(ts) for name, ts in times.items()}
    for name, ts in times.items():
        print(f"report_build_s[{name}]: {med[name]:.3f} s  # median of {a.rounds}: {', '.join(f'{t:.2f}' for t in ts)}")
    print(f"report_build_ratio: {med['this'] / med['other']:.3f} ratio  # this checkout over the other, same run, alternated")


if __name__ == "__main__":
    main()
