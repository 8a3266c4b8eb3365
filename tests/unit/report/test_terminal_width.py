"""Every table the run prints reads at 80 columns (CI logs, pipes): no header or cell cut to "…", nothing lost."""

from __future__ import annotations

import io
import re
from typing import Any

import pytest
from rich.console import Console

from qualitycheck.report import print_summary
from qualitycheck.verdict._model import Summary

MESSAGE_404 = "http://127.0.0.1:41234/v1/chat/completions: HTTP 404: The model `smollm2-135m-instruct-spec` does not exist."


def _check(b: float, c: float, regressions: list[str]) -> dict[str, Any]:
    return {
        "baseline_pass_rate": b,
        "candidate_pass_rate": c,
        "delta": c - b,
        "ci": [c - b - 0.1, 0.0],
        "p_value": 0.0312,
        "regressions": regressions,
        "improvements": [],
    }


def _realistic() -> Summary:
    """Several categories with long names, guardrails with long messages, and errors of three kinds."""
    categories = {
        "customer_support_escalations": {
            "cases": 120,
            "identical_rate": 0.62,
            "verdict": "fail",
            "format_drift": {},
            "checks": {"exact": _check(0.95, 0.87, ["cse-4", "cse-17"]), "json_schema": _check(1.0, 0.98, ["cse-9"])},
        },
        "sql_generation": {
            "cases": 80,
            "identical_rate": 0.91,
            "verdict": "pass",
            "format_drift": {},
            "checks": {"sql_parse": _check(1.0, 1.0, []), "sql_result": _check(0.9, 0.9, [])},
        },
        "summarization": {"cases": 45, "identical_rate": 0.18, "verdict": "inconclusive", "format_drift": {}, "checks": {}},
    }
    guardrails = [
        {
            "name": "preflight_consistent",
            "threshold": "all checks match",
            "observed": None,
            "passed": None,
            "message": "not evaluated: no preflight check could be performed (not exposed or not answering: /v1/models, "
            "/tokenize, /tokenizer_info, /server_info, /version)",
        },
        {
            "name": "max_error_rate",
            "threshold": "1%",
            "observed": 0.084,
            "passed": False,
            "message": "error rate per side: baseline 0/245 = 0%, candidate 21/245 = 8.57%; candidate above the maximum 1%; "
            f"why: candidate: http_404 × 19 ({MESSAGE_404}), timeout × 1 (request timed out after 30 s), "
            "stream_cut × 1 (connection reset after 3 chunks)",
        },
        {
            "name": "max_tpot_p95_regression",
            "threshold": "10%",
            "observed": 0.031,
            "passed": True,
            "message": "candidate TPOT p95 12.3 ms vs baseline 11.9 ms: +3.1% (within the allowed +10%)",
        },
        {
            "name": "max_quality_regression_cases",
            "threshold": 0,
            "observed": 3,
            "passed": False,
            "route": "customer_support_escalations",
            "message": "3 case(s) regressed beyond the noise floor (max 0): cse-4 (exact); cse-9 (json_schema); cse-17 (exact)",
        },
    ]
    errors = {
        "baseline": {"count": 0, "requests": 245, "rate": 0.0, "kinds": []},
        "candidate": {
            "count": 21,
            "requests": 245,
            "rate": 21 / 245,
            "kinds": [
                {"kind": "http_404", "count": 19, "message": MESSAGE_404},
                {"kind": "timeout", "count": 1, "message": "request timed out after 30 s"},
                {"kind": "stream_cut", "count": 1, "message": "connection reset after 3 chunks"},
            ],
        },
    }
    return Summary.model_validate(
        {
            "format_version": 1,
            "verdict": "fail",
            "cases": 245,
            "targets": {},
            "errors": errors,
            "latency": {},
            "acceptance": {"rate": None, "mean_accepted_length": None, "draft_tokens": None, "accepted_tokens": None},
            "guardrails": guardrails,
            "categories": categories,
            "fallback": {"action": "disable_speculative_decoding_for_route", "routes": ["customer_support_escalations"]},
        }
    )


def _printed(summary: Summary, width: int, *, terminal: bool = False) -> str:
    buf = io.StringIO()
    console = Console(width=width, file=buf, force_terminal=terminal, no_color=True, highlight=False, emoji=False)
    print_summary(summary, console=console)
    return re.sub(r"\x1b\[[0-9;]*m", "", buf.getvalue())  # a terminal's styles are not width


def _flat(text: str) -> str:
    """The text with borders and line breaks gone: what a reader sees, whatever the layout."""
    return " ".join(re.sub(r"[|+]|-{3,}|━+", " ", text).split())


@pytest.mark.parametrize("terminal", [False, True])
@pytest.mark.parametrize("width", [60, 80, 100, 140])
def test_the_summary_fits_the_width_and_cuts_nothing(width: int, terminal: bool) -> None:
    out = _printed(_realistic(), width, terminal=terminal)
    assert max(len(line) for line in out.splitlines()) <= width
    assert "…" not in out  # no header collapsed to "TT…", no cell cut short
    flat = _flat(out)
    for word in (
        "customer_support_escalations",
        "sql_generation",
        "summarization",
        "INCONCLUSIVE",
        "FAIL",
        "PASS",
        "NOT EVALUATED",
        "preflight_consistent",
        "max_error_rate",
        "max_tpot_p95_regression",
        "max_quality_regression_cases",
        "http_404",
        "timeout",
        "stream_cut",
        "cse-17",
        "json_schema",
        "exact 95.0%→87.0% (-8.0pp) p=0.031",
        "/tokenizer_info",
        "0.084",
    ):
        assert word in flat, (word, out)
    assert "The model `smollm2-135m-instruct-spec` does not exist." in flat
    assert MESSAGE_404.split()[0] in out  # the longest word (a URL) is folded, never cut


def test_at_80_columns_a_table_that_cannot_fit_prints_as_lines_and_one_that_can_stays_a_table() -> None:
    out = _printed(_realistic(), 80)
    assert re.search(r"^FAIL max_error_rate\n    threshold 1%, observed 0\.084 — error rate per side:", out, re.M), out
    assert re.search(r"^\| candidate \| http_404\s+\|\s+19 \| http://\S+\s+\|$", out, re.M), out  # wraps in its column
    assert re.search(r"^customer_support_escalations: FAIL\n    120 cases, 62\.0% identical, 3 regression\(s\)$", out, re.M), out
    assert re.search(r"^    exact 95\.0%→87\.0% \(-8\.0pp\) p=0\.031$", out, re.M), out
    assert re.search(r"^\| case\s+\| category\s+\| checks\s+\| status\s+\|$", out, re.M), out  # short enough for a table
    wide = _printed(_realistic(), 200)
    assert re.search(r"^\| guardrail\s+\| threshold\s+\| observed\s+\| result\s+\| message", wide, re.M), wide
    assert re.search(r"^\| candidate \| http_404\s+\|\s+19 \| http://\S+ HTTP 404: The model", wide, re.M), wide
    narrow = _printed(_realistic(), 60)  # a message's URL is wider than its column can be: the errors print as lines
    assert re.search(r"^candidate: http_404 × 19\n    http://", narrow, re.M), narrow
    assert max(len(line) for line in narrow.splitlines()) <= 60 and "…" not in narrow
