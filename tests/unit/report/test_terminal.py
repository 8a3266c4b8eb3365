"""The terminal summary reads the same in a CI log: words not colours, no escape codes, no wrapping."""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

from qualitycheck.report import collect, print_summary
from qualitycheck.report._terminal import make_console
from qualitycheck.core._store import RunStore


def _printed(summary: dict[str, Any], run: Path | None = None) -> str:
    buf = io.StringIO()  # not a TTY, like a CI log
    if run is None:
        print_summary(summary, console=make_console(buf))
    else:
        with RunStore.open(run) as store:
            print_summary(summary, collect(store, summary), console=make_console(buf), report_path="x/report.html")
    return buf.getvalue()


def test_ci_log_summary_has_verdicts_guardrails_and_top_regressions(stored_run: tuple[Path, dict[str, Any]]) -> None:
    run, summary = stored_run
    out = _printed(summary, run)
    assert "\x1b[" not in out
    assert out.startswith("qualitycheck verdict: FAIL  (11 cases)")
    qa_line = next(line for line in out.splitlines() if line.startswith("| qa "))
    verdict = summary["categories"]["qa"]["verdict"].upper()  # the gate's call (noise floor from the control)
    assert re.search(r"\|\s+8 \|\s+71\.4% \| exact 85\.7%→85\.7% \(\+0\.0pp\) p=1\.000\s+\|\s+1 \| " + verdict, qa_line), qa_line
    assert "INCONCLUSIVE" in out  # the undecided category, as a word
    assert "max_error_rate " in out and "NOT EVALUATED" in out and "max_quality_regression_cases [qa]" in out
    assert "Top regressions (1 of 1)" in out and re.search(r"\| qa-3\s+\| qa\s+\| exact", out)
    assert "report: x/report.html" in out
    assert max(len(line) for line in out.splitlines()) <= 140


def test_summary_alone_and_missing_sections_still_print() -> None:
    s = {"verdict": "pass", "cases": 2, "categories": {"qa": {"cases": 2, "identical_rate": 1.0, "verdict": "pass",
                                                              "checks": {"exact": {"regressions": ["[bold]qa-1[/bold]"]}}}}}
    out = _printed(s)
    assert "PASS" in out and "| [bold]qa-1[/bold]" in out and "Guardrails" not in out
    assert "qualitycheck verdict: –" in _printed({})
