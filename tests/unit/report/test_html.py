"""report.html from a stored run: content, ordering, escaping, CSP, rebuild from the CLI."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from qualitycheck.cli._main import main
from qualitycheck.core._errors import StoreError
from qualitycheck.core._store import RunStore
from qualitycheck.report import collect, render_html, write_report
from qualitycheck.report._html import json_for_script
from qualitycheck.verdict._model import Summary, read_summary

from .conftest import XSS_IMG, XSS_SCRIPT


def _cases_json(html: str) -> list[dict[str, Any]]:
    m = re.search(r'<script type="application/json" id="qc-cases">(.*?)</script>', html, re.S)
    assert m, "case data block missing"
    return json.loads(m.group(1))


def _render(run: Path, summary: Summary) -> str:
    with RunStore.open(run) as store:
        return render_html(collect(store, summary))


def test_the_run_writes_a_report_and_the_cli_rebuilds_it(stored_run: tuple[Path, Summary]) -> None:
    run, _ = stored_run
    path = run / "report.html"
    assert path.is_file(), "pipeline.finish should write report.html"
    path.unlink()
    assert main(["report", str(run)]) in (0, 1)
    html = path.read_text(encoding="utf-8")
    assert "qualitycheck report" in html and "qa-3" in html


def test_gate_regates_and_leaves_the_report_alone(stored_run: tuple[Path, Summary], tmp_path: Path) -> None:
    """`gate DIR` rewrites summary.json and signoff.md and exits with the new verdict; report.html stays as it was."""
    out = tmp_path / "run"
    shutil.copytree(stored_run[0], out)
    report = out / "report.html"
    before, mtime = report.read_bytes(), report.stat().st_mtime_ns
    (out / "signoff.md").unlink()
    lenient = tmp_path / "lenient.yaml"
    lenient.write_text(
        "speculative_decoding_guardrails:\n  max_error_rate: '20%'\n  max_quality_regression_cases: 1\nallow_not_evaluated: true\n",
        encoding="utf-8",
    )
    assert stored_run[1].verdict == "fail"
    assert main(["gate", str(out), "-c", str(lenient)]) == 1  # the format category still cannot be decided: inconclusive
    assert read_summary(out / "summary.json").verdict == "inconclusive" and (out / "signoff.md").is_file()
    assert report.read_bytes() == before and report.stat().st_mtime_ns == mtime
    assert main(["report", str(out), "-c", str(lenient)]) == 1
    assert report.read_bytes() != before  # `report` does rebuild it, with the new verdict
    assert "qualitycheck: inconclusive" in report.read_text(encoding="utf-8")


def test_cases_are_flagged_from_the_store_and_regressions_come_first(stored_run: tuple[Path, Summary]) -> None:
    run, summary = stored_run
    cases = _cases_json(_render(run, summary))
    by_id = {c["i"]: c for c in cases}
    # qa-3 regressed, and the control's noise floor explains it: the summary tolerates it, so the page does too
    assert summary.categories["qa"].checks["exact"].tolerated == ["qa-3"]
    assert cases[0]["i"] == "qa-3" and cases[0]["f"][0] == "tolerated" and cases[0]["tc"] == ["exact"] and "rc" not in cases[0]
    assert "improved" in by_id["qa-6"]["f"] and by_id["qa-6"]["ic"] == ["exact"]
    assert "error" in by_id["qa-1"]["f"] and by_id["qa-1"]["e"]["candidate"][0].startswith("http_status")
    assert by_id["qa-0"]["f"] == ["identical"]
    assert by_id["qa-3"]["s"]["exact"] == {"baseline": "p", "candidate": "f", "control": "p"}
    assert by_id["qa-3"]["d"]["exact"]["candidate"][0]["got"].startswith("The answer is 43.")
    assert "divergent" in by_id["fmt-2"]["f"] and by_id["fmt-2"]["k"] == "format"
    assert by_id["qa-3"]["p"] == "[user] question qa 3?"


def test_model_output_never_reaches_the_page_as_markup(stored_run: tuple[Path, Summary]) -> None:
    run, summary = stored_run
    html = _render(run, summary)
    for payload in (XSS_SCRIPT, XSS_IMG, "<b>bold</b>", "alert(1)</script>"):
        assert payload not in html
    assert len(re.findall(r"<script\b", html)) == 2
    texts = {c["i"]: c["t"] for c in _cases_json(html)}
    assert XSS_SCRIPT in texts["fmt-0"]["candidate"][0] and XSS_IMG in texts["fmt-1"]["baseline"][0]


def test_csp_allows_only_this_reports_nonce_and_nothing_from_the_network(stored_run: tuple[Path, Summary]) -> None:
    run, summary = stored_run
    html = _render(run, summary)
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', html).group(1)  # type: ignore[union-attr]
    nonce = re.search(r"script-src 'nonce-([A-Za-z0-9_-]{16,})'", csp).group(1)  # type: ignore[union-attr]
    assert "default-src 'none'" in csp and "unsafe-eval" not in csp and "unsafe-inline" not in csp
    assert html.count(f'nonce="{nonce}"') == 2  # the style block and the one script
    assert nonce not in _render(run, summary)  # a fresh nonce per report
    assert not re.search(r'\s(src|href)="(https?:)?//', html)  # no remote resources


def test_summary_sections_are_rendered_when_present(stored_run: tuple[Path, Summary]) -> None:
    run, summary = stored_run
    s = summary.model_dump(mode="json")
    s["verdict"] = "fail"
    s["categories"]["qa"]["checks"]["exact"] = {
        "baseline_pass_rate": 0.875,
        "candidate_pass_rate": 0.75,
        "delta": -0.125,
        "ci": [-0.3, 0.05],
        "p_value": 0.0004,
        "regressions": ["qa-3"],
        "improvements": ["qa-6"],
        "flaky": [],
    }
    s["categories"]["format"]["format_drift"] = {
        "markdown_emphasis": {"baseline": 0.0, "candidate": 0.33, "kind": "rate", "flag": True},
        "chars": {"baseline": 120.0, "candidate": 80.5, "kind": "mean", "flag": False},
    }
    s["categories"]["qa"]["checks"]["judge"] = {
        "wins": 2,
        "losses": 5,
        "ties": 1,
        "judged": 8,
        "regressions": ["qa-3"],
        "baseline_pass_rate": None,
        "candidate_pass_rate": None,
        "delta": None,
        "ci": None,
        "p_value": None,
        "improvements": [],
    }
    s["guardrails"] = [
        {"name": "max_quality_regression_cases", "threshold": 0, "observed": 1, "passed": False, "message": "1 regression"},
        {"name": "min_acceptance_rate", "threshold": 0.55, "observed": None, "passed": None, "message": "no /metrics"},
    ]
    s["acceptance"] = {"rate": 0.62, "mean_accepted_length": 2.4, "draft_tokens": None, "accepted_tokens": None}
    s["latency"] = {
        "baseline": {"ttft_ms": {"p50": 20.0, "p95": 40.0, "p99": 50.0}},
        "candidate": {"ttft_ms": {"p50": 25.0, "p95": 60.0, "p99": 80.0}},
    }
    s["fallback"] = {"action": "disable_speculative_decoding_for_route", "routes": ["qa"], "reason": "qa regressed"}
    s["not_evaluated"] = []  # the report then lists the unevaluated guardrails itself
    html = _render(run, Summary.model_validate(s))
    assert "<li>max_quality_regression_cases: 1 regression</li>" in html
    assert "<li>min_acceptance_rate: no /metrics</li>" in html and "not evaluated" in html
    assert "qa regressed" in html
    assert "87.5%" in html and "75.0%" in html and "-12.5 pp" in html and "[-30.0, +5.0]" in html and "&lt;0.001" in html
    assert "markdown_emphasis" in html and "1 of 2 features flagged" in html and "80.5" in html
    assert "62.0%" in html and "2.40" in html
    assert "1.50×" in html  # TTFT p95 ratio 60 / 40
    assert "disable_speculative_decoding_for_route" in html
    assert "<svg" in html  # distributions from the stored timings
    assert "2 / 5 / 1" in html  # judge wins / losses / ties


MINIMAL = {
    "format_version": 1,
    "verdict": "inconclusive",
    "cases": 11,
    "targets": {},
    "categories": {},
    "errors": {},
    "latency": {},
    "acceptance": {"rate": None, "mean_accepted_length": None, "draft_tokens": None, "accepted_tokens": None},
    "guardrails": [],
    "fallback": {"action": "", "routes": []},
}
"""Contract 3's minimum: what a summary.json written before any later field existed holds."""


def test_a_minimal_summary_renders_and_an_odd_one_is_refused_by_name(stored_run: tuple[Path, Summary], tmp_path: Path) -> None:
    run, _ = stored_run
    no_stats = {
        "cases": 8,
        "identical_rate": None,
        "format_drift": {},
        "verdict": "inconclusive",
        "checks": {
            "exact": {
                "baseline_pass_rate": None,
                "candidate_pass_rate": None,
                "delta": None,
                "ci": None,
                "p_value": None,
                "regressions": [],
                "improvements": [],
            }
        },
    }
    for s in (MINIMAL, {**MINIMAL, "categories": {"qa": no_stats, "format": {**no_stats, "checks": {}}}}):
        html = _render(run, Summary.model_validate(s))
        assert "qualitycheck report" in html and _cases_json(html)
    odd = tmp_path / "summary.json"
    for s, field in (
        ({}, "format_version: Field required"),
        ({**MINIMAL, "guardrails": None}, "guardrails"),
        ({**MINIMAL, "categories": {"qa": {**no_stats, "checks": {"exact": {"regressions": 3}}}}}, "categories.qa.checks.exact"),
    ):
        odd.write_text(json.dumps(s), encoding="utf-8")
        with pytest.raises(StoreError, match=re.escape(f"{odd}: not a qualitycheck summary.json: {field}")):
            read_summary(odd)


def test_write_report_is_callable_without_the_cli(stored_run: tuple[Path, Summary], tmp_path: Path) -> None:
    run, summary = stored_run
    with RunStore.open(run) as store:
        path = write_report(store, summary, tmp_path / "r.html")
    assert path.read_text(encoding="utf-8").startswith("<!doctype html>")


def test_json_for_script_cannot_close_its_block() -> None:
    value = {"t": "</script><script>alert(1)</script>", "u": "a\u2028b <!-- c & d"}
    text = str(json_for_script(value))
    assert "<" not in text and ">" not in text and "&" not in text and "\u2028" not in text
    assert json.loads(text) == value


def test_bucketed_latency_percentiles_are_marked_in_the_page_and_the_signoff(stored_run: tuple[Path, Summary]) -> None:
    """Past their exact bound (very large runs) the percentiles are approximate: every reader must see that."""
    from markupsafe import escape

    from qualitycheck.report._signoff import render_signoff

    run, summary = stored_run
    s = summary.model_dump(mode="json")
    note = "approximate: log buckets, relative error <= 0.001 (more than 10000 responses and 2000000 samples on this side)"
    s["latency"] = {
        "baseline": {"ttft_ms": {"p50": 20.0, "p95": 40.0, "p99": 50.0}},
        "candidate": {"ttft_ms": {"p50": 25.0, "p95": 60.0, "p99": 80.0}, "percentiles": note},
    }
    html = _render(run, Summary.model_validate(s))
    assert f'<div class="small muted latency-approx">percentiles candidate: {escape(note)}</div>' in html
    assert "baseline: approximate" not in html
    assert f"; percentiles {note}" in render_signoff(Summary.model_validate(s))
    assert "percentiles approximate" not in _render(run, summary) and "latency-approx" not in _render(run, summary)


def test_a_render_that_fails_halfway_leaves_the_old_report_and_no_partial_file(
    stored_run: tuple[Path, Summary], tmp_path: Path, monkeypatch: Any
) -> None:
    import qualitycheck.report._html as html_mod

    run, summary = stored_run
    target = tmp_path / "report.html"
    target.write_text("previous report", encoding="utf-8")
    with RunStore.open(run) as store:
        data = collect(store, summary)

    def explodes_while_rendered(_: Any) -> Any:  # a generator: it raises only once the template iterates it
        raise RuntimeError("render failed")
        yield

    monkeypatch.setattr(html_mod, "_latency_approx", explodes_while_rendered)
    try:
        html_mod.write_html(data, target)
    except RuntimeError:
        pass
    else:
        raise AssertionError("the render error was swallowed")
    assert target.read_text(encoding="utf-8") == "previous report"
    assert not (tmp_path / "report.html.tmp").exists()
