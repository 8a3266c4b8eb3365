"""The terminal summary reads the same in a CI log: words not colours, no escape codes, no wrapping."""

from __future__ import annotations

import io
import re
from pathlib import Path

from qualitycheck.core._store import RunStore
from qualitycheck.report import collect, print_summary
from qualitycheck.report._terminal import make_console
from qualitycheck.verdict._model import Summary


def _printed(summary: Summary, run: Path | None = None) -> str:
    buf = io.StringIO()  # not a TTY, like a CI log
    if run is None:
        print_summary(summary, console=make_console(buf))
    else:
        with RunStore.open(run) as store:
            print_summary(summary, collect(store, summary), console=make_console(buf), report_path="x/report.html")
    return buf.getvalue()


def test_ci_log_summary_has_verdicts_guardrails_and_top_regressions(stored_run: tuple[Path, Summary]) -> None:
    run, summary = stored_run
    out = _printed(summary, run)
    assert "\x1b[" not in out
    assert out.startswith("qualitycheck verdict: FAIL  (11 cases)")
    qa_line = next(line for line in out.splitlines() if line.startswith("| qa "))
    verdict = summary.categories["qa"].verdict.upper()  # the gate's call (noise floor from the control)
    assert re.search(
        r"\|\s+8 \|\s+71\.4% \| exact 85\.7%→85\.7% \(\+0\.0pp\) p=1\.000\s+\|\s+1 \| drop ≥100pp; ≤65\.9% differ \| " + verdict, qa_line
    ), qa_line
    assert "INCONCLUSIVE" in out  # the undecided category, as a word
    assert "max_error_rate " in out and "NOT EVALUATED" in out and "max_quality_regression_cases [qa]" in out
    assert "Top regressions (1 of 1)" in out and re.search(r"\| qa-3\s+\| qa\s+\| exact\s+\| tolerated", out)
    assert re.search(r"\| qa-3\s+\| qa\s+\| exact\s+\| tolerated", _printed(summary))  # from the summary alone: the same status
    assert "report: x/report.html" in out
    assert max(len(line) for line in out.splitlines()) <= 140


def test_summary_alone_and_missing_sections_still_print() -> None:
    exact = {
        "baseline_pass_rate": 1.0,
        "candidate_pass_rate": 0.5,
        "delta": -0.5,
        "ci": None,
        "p_value": None,
        "regressions": ["[bold]qa-1[/bold]"],
        "improvements": [],
    }
    s = Summary.model_validate(
        {
            "format_version": 1,
            "verdict": "pass",
            "cases": 2,
            "targets": {},
            "errors": {},
            "latency": {},
            "guardrails": [],
            "acceptance": {"rate": None, "mean_accepted_length": None, "draft_tokens": None, "accepted_tokens": None},
            "fallback": {"action": "none", "routes": []},
            "categories": {"qa": {"cases": 2, "identical_rate": 1.0, "verdict": "pass", "format_drift": {}, "checks": {"exact": exact}}},
        }
    )
    out = _printed(s)
    assert "PASS" in out and "| [bold]qa-1[/bold]" in out and "Guardrails" not in out
    assert "| regression" in out  # a summary without `tolerated` (older) counts every regression it lists
