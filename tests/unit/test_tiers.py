"""The README's test command in tiers (scripts/tiers.py): every test once, every failure seen, each tier's time printed."""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from _pytest.mark.expression import Expression

from scripts import tiers


def _runner(fails: dict[str, int]) -> tuple[list[list[str]], tiers.Runner]:
    """A command runner that records what it was asked to run and fails the commands whose text holds a key of `fails`."""
    ran: list[list[str]] = []

    def run(argv: Sequence[str]) -> int:
        ran.append(list(argv))
        return next((code for word, code in fails.items() if word in " ".join(argv)), 0)

    return ran, run


def test_the_test_tiers_select_every_test_exactly_once() -> None:
    """Whatever markers a test carries, exactly one tier's marker expression selects it."""
    plan = {t.name: t for t in tiers.tier_plan(2)}
    assert set(plan) == set(tiers.MARKS) == {"unit", "browser", "e2e"}
    homes = {"unit": "tests", "browser": "tests/unit", "e2e": "tests/e2e"}
    for name, tier in plan.items():
        (argv,) = tier.commands
        assert argv[2:5] == ("pytest", homes[name], "-m") and argv[5] == tiers.MARKS[name], argv
    for browser, e2e in itertools.product((False, True), repeat=2):
        carried = {name for name, on in (("browser", browser), ("e2e", e2e)) if on}
        chosen = [name for name, expr in tiers.MARKS.items() if Expression.compile(expr).evaluate(carried_by(carried))]
        assert len(chosen) == 1, (carried, chosen)


def carried_by(marks: set[str]) -> Callable[..., bool]:
    """pytest's marker matcher for a test carrying `marks`."""
    return lambda name, **_: name in marks


def test_the_unit_tier_runs_a_worker_per_core_a_file_each_and_the_others_in_one_process() -> None:
    plan = {t.name: t.commands[0] for t in tiers.tier_plan(3)}
    assert plan["unit"][plan["unit"].index("-n") + 1] == "3" and plan["unit"][plan["unit"].index("--dist") + 1] == "loadfile"
    assert "-n" not in plan["browser"] and "-n" not in plan["e2e"]


def test_every_test_tier_runs_after_a_failure_and_the_first_failures_status_is_the_runs() -> None:
    ran, run = _runner({"not browser and not e2e": 1, "browser and not e2e": 2})
    lines: list[str] = []
    status, outcomes = tiers.run_all([tiers.static_tier(), *tiers.tier_plan(2)], 12.0, run, lines.append)
    assert status == 1
    assert [o.name for o in outcomes] == ["set-up", "static", "unit", "browser", "e2e"]
    assert [o.returncode for o in outcomes] == [0, 0, 1, 2, 0]
    assert any(tiers.MARKS["e2e"] in " ".join(a) for a in ran), "the e2e tier ran after two failed tiers"
    assert all(any(a.startswith("--junitxml=") for a in argv) for argv in ran if "pytest" in argv)


def test_mypy_keeps_its_cache_with_the_set_ups_caches(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A fresh clone's type check reuses the last one's work (mypy checks cached modules against their files' hashes)."""
    monkeypatch.setenv("QC_HOME", str(tmp_path))
    (mypy,) = [argv for argv in tiers.static_tier().commands if Path(argv[0]).name == "mypy"]
    assert mypy[1:] == ("--cache-dir", str(tmp_path / "mypy-cache"))


def test_a_failing_static_check_stops_the_run_before_any_test() -> None:
    ran, run = _runner({"mypy": 1})
    status, outcomes = tiers.run_all([tiers.static_tier(), *tiers.tier_plan(2)], None, run, lambda _: None)
    assert status == 1 and [o.name for o in outcomes] == ["static"]
    assert not any("pytest" in argv for argv in ran)
    assert [Path(argv[0]).name for argv in ran] == ["ruff", "ruff", "mypy"], "lint-imports is not run after mypy failed"


def test_the_table_gives_each_tiers_time_budget_counts_and_total() -> None:
    outcomes = [
        tiers.Outcome("set-up", 14, 0, None),
        tiers.Outcome("static", 61, 0, 120),
        tiers.Outcome("unit", 700, 1, 600, {"passed": 1690, "failed": 2, "errors": 0, "skipped": 1}),
    ]
    lines = tiers.table(outcomes, 1800)
    text = "\n".join(lines)
    unit = next(line for line in lines if line.strip().startswith("unit"))
    assert "11:40" in unit and "budget 10:00" in unit and "FAILED (exit 1)" in unit and "OVER BUDGET" in unit, unit
    assert "1690 passed, 2 failed, 1 skipped" in unit and "errors" not in unit, unit
    static = next(line for line in lines if line.strip().startswith("static"))
    assert "1:01" in static and "ok" in static and "OVER" not in static, static
    total = next(line for line in lines if line.strip().startswith("total"))
    assert "12:55" in total and "budget 30:00" in total, total
    assert "set-up" in text and "0:14" in text


def test_pytest_counts_come_from_its_junit_file(tmp_path: Path) -> None:
    junit = tmp_path / "j.xml"
    junit.write_text('<testsuites><testsuite name="pytest" errors="1" failures="2" skipped="3" tests="10"/></testsuites>')
    assert tiers.junit_counts(junit) == {"passed": 4, "failed": 2, "errors": 1, "skipped": 3}
    assert tiers.junit_counts(tmp_path / "missing.xml") == {}


def test_with_pytest_arguments_the_static_checks_then_exactly_that_run(monkeypatch: pytest.MonkeyPatch) -> None:
    ran, run = _runner({})
    monkeypatch.setattr(tiers, "_subprocess", run)
    monkeypatch.setattr(tiers, "_say", lambda _: None)
    assert tiers.main(["--setup-s", "3", "tests/unit/report", "-x"]) == 0
    pytest_runs = [argv for argv in ran if "pytest" in argv]
    assert len(pytest_runs) == 1 and pytest_runs[0][3:5] == ["tests/unit/report", "-x"], pytest_runs
    assert [Path(argv[0]).name for argv in ran][:4] == ["ruff", "ruff", "mypy", "lint-imports"]


def test_a_browser_or_e2e_test_outside_its_tiers_folder_is_refused(tmp_path: Path) -> None:
    """tests/conftest.py's check, on a copy of it at the root of a small test tree (its folders are the tree's own)."""
    shutil.copy(Path(__file__).parents[1] / "conftest.py", tmp_path / "conftest.py")
    for path, mark in (("unit/test_page.py", "browser"), ("e2e/test_real.py", "e2e"), ("other/test_stray.py", "e2e")):
        (tmp_path / path).parent.mkdir(exist_ok=True)
        (tmp_path / path).write_text(f"import pytest\n\n@pytest.mark.{mark}\ndef test_it():\n    pass\n")
    argv = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path), str(tmp_path)]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}  # the copied conftest imports this checkout's package
    proc = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR, proc.stdout + proc.stderr
    assert "other/test_stray.py::test_it is marked e2e but lives outside" in proc.stderr, proc.stderr
    assert "test_page" not in proc.stderr and "e2e/test_real" not in proc.stderr
