"""The README's test command, tier by tier, each tier's time printed at the end beside its budget.

`bash scripts/dev.sh test` calls this after the set-up (and `.ci/run` calls that). The tiers:

- **static**: ruff, the formatter's check, mypy and import-linter; a failure stops the run here, as it
  always has (nothing else is worth waiting for on a tree that does not type-check). mypy keeps its cache in
  `$QC_HOME/mypy-cache`, beside the other set-up caches: mypy checks each cached module against its file's hash,
  so the cache serves any clone (docs/TESTING.md has what it saves).
- **unit**: every test marked neither `browser` nor `e2e`, one pytest-xdist worker per core this process may
  run on, a whole file to a worker (`--dist loadfile`): module-scoped fixtures (a clean venv, a stored run)
  are then built once, not once per worker that happens to run one of the module's tests. (`--dist loadgroup`
  would be finer, but its `xdist_group` has no effect with pytest 9 and xdist 3.8: xdist renames the items
  through `Node._nodeid`, which pytest 9 no longer reads.)
- **browser**: the tests marked `browser` (in tests/unit), in one process, so Chromium is launched once
  (tests/unit/conftest.py).
- **e2e**: tests/e2e (every test there is marked `e2e`), in one process and in order: each vLLM server is
  pinned to a core of its own, so the cores are the servers', and the engine pool hands the same servers from
  test to test (tests/e2e/conftest.py).

Together the tiers run every test exactly once: their marker expressions (`MARKS`) split any combination of
the two markers, and collection refuses a `browser` or `e2e` test outside the folder its tier runs
(tests/conftest.py), so no test falls between them.

Every test tier runs even when an earlier one failed, so one CI run shows every failure; the exit status is
the first failing tier's. With pytest arguments (`bash scripts/dev.sh test tests/unit/report -x`) the static
checks run and then one pytest with exactly those arguments, as before the tiers existed.

The budgets are what the tiers may take on the reference machine (docs/TESTING.md has the table and what
each real-engine test file costs); a tier over its budget is flagged, not failed, because a shared machine's
load moves every figure. The test tiers also print their slowest tests (`--durations`).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's qualitycheck, whatever the venv's editable install points at

from qualitycheck.engines._model import qc_home  # noqa: E402 (after the path it is imported from)

PYTHON = sys.executable
BIN = Path(PYTHON).parent
SLOWEST = "15"
"""How many of a test tier's slowest tests pytest names at its end (`--durations`)."""


@dataclass(frozen=True)
class Tier:
    """One step of the test command: the commands it runs, and the seconds it may take on the reference machine."""

    name: str
    commands: tuple[tuple[str, ...], ...]
    budget_s: float | None
    stops_run: bool = False
    """A failure here ends the run (the static checks); the test tiers all run and the first failure is the exit status."""
    pytest: bool = False
    """The commands are one pytest run, whose outcome counts are read from its JUnit file."""


@dataclass
class Outcome:
    """What one tier did: its wall time, exit status, and pytest's counts where it ran pytest."""

    name: str
    seconds: float
    returncode: int
    budget_s: float | None
    counts: dict[str, int] = field(default_factory=dict)


def workers() -> int:
    """The cores this process may run on: pytest-xdist's worker count for the unit tier."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def pytest_argv(*args: str) -> tuple[str, ...]:
    return (PYTHON, "-m", "pytest", *args)


def static_tier() -> Tier:
    paths = ("qualitycheck", "tests", "bench", "scripts", "conftest.py")
    return Tier(
        "static",
        (
            (str(BIN / "ruff"), "check", *paths),
            (str(BIN / "ruff"), "format", "--check", "--quiet", *paths),
            (str(BIN / "mypy"), "--cache-dir", str(qc_home() / "mypy-cache")),
            (str(BIN / "lint-imports"), "--no-cache"),
        ),
        budget_s=STATIC_BUDGET_S,
        stops_run=True,
    )


STATIC_BUDGET_S = 120.0
"""ruff, mypy and import-linter; mypy's cache makes a warm run a matter of seconds, a cold one about a minute and a half."""
UNIT_BUDGET_S = 240.0
BROWSER_BUDGET_S = 60.0
E2E_BUDGET_S = 1380.0
"""The real-engine tests, #35's likelihood and #36's stored-baseline tests included (docs/TESTING.md)."""
TOTAL_BUDGET_S = 1800.0
"""The warm run as a whole, set-up included: the README's test command in 30 minutes (CI's limit is 90)."""


MARKS = {"unit": "not browser and not e2e", "browser": "browser and not e2e", "e2e": "e2e"}
"""Each test tier's marker expression over tests/: every combination of the two markers falls in exactly one."""


def tier_plan(n_workers: int) -> list[Tier]:
    slow = f"--durations={SLOWEST}"
    return [
        Tier(
            "unit",
            (pytest_argv("tests", "-m", MARKS["unit"], "-n", str(n_workers), "--dist", "loadfile", slow),),
            budget_s=UNIT_BUDGET_S,
            pytest=True,
        ),
        Tier("browser", (pytest_argv("tests/unit", "-m", MARKS["browser"], slow),), budget_s=BROWSER_BUDGET_S, pytest=True),
        Tier("e2e", (pytest_argv("tests/e2e", "-m", MARKS["e2e"], slow),), budget_s=E2E_BUDGET_S, pytest=True),
    ]


def junit_counts(path: Path) -> dict[str, int]:
    """passed/failed/errors/skipped of a pytest JUnit file (empty when pytest wrote none: it did not get that far)."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return {}
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    if suite is None:
        return {}
    n = {k: int(suite.get(k, "0")) for k in ("tests", "failures", "errors", "skipped")}
    return {
        "passed": n["tests"] - n["failures"] - n["errors"] - n["skipped"],
        "failed": n["failures"],
        "errors": n["errors"],
        "skipped": n["skipped"],
    }


Runner = Callable[[Sequence[str]], int]


def _subprocess(argv: Sequence[str]) -> int:
    return subprocess.run(argv, cwd=ROOT).returncode


def _say(line: str) -> None:
    print(line, flush=True)  # before the next tier's own output, which goes straight to the same terminal


def run_tier(tier: Tier, run: Runner | None = None, say: Callable[[str], None] | None = None) -> Outcome:
    """Run the tier's commands in order (a failing command ends the tier); time it, and read pytest's counts."""
    run, say = run or _subprocess, say or _say
    say(f"\n\033[1m[tier]\033[0m {tier.name}: {' && '.join(shown(c) for c in tier.commands)}")
    t0 = time.monotonic()
    returncode = 0
    counts: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix=f"qc-tier-{tier.name}-") as tmp:
        junit = Path(tmp) / "junit.xml"
        for argv in tier.commands:
            returncode = run([*argv, f"--junitxml={junit}"] if tier.pytest else list(argv))
            if returncode:
                break
        if tier.pytest:
            counts = junit_counts(junit)
    return Outcome(tier.name, time.monotonic() - t0, returncode, tier.budget_s, counts)


def shown(argv: Sequence[str]) -> str:
    """A command as a person would type it: the program's name, not its path in the venv."""
    return " ".join([Path(argv[0]).name, *(f'"{a}"' if " " in a else a for a in argv[1:])])


def clock(seconds: float) -> str:
    m, s = divmod(round(seconds), 60)
    return f"{m}:{s:02d}"


def table(outcomes: Sequence[Outcome], total_budget_s: float | None) -> list[str]:
    """Each tier's time, its budget, whether it passed and what pytest counted; the total last."""
    lines = ["", "\033[1m[tiers]\033[0m time per tier (budgets: docs/TESTING.md)"]
    for o in [*outcomes, Outcome("total", sum(o.seconds for o in outcomes), 0, total_budget_s)]:
        status = "" if o.name == "total" else ("ok" if o.returncode == 0 else f"FAILED (exit {o.returncode})")
        budget = f"budget {clock(o.budget_s)}" if o.budget_s is not None else ""
        over = "  OVER BUDGET" if o.budget_s is not None and o.seconds > o.budget_s else ""
        counts = ", ".join(f"{v} {k}" for k, v in o.counts.items() if v)
        lines.append(f"  {o.name:<8} {clock(o.seconds):>6}  {budget:<13} {status:<18} {counts}{over}".rstrip())
    return lines


def run_all(
    tiers: Sequence[Tier], setup_s: float | None, run: Runner | None = None, say: Callable[[str], None] | None = None
) -> tuple[int, list[Outcome]]:
    """Every tier (a stopping tier's failure ends the run); the exit status of the first that failed, and each outcome."""
    say = say or _say
    outcomes = [Outcome("set-up", setup_s, 0, None)] if setup_s is not None else []
    status = 0
    try:
        for tier in tiers:
            o = run_tier(tier, run, say)
            outcomes.append(o)
            if o.returncode and not status:
                status = o.returncode
            if o.returncode and tier.stops_run:
                break
    finally:
        for line in table(outcomes, TOTAL_BUDGET_S):
            say(line)
    return status, outcomes


def main(argv: Sequence[str] | None = None) -> int:
    """`[--setup-s SECONDS] [pytest args...]`: the set-up's time comes first so that every later word is pytest's."""
    args = list(sys.argv[1:] if argv is None else argv)
    setup_s = None
    if args[:1] == ["--setup-s"]:
        setup_s, args = float(args[1]), args[2:]
    if args:  # a developer's own selection: the static checks, then exactly that pytest run
        status, _ = run_all([static_tier(), Tier("pytest", (pytest_argv(*args),), budget_s=None, pytest=True)], setup_s)
    else:
        status, _ = run_all([static_tier(), *tier_plan(workers())], setup_s)
    return status


if __name__ == "__main__":
    sys.exit(main())
