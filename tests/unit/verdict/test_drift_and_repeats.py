from __future__ import annotations

import pytest

from qualitycheck.core._config_file import Config
from qualitycheck.pipeline._run import summarize  # the verdict with its sign-off, as `finish` writes it
from tests.unit.verdict.verdict_builders import make_store


def test_format_drift_flags_a_systematic_change_but_not_noise(tmp_path):
    fenced = '```json\n{"a": 1}\n```'
    rows = [
        {"id": f"j{i}", "category": "json", "texts": {"baseline": '{"a": 1}', "candidate": fenced if i < 15 else '{"a": 1}'}}
        for i in range(40)
    ]
    rows += [{"id": f"q{i}", "category": "qa", "texts": {"baseline": "Yes.", "candidate": "Yes." if i else "Yes!"}} for i in range(40)]
    with make_store(tmp_path, rows) as store:
        s = summarize(store, Config()).model_dump(mode="json")
    drift = s["categories"]["json"]["format_drift"]
    assert drift["code_fence"]["baseline"] == 0.0 and drift["code_fence"]["candidate"] == pytest.approx(15 / 40)
    assert drift["code_fence"]["flag"] and drift["json_strict"]["flag"]
    assert not any(d["flag"] for d in s["categories"]["qa"]["format_drift"].values())
    assert "json / code_fence" in s["signoff"]


def test_repeats_compare_per_case_pass_rates_and_measure_the_floor(tmp_path):
    rows = [{"id": f"c{i}", "category": "qa", "checks": {"exact": {"baseline": "pass", "candidate": "pass"}}} for i in range(6)]
    rows.append({"id": "drop", "category": "qa", "checks": {"exact": {"baseline": "pass", "candidate": ["fail", "fail", "pass"]}}})
    rows.append({"id": "wobbly", "category": "qa", "checks": {"exact": {"baseline": ["pass", "fail", "pass"], "candidate": "fail"}}})
    with make_store(tmp_path, rows, repeats=3) as store:
        s = summarize(store, Config(speculative_decoding_guardrails={"max_quality_regression_cases": 0})).model_dump(mode="json")
    exact = s["categories"]["qa"]["checks"]["exact"]
    assert exact["regressions"] == ["drop"] and exact["flaky"] == ["wobbly"] and exact["flaky_regressions"] == ["wobbly"]
    assert exact["noise_floor"]["measured_by"] == "repeats"
    assert exact["baseline_pass_rate"] == pytest.approx((7 + 2 / 3) / 8)
    assert exact["candidate_pass_rate"] == pytest.approx((6 + 1 / 3) / 8)
    # one regression among 7 stable cases while the baseline's own repeats disagree 2 times in 24 pairs:
    # consistent with noise at alpha 0.05, so it is listed but not counted
    assert exact["regression_allowance"] == 2 and exact["regressions_beyond_floor"] == 0
    assert s["verdict"] == "pass"


def test_bootstrap_ci_is_reproducible_across_rebuilds(tmp_path):
    rows = [
        {"id": f"c{i}", "category": "qa", "checks": {"exact": {"baseline": "pass", "candidate": "fail" if i % 7 == 0 else "pass"}}}
        for i in range(50)
    ]
    with make_store(tmp_path, rows) as store:
        a = summarize(store, Config()).model_dump(mode="json")
        b = summarize(store, Config()).model_dump(mode="json")
    assert a["categories"]["qa"]["checks"]["exact"]["ci"] == b["categories"]["qa"]["checks"]["exact"]["ci"]


def test_category_noise_floor_compares_candidate_divergence_with_the_control(tmp_path):
    rows = [
        {
            "id": f"c{i}",
            "category": "qa",
            "texts": {"baseline": "a", "candidate": "b" if i < 12 else "a", "control": "z" if i == 0 else "a"},
        }
        for i in range(20)
    ]
    with make_store(tmp_path, rows, targets=("baseline", "candidate", "control")) as store:
        s = summarize(store, Config()).model_dump(mode="json")
    nf = s["categories"]["qa"]["noise_floor"]
    assert nf["measured_by"] == "control" and nf["text_divergence_rate"] == pytest.approx(0.05)
    assert nf["candidate_divergence_rate"] == pytest.approx(0.6) and nf["divergence_p_value"] < 0.01


def test_repeat_texts_measure_text_noise_without_a_control(tmp_path):
    rows = [{"id": f"c{i}", "category": "qa", "texts": {"baseline": ["a", "a" if i else "b"], "candidate": "a"}} for i in range(4)]
    with make_store(tmp_path, rows, repeats=2) as store:
        s = summarize(store, Config()).model_dump(mode="json")
    nf = s["categories"]["qa"]["noise_floor"]
    assert nf["measured_by"] == "repeats" and nf["text_divergence_rate"] == pytest.approx(0.25)
