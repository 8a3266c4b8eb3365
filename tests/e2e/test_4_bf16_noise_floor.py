"""bf16 at concurrency 8: batch-dependent divergences, a measured noise floor, and a gate that keeps them apart.

On CPU, bf16 greedy decoding depends on how requests are batched, so the
candidate's answers diverge from the baseline's for reasons that have
nothing to do with speculation; the control — a second server with the
baseline's exact flags, asked at the same concurrency at the same time —
measures how often that happens (the A/A noise floor), and the gate must
keep such flaky cases out of the regressions.

Measured on this machine (16 cases, up to 128 tokens, concurrency 8):
the candidate diverged on 1-2 cases in 7 of 9 runs and on none in 2
(e2e-bf16-delay and/or e2e-bf16-policy: near-ties that flip with batch
composition); the control disagreed with the baseline on 0-3 cases — at
equal concurrency bf16 is far more stable than sequential vs concurrent
(7/20 agreeing in docs/ENGINE.md's source measurement). A control on the
baseline's own server never disagrees (each control request is batched with
its baseline twin), which is why the control here is its own server. So
these tests assert that divergences are located correctly whenever they
occur (a run without any is reported as an expected failure, xfail, never as
a pass), and that the noise floor is measured and used; they do not require
the control to disagree.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from qualitycheck.core._store import RunStore
from qualitycheck.verdict._decision import DIVERGENCE_CHECK
from tests.e2e.e2e_helpers import MODEL, SUITES, explain, qc, summary_of, write_config

pytestmark = [pytest.mark.e2e, pytest.mark.engines("bf16", "bf16-ngram", "bf16-control")]


@pytest.fixture(scope="module")
def bf16_run(engines: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    servers = engines.use("bf16", "bf16-ngram", "bf16-control")
    work = tmp_path_factory.mktemp("bf16")
    out = work / "run"
    proc = qc(
        "run",
        "-c",
        str(write_config(work / "qc.yaml")),
        "--baseline",
        servers["bf16"].url,
        "--candidate",
        servers["bf16-ngram"].url,
        "--control",
        servers["bf16-control"].url,
        "--model",
        MODEL,
        "--suite",
        str(SUITES / "bf16.jsonl"),
        "--out",
        str(out),
        "--concurrency",
        "8",
    )
    with RunStore.open(out) as store:
        comparisons = [json.loads(body) for body in store.comparison_bodies()]
        responses = {(r.case_id, r.target): r for _, rs in store.responses_by_case() for r in rs}
    return {"proc": proc, "out": out, "comparisons": comparisons, "responses": responses}


def test_run_completes_with_a_verdict(bf16_run: dict[str, Any]) -> None:
    proc = bf16_run["proc"]
    assert proc.returncode in (0, 1), explain(proc)
    s = summary_of(bf16_run["out"])
    assert s["verdict"] in ("pass", "fail", "inconclusive")
    assert s["errors"]["candidate"]["count"] == 0 and s["errors"]["control"]["count"] == 0


def test_divergences_carry_first_divergence_positions(bf16_run: dict[str, Any]) -> None:
    comps = bf16_run["comparisons"]
    responses = bf16_run["responses"]
    for c in comps:
        b, k = responses[(c["case_id"], "baseline")], responses[(c["case_id"], "candidate")]
        assert b.token_ids is not None and k.token_ids is not None, c["case_id"]
        assert c["identical"] is (b.text == k.text), c["case_id"]
        if c["identical"]:
            assert c["divergence_token"] is None and c["divergence_char"] is None
    diverged = [c for c in comps if c["identical"] is False]
    print(
        f"\nbf16: {len(diverged)}/{len(comps)} candidate answers differ from the baseline; "
        f"{sum(c['control_identical'] is False for c in comps)}/{len(comps)} control answers differ from the baseline"
    )
    for c in diverged:
        b, k = responses[(c["case_id"], "baseline")], responses[(c["case_id"], "candidate")]
        assert b.token_ids is not None and k.token_ids is not None
        pos = c["divergence_token"]
        assert pos is not None
        assert b.token_ids[:pos] == k.token_ids[:pos], "ids agree up to the first divergence"
        assert pos == len(b.token_ids) or pos == len(k.token_ids) or b.token_ids[pos] != k.token_ids[pos]
        ch = c["divergence_char"]
        assert ch is not None and b.text[:ch] == k.text[:ch]
        assert ch == len(b.text) or ch == len(k.text) or b.text[ch] != k.text[ch]
    if not diverged:
        # Shown as an expected failure, not a pass: the position checks above did not run this time.
        pytest.xfail(
            "bf16 gave no baseline/candidate divergence in this run (measured 0-2 of 16 per run at "
            "concurrency 8 on this CPU); the first-divergence positions were not exercised"
        )


def test_noise_floor_is_measured_from_the_control(bf16_run: dict[str, Any]) -> None:
    comps = bf16_run["comparisons"]
    responses = bf16_run["responses"]
    s = summary_of(bf16_run["out"])
    assert all(c["control_identical"] is not None for c in comps), "every case has an A/A pair"
    for c in comps:  # the A/A verdict is the texts' equality, not a guess
        same = responses[(c["case_id"], "baseline")].text == responses[(c["case_id"], "control")].text
        assert c["control_identical"] is same, c["case_id"]
    cat = s["categories"]["business"]
    aa_rate = sum(c["control_identical"] for c in comps) / len(comps)
    assert cat["control_identical_rate"] == pytest.approx(aa_rate)
    for name, check in cat["checks"].items():
        if name == DIVERGENCE_CHECK:  # weighed with no floor: noise never writes a token the baseline model would not
            assert check["noise_floor"]["measured_by"] is None and check["regressions"] == [], check
            assert all(d["kind"] != "decisive" for d in cat.get("divergences", [])), cat["divergences"]
        elif "noise_floor" in check:
            assert check["noise_floor"]["measured_by"] == "control", name
            assert check["noise_floor"]["pairs"] == len(comps), name
    assert not any("no control target" in n for n in s["not_evaluated"]), s["not_evaluated"]


def test_flaky_cases_are_kept_apart_from_regressions(bf16_run: dict[str, Any]) -> None:
    s = summary_of(bf16_run["out"])
    by_case = {c["case_id"]: c for c in bf16_run["comparisons"]}
    for cat, c in s["categories"].items():
        for name, check in c["checks"].items():
            if "flaky" not in check or name == DIVERGENCE_CHECK:  # no floor, so no flaky cases: checked above
                continue
            flaky, regressions = set(check["flaky"]), set(check["regressions"])
            assert not flaky & regressions, (cat, name)
            assert set(check["flaky_regressions"]) <= flaky, (cat, name)
            assert check["noise_floor"]["measured_by"] == "control"
            for case_id in flaky:  # flaky means the control decided this check differently from the baseline
                o = by_case[case_id]["checks"][name]
                assert o["baseline"] != o["control"], (case_id, o)
            for case_id in regressions:  # a regression: baseline passes, candidate fails, control agrees
                o = by_case[case_id]["checks"][name]
                assert (o["baseline"], o["candidate"], o["control"]) == ("pass", "fail", "pass"), (case_id, o)


def test_verdict_follows_from_its_reasons(bf16_run: dict[str, Any]) -> None:
    s = summary_of(bf16_run["out"])
    beyond = {cat: sum(ch.get("regressions_beyond_floor", 0) for ch in c["checks"].values()) for cat, c in s["categories"].items()}
    quality_rules = [g for g in s["guardrails"] if g["name"] == "max_quality_regression_cases"]
    assert quality_rules and all(g["message"] for g in s["guardrails"])
    for cat, c in s["categories"].items():
        assert c["verdict_reason"], cat
    if any(beyond.values()):
        # regressions beyond what the measured noise explains fail their routes, or, where the floor has too few
        # pairs to tell them from noise either, leave their routes undecided and their categories inconclusive
        assert s["verdict"] in ("fail", "inconclusive")
        for cat in (cat for cat, n in beyond.items() if n):
            c = s["categories"][cat]
            routes = [g for g in quality_rules if g["route"] in c["routes"]]
            assert any(g["passed"] is False for g in routes) or (
                c["verdict"] == "inconclusive" and "too few pairs" in c["verdict_reason"] and any(g["passed"] is None for g in routes)
            ), (cat, c["verdict_reason"], routes)
        if s["verdict"] == "fail":
            assert s["fallback"]["routes"], "a failing route gets the fallback action"
            assert s["fallback"]["reason"]
    elif s["verdict"] == "fail":
        # no quality regression beyond the noise floor: only a non-quality guardrail can fail the run
        assert any(g["passed"] is False and g["name"] != "max_quality_regression_cases" for g in s["guardrails"]), s["guardrails"]
    print(
        f"\nbf16 verdict {s['verdict']}: regressions beyond the floor {beyond}; "
        f"fallback {s['fallback'].get('routes')}; reasons {[c['verdict_reason'] for c in s['categories'].values()]}"
    )
