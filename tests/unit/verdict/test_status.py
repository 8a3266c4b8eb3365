"""One owner of per-case status: summary.json, the report and the pytest gate say the same thing about every case."""

from __future__ import annotations

import io
import re
from pathlib import Path

from qualitycheck.core._config_file import Config
from qualitycheck.pipeline._run import verdict_settings
from qualitycheck.pytest_plugin import gate_items
from qualitycheck.report import collect, print_summary
from qualitycheck.report._terminal import make_console
from qualitycheck.verdict._status import STATUS_ORDER, check_statuses
from qualitycheck.verdict._summary import build_summary
from tests.unit.verdict.verdict_builders import make_store


def _two_routes_one_category() -> list[dict]:
    """qa spans routes r1 and r2; its one regression is in r2, which allows one. `other` regresses in r1, which allows none."""
    rows: list[dict] = [
        {
            "id": f"qa-{i}",
            "category": "qa",
            "route": "r1" if i < 3 else "r2",
            "checks": {"exact": {"baseline": "pass", "candidate": "pass"}},
        }
        for i in range(6)
    ]
    rows.append(
        {
            "id": "qa-bad",
            "category": "qa",
            "route": "r2",
            "texts": {"baseline": "yes", "candidate": "no"},
            "checks": {"exact": {"baseline": "pass", "candidate": "fail"}},
        }
    )
    rows += [
        {"id": f"o-{i}", "category": "other", "route": "r1", "checks": {"exact": {"baseline": "pass", "candidate": "pass"}}}
        for i in range(3)
    ]
    rows.append(
        {
            "id": "o-bad",
            "category": "other",
            "route": "r1",
            "texts": {"baseline": "yes", "candidate": "no"},
            "checks": {"exact": {"baseline": "pass", "candidate": "fail"}},
        }
    )
    return rows


def test_the_gate_the_report_and_the_summary_agree_on_what_counts(tmp_path: Path) -> None:
    cfg = Config(
        speculative_decoding_guardrails={"max_quality_regression_cases": 0, "max_error_rate": "1%"},
        routes={"r2": {"max_quality_regression_cases": 1}},
    )
    with make_store(tmp_path, _two_routes_one_category()) as store:
        summary = build_summary(store, verdict_settings(cfg))
        data = collect(store, summary)
    qa, other = summary.categories["qa"], summary.categories["other"]
    # r1 failed (o-bad); qa-bad lies in r2, whose allowance of one covers it, though qa also has cases in r1
    assert qa.checks["exact"].regressions == ["qa-bad"] and qa.checks["exact"].tolerated == ["qa-bad"] and qa.verdict == "pass"
    assert other.checks["exact"].counted == ["o-bad"] and other.verdict == "fail"

    items = {name: outcome for name, outcome, _ in gate_items(summary)}
    assert items["regression::qa::exact::qa-bad"] == "xfail" and items["regression::other::exact::o-bad"] == "fail"
    assert items["category::qa"] == "pass" and items["category::other"] == "fail"

    rows = {r.id: r for r in data.rows}
    assert rows["qa-bad"].flags[0] == "tolerated" and rows["qa-bad"].tolerated == ["exact"] and rows["qa-bad"].regressed == []
    assert rows["o-bad"].flags[0] == "regression" and rows["o-bad"].regressed == ["exact"]
    for cat in summary.categories.values():  # every reader's status is the summary's
        for check, k in cat.checks.items():
            for case_id, status in check_statuses(k).items():
                assert rows[case_id].flags[0] == status
                assert items.get(f"regression::{'qa' if case_id.startswith('qa') else 'other'}::{check}::{case_id}") == {
                    "regression": "fail",
                    "tolerated": "xfail",
                }.get(status)

    for with_rows in (data, None):  # the terminal summary, with the report's rows or from summary.json alone
        buf = io.StringIO()
        print_summary(summary, with_rows, console=make_console(buf))
        text = buf.getvalue()
        assert "Top regressions (2 of 2)" in text
        assert re.search(r"\| o-bad\s+\| other\s+\| exact\s+\| regression", text)
        assert re.search(r"\| qa-bad\s+\| qa\s+\| exact\s+\| tolerated", text)


def test_a_case_whose_candidate_varies_but_baseline_does_not_is_not_flaky(tmp_path: Path) -> None:
    rows = [{"id": f"c{i}", "category": "qa", "checks": {"exact": {"baseline": "pass", "candidate": "pass"}}} for i in range(4)]
    rows.append(
        {
            "id": "cand-varies",
            "category": "qa",
            "texts": {"baseline": "a", "candidate": ["a", "b"]},
            "checks": {"exact": {"baseline": "pass", "candidate": ["pass", "fail"]}},
        }
    )
    rows.append(
        {
            "id": "base-varies",
            "category": "qa",
            "texts": {"baseline": ["a", "b"], "candidate": "a"},
            "checks": {"exact": {"baseline": ["pass", "fail"], "candidate": "pass"}},
        }
    )
    with make_store(tmp_path, rows, repeats=2) as store:
        summary = build_summary(store)
        data = collect(store, summary)
    assert summary.categories["qa"].checks["exact"].flaky == ["base-varies"]
    by_id = {r.id: r for r in data.rows}
    assert by_id["cand-varies"].flaky == [] and "flaky" not in by_id["cand-varies"].flags
    assert by_id["base-varies"].flaky == ["exact"] and by_id["base-varies"].flags[0] == "flaky"
    assert data.flag_counts["flaky"] == 1


def test_errors_and_identity_come_from_the_comparison_records(tmp_path: Path) -> None:
    rows = [
        {"id": "same", "category": "qa"},
        {"id": "differs", "category": "qa", "texts": {"baseline": "a", "candidate": "b"}},
        {"id": "no-answer", "category": "qa", "texts": {"baseline": "a", "candidate": None}},
        {"id": "scorer-error", "category": "qa", "checks": {"exact": {"baseline": "pass", "candidate": "error"}}},
    ]
    with make_store(tmp_path, rows) as store:
        data = collect(store, build_summary(store))
    flags = {r.id: r.flags for r in data.rows}
    assert flags == {"same": ["identical"], "differs": ["divergent"], "no-answer": ["error"], "scorer-error": ["error", "identical"]}
    assert list(data.flag_counts) == list(STATUS_ORDER)
