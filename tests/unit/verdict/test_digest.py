"""The summary's one-pass digest must say what the whole list of comparisons says."""

from __future__ import annotations

import numpy as np
import pytest

from qualitycheck.core._config_file import Config
from qualitycheck.pipeline._run import summarize
from qualitycheck.verdict._compare import CaseComparison, compare_run
from qualitycheck.verdict._digest import RunDigest
from qualitycheck.verdict._outcomes import CaseOutcome, add_case_outcomes
from qualitycheck.verdict._summary import build_summary
from qualitycheck.verdict._tests import paired_bootstrap_ci
from tests.unit.verdict.verdict_builders import make_store


def _whole_list_outcomes(comps: list[CaseComparison]) -> dict[str, dict[str, list[CaseOutcome]]]:
    """The outcomes from every comparison held at once, grouped by case: what the streaming digest must equal."""
    by_case: dict[str, list[CaseComparison]] = {}
    for c in comps:
        by_case.setdefault(c.case_id, []).append(c)
    out: dict[str, dict[str, list[CaseOutcome]]] = {}
    for reps in by_case.values():
        add_case_outcomes(out, sorted(reps, key=lambda c: c.repeat))
    return out


def _rows():
    rows = []
    for i in range(12):
        st = ["pass", "fail", "pass"][i % 3]
        rows.append(
            {
                "id": f"c{i:02d}",
                "category": "qa" if i % 2 else "json",
                "route": "r1" if i < 6 else "r2",
                "texts": {
                    "baseline": ["same", "same"],
                    "candidate": ["same", "other"] if i % 4 else ["same", "same"],
                    "control": ["same", None if i == 5 else "same"],
                },
                "checks": {
                    "exact": {"baseline": [st, st], "candidate": ["fail", st], "control": [st, "pass"]},
                    "contains": {"baseline": "pass", "candidate": "pass"},
                },
            }
        )
    return rows


def test_digest_outcomes_equal_the_whole_list_grouping(tmp_path):
    with make_store(tmp_path, _rows(), targets=("baseline", "candidate", "control"), repeats=2) as store:
        compare_run(store)
        comps = [CaseComparison.model_validate_json(b) for b in store.comparison_bodies()]
    digest = RunDigest.of(comps)
    assert digest.outcomes == _whole_list_outcomes(comps)
    assert digest.text["qa"].cases == 6 and digest.text["qa"].pairs == 12
    assert digest.route_errors["r1"]["control"] == {"count": 1, "requests": 12}


def test_summary_never_lists_every_case(tmp_path, monkeypatch):
    """The summary streams: it must not build the list of every Case (a 100,000-case run held 2 GB)."""
    with make_store(tmp_path, _rows(), targets=("baseline", "candidate", "control"), repeats=2) as store:
        expected = build_summary(store).model_dump(mode="json")
        monkeypatch.setattr(type(store), "cases", lambda self: pytest.fail("build_summary listed every case"))
        again = build_summary(store).model_dump(mode="json")
    assert again["categories"] == expected["categories"]
    assert again["cases"] == 12 and again["categories"]["qa"]["cases"] == 6
    assert again["categories"]["qa"]["routes"] == ["r1", "r2"]


def test_bootstrap_in_batches_still_covers_the_true_difference(monkeypatch):
    import qualitycheck.verdict._tests as stats

    rng = np.random.default_rng(3)
    b = (rng.random(4000) < 0.8).astype(float)
    c = np.where(rng.random(4000) < 0.05, 0.0, b)
    monkeypatch.setattr(stats, "BOOTSTRAP_BATCH_VALUES", 4000 * 2000)
    whole = paired_bootstrap_ci(b, c, seed=1)
    monkeypatch.setattr(stats, "BOOTSTRAP_BATCH_VALUES", 4000 * 50)  # 40 batches of 50 resamples
    batched = paired_bootstrap_ci(b, c, seed=1)
    assert batched == whole  # the same resamples, drawn in pieces
    d = c - b
    se = d.std(ddof=1) / np.sqrt(len(d))
    lo, hi = whole
    assert lo < d.mean() < hi
    assert abs((hi - lo) - 2 * 1.96 * se) < 0.25 * (2 * 1.96 * se)


def test_a_check_no_case_decided_keeps_its_row(tmp_path):
    """A scorer that errors on every case (a broken sandbox) must show as n = 0, not vanish."""
    rows = [
        {
            "id": f"c{i}",
            "category": "code",
            "checks": {"unit_tests": {"baseline": "error", "candidate": "error"}, "contains": {"baseline": "pass", "candidate": "pass"}},
        }
        for i in range(3)
    ]
    with make_store(tmp_path, rows) as store:
        s = summarize(store, Config()).model_dump(mode="json")  # the sign-off is rendered above the verdict
    checks = s["categories"]["code"]["checks"]
    assert checks["unit_tests"]["n"] == 0 and checks["unit_tests"]["baseline_pass_rate"] is None
    assert checks["contains"]["n"] == 3
    assert "unit_tests" in s["signoff"]


@pytest.mark.parametrize("control", [True, False])
def test_one_repeat_outcomes_follow_the_definition(control: bool) -> None:
    """A single repeat's outcome per check, for every mix of statuses: decided on both sides, the control paired where it decided."""
    from qualitycheck.verdict._compare import CheckOutcome

    statuses = ("pass", "fail", "error", "skipped", None)
    checks = {
        f"k{i}": CheckOutcome(baseline=b, candidate=c, control=k)
        for i, (b, c, k) in enumerate((b, c, k) for b in statuses for c in statuses for k in (statuses if control else (None,)))
    }
    comp = CaseComparison(case_id="x", category="qa", route="r", checks=checks)
    out: dict[str, dict[str, list[CaseOutcome]]] = {}
    add_case_outcomes(out, [comp])
    assert list(out["qa"]) == sorted(checks)  # every check has its list, decided or not
    decided = ("pass", "fail")
    for name, o in checks.items():
        expected = []
        if o.baseline in decided and o.candidate in decided:
            b, c = o.baseline == "pass", o.candidate == "pass"
            k = (o.control == "pass",) if o.control in decided else ()
            expected = [CaseOutcome("x", "r", (b,), (c,), k, ((b, k[0]),) if k else ())]
        assert out["qa"][name] == expected, (name, o)
