"""The baseline model as referee in the decision: the sampled likelihood test and the greedy divergences it explains."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from qualitycheck.cli import main
from qualitycheck.verdict._decision import DIVERGENCE_CHECK, LIKELIHOOD_CHECK, decide_quality, quality_evidence
from qualitycheck.verdict._likelihood import (
    DivergenceFacts,
    DivergenceRule,
    ShiftCase,
    classify_divergence,
    decide_shift,
)
from qualitycheck.verdict._outcomes import CaseOutcome
from qualitycheck.verdict._sequential import Design
from tests.helpers import qa_cases, run_argv, write_suite

ROUNDS = Design.rounds(10, 2)


def _cases(rng: np.random.Generator, n: int, shift: float, samples: int = 2, spread: float = 0.35) -> list[ShiftCase]:
    """n cases whose samples' mean log-probability per token spread around a case level; the candidate's `shift` away."""
    out = []
    for i in range(n):
        level = rng.normal(-1.5, 0.4)
        b = tuple((r, float(level + rng.normal(0, spread))) for r in range(samples))
        c = tuple((r, float(level + shift + rng.normal(0, spread))) for r in range(samples))
        out.append(ShiftCase(f"c{i}", "r", b, c))
    return out


def test_one_sample_per_side_is_the_studentized_sign_flip_statistic() -> None:
    cases = [ShiftCase(f"c{i}", "r", ((0, -1.0),), ((0, -1.0 + d),)) for i, d in enumerate((-3.0, -2.5, -3.5, 0.5))]
    d = decide_shift(Design((1,)), 0.5, cases)
    diffs = [-3.0, -2.5, -3.5, 0.5]
    assert d.z == pytest.approx(sum(diffs) / np.sqrt(sum(x * x for x in diffs)))
    assert d.estimate == pytest.approx(np.mean(diffs)) and d.n == 4


def test_a_broken_candidate_is_found_after_two_samples_in_the_direction_it_moved() -> None:
    """The issue's ngram candidate at temperature 0.8: about 3.3 nats per token below the baseline's own samples."""
    d = decide_shift(ROUNDS, 0.5, _cases(np.random.default_rng(1), 16, -3.3))
    assert d.outcome == "shift" and d.direction == "lower" and d.samples == 2 and d.stopped and d.p_value < 1e-4
    assert d.estimate is not None and d.low is not None and d.high is not None and d.low < d.estimate < d.high < 0


def test_a_candidate_more_likely_than_the_baseline_is_a_change_too() -> None:
    """A sampler that ignores temperature writes the baseline's most likely text: higher likelihood, less varied."""
    d = decide_shift(ROUNDS, 0.5, _cases(np.random.default_rng(2), 16, +1.0))
    assert d.outcome == "shift" and d.direction == "higher"


def test_a_faithful_candidate_stops_for_no_shift_and_false_alarms_stay_below_alpha() -> None:
    rng = np.random.default_rng(3)
    outcomes = []
    for _ in range(300):
        cases = _cases(rng, 16, 0.0, samples=10)
        for n in ROUNDS.looks:
            d = decide_shift(ROUNDS, 0.5, [ShiftCase(c.case_id, c.route, c.baseline[:n], c.candidate[:n]) for c in cases])
            if d.outcome != "undecided":
                break
        outcomes.append(d.outcome)
    assert outcomes.count("shift") / len(outcomes) <= 0.05
    assert outcomes.count("no_shift") / len(outcomes) >= 0.9, "a faithful candidate is decided, not left to spend the budget"


def test_divergences_are_near_ties_decisive_or_unclear_by_the_baseline_models_own_margins() -> None:
    rule = DivergenceRule(near_tie_nats=0.5, decisive_nats=4.6)

    def facts(margin: float | None, rank: int | None, beyond: bool = False) -> DivergenceFacts:
        return DivergenceFacts("c", "cat", "r", 0, 3, "x", -1.0, rank, "y", -0.9, margin, 0.01, beyond)

    assert classify_divergence(facts(0.011, 2), rule) == "near_tie"
    assert classify_divergence(facts(2.0, 3), rule) == "unclear"
    assert classify_divergence(facts(7.0, 150), rule) == "decisive"
    assert classify_divergence(facts(0.3, None, beyond=True), rule) == "decisive", "below the listed top-k is never a near tie"


def _divergent(case_id: str, margin: float, route: str = "r") -> DivergenceFacts:
    return DivergenceFacts(case_id, "cat", route, 0, 2, "x", -margin - 0.1, 2 if margin < 1 else 40, "y", -0.1, margin, 0.5, False)


def test_a_decisive_divergence_fails_its_route_with_no_check_flipped_and_a_near_tie_explains_a_flip() -> None:
    """The demo's corrupted greedy JSON: both sides failed the parse, no check flipped, yet the answer is one the
    baseline would not write. A flip at a near tie of the baseline model is numerics, whatever the floor."""
    greedy = [CaseOutcome(f"g{i}", "r", (True,), (True,)) for i in range(10)]
    greedy.append(CaseOutcome("tie", "r", (True,), (False,)))  # an exact flip, at a near tie
    outcomes = {"cat": {"exact": greedy}}
    only_tie = quality_evidence(outcomes, divergences=[_divergent("tie", 0.02)])
    d = decide_quality(only_tie, {"r": 0})
    assert d.routes["r"].passed is True and d.categories["cat"].verdict == "pass"
    assert d.categories["cat"].checks["exact"].tolerated == ("tie",) and "near tie" in d.routes["r"].message
    broken = quality_evidence(outcomes, divergences=[_divergent("tie", 0.02), _divergent("g3", 9.0)])
    d = decide_quality(broken, {"r": 0})
    assert d.routes["r"].passed is False and d.routes["r"].observed == 1
    assert d.categories["cat"].checks[DIVERGENCE_CHECK].regressions == ("g3",)
    assert d.categories["cat"].checks[DIVERGENCE_CHECK].tolerated == ()
    assert d.categories["cat"].verdict == "fail" and "would not write" in d.categories["cat"].reason
    report_only = quality_evidence(
        outcomes, divergences=[_divergent("tie", 0.02), _divergent("g3", 9.0)], divergence_rule=DivergenceRule(report_only=True)
    )
    d = decide_quality(report_only, {"r": 0})
    assert d.routes["r"].passed is True and d.categories["cat"].checks[DIVERGENCE_CHECK].tolerated == ("g3",)


def test_a_regression_whose_divergence_is_decisive_is_never_tolerated_as_noise() -> None:
    """A floor whose measured noise would explain one flip does not explain a flip at a token the baseline would not write."""
    noisy = [CaseOutcome(f"n{i}", "r", (True,), (True,), (False,), ((True, False),)) for i in range(6)]
    stable = [CaseOutcome(f"s{i}", "r", (True,), (True,), (True,), ((True, True),)) for i in range(6)]
    broke = [CaseOutcome("broke", "r", (True,), (False,), (True,), ((True, True),))]
    outcomes = {"cat": {"exact": noisy + stable + broke}}
    plain = decide_quality(quality_evidence(outcomes, noise_source="baseline_again"), {"r": 0})
    assert plain.routes["r"].passed is True, "six disagreements in twelve pairs explain one flip"
    decisive = decide_quality(quality_evidence(outcomes, noise_source="baseline_again", divergences=[_divergent("broke", 8.0)]), {"r": 0})
    assert decisive.routes["r"].passed is False and decisive.categories["cat"].checks["exact"].tolerated == ()


def test_a_likelihood_shift_fails_a_category_whose_checks_pass_and_stops_its_rounds() -> None:
    rng = np.random.default_rng(4)
    sampled = [CaseOutcome(f"c{i}", "r", (False, False), (False, False), sampled=True, b_reps=(0, 1), c_reps=(0, 1)) for i in range(16)]
    outcomes = {"qa": {"contains": sampled}}
    ev = quality_evidence(outcomes, design=ROUNDS, likelihood={"qa": _cases(rng, 16, -3.3)})
    d = decide_quality(ev, {"r": 0})
    assert d.categories["qa"].verdict == "fail" and d.categories["qa"].likelihood is not None
    assert d.categories["qa"].likelihood.outcome == "drop" and "would rarely write" in d.categories["qa"].reason
    assert d.routes["r"].passed is False and "changed under the baseline model" in d.routes["r"].message
    assert "qa" not in d.undecided, "a changed distribution fails the category at once: no more rounds for it"
    assert ev.shifts["qa"].p_value_holm is not None


def test_no_shift_never_passes_check_cells_still_undecided() -> None:
    rng = np.random.default_rng(5)
    few = [
        CaseOutcome(f"c{i}", "r", (True, False), (False, True), sampled=True, b_reps=(0, 1), c_reps=(0, 1)) for i in range(4)
    ]  # four cases that flip both ways: the pass-rate test cannot tell
    ev = quality_evidence({"qa": {"contains": few}}, design=ROUNDS, likelihood={"qa": _cases(rng, 40, 0.0, samples=2)})
    d = decide_quality(ev, {"r": 0})
    assert ev.shifts["qa"].decision.outcome == "no_shift"
    assert d.categories["qa"].verdict == "inconclusive" and d.routes["r"].passed is None
    assert d.undecided["qa"] == ("contains",)


def test_the_likelihood_cells_join_the_holm_family_of_the_sampled_cells() -> None:
    rng = np.random.default_rng(6)
    drop = [
        CaseOutcome(f"c{i}", "r", (True, True), (False, False) if i % 3 == 0 else (True, True), sampled=True, b_reps=(0, 1), c_reps=(0, 1))
        for i in range(30)
    ]
    alone = quality_evidence({"qa": {"contains": drop}}, design=Design((2,)))
    joined = quality_evidence({"qa": {"contains": drop}}, design=Design((2,)), likelihood={"qa": _cases(rng, 16, 0.0)})
    p_alone = alone.cells["qa"]["contains"].sampled
    p_joined = joined.cells["qa"]["contains"].sampled
    assert p_alone is not None and p_joined is not None and p_joined.p_value_holm is not None and p_alone.p_value_holm is not None
    assert p_joined.p_value_holm >= p_alone.p_value_holm, "a second test in the family: Holm multiplies the smaller p by two"


# ------------------------------------------------------------------ through `qualitycheck run`, the likelihood stage on the test server
LP = {"The": -0.1, " cat": -0.5, " dog": -0.7, " sat.": -0.4, " ran.": -0.6, " slept.": -0.9}
"""The toy baseline model: these pieces are its likely words; any other gets -9 nats."""


def _sampler(pieces: list[list[str]], seed: int) -> Any:
    rng = random.Random(seed)
    return lambda body: "".join(rng.choice(options) for options in pieces)


GOOD = [["The"], [" cat", " dog"], [" sat.", " ran.", " slept."]]
BROKEN = [["The"], [" cat", " zq"], [" xx.", " ran.", " vv."]]


def test_a_run_fails_a_sampled_category_its_checks_cannot_see_on_the_likelihood_evidence(tmp_path: Path) -> None:
    """The candidate writes words the baseline model finds unlikely; the check (an answer containing '42') never passes on
    either side, so the pass rates cannot tell. The likelihood cell fails the category, with the words."""
    cases = qa_cases(16, "chat", params={"temperature": 0.8}, checks={"contains": "42"})
    suite = write_suite(tmp_path / "s.jsonl", cases)
    from qualitycheck.testserver import TestServer

    with (
        TestServer(default=_sampler(GOOD, 1), token_logprobs=LP) as b,
        TestServer(default=_sampler(BROKEN, 2), token_logprobs=LP) as c,
    ):
        code = main(run_argv(b.url, c.url, suite, tmp_path / "run"))
    s = json.loads((tmp_path / "run" / "summary.json").read_text())
    cell = s["categories"]["chat"]["likelihood"]
    assert code == 1 and s["categories"]["chat"]["verdict"] == "fail"
    assert cell["decision"] == "shift" and cell["direction"] == "lower" and cell["samples_at_decision"] == 2
    assert "would rarely write" in cell["meaning"] and cell["largest_shifts"]
    assert s["categories"]["chat"]["checks"]["contains"]["sampled"]["decision"] != "drop", "the check saw nothing"
    assert s["likelihood"]["evaluated"] is True and s["likelihood"]["prefilled_tokens"] > 0
    assert "likelihood" in (s["signoff"] or "")


def test_the_baseline_as_its_own_candidate_is_not_failed(tmp_path: Path) -> None:
    cases = qa_cases(16, "chat", params={"temperature": 0.8}, checks={"contains": "42"})
    suite = write_suite(tmp_path / "s.jsonl", cases)
    from qualitycheck.testserver import TestServer

    with TestServer(default=_sampler(GOOD, 1), token_logprobs=LP) as b, TestServer(default=_sampler(GOOD, 2), token_logprobs=LP) as c:
        main(run_argv(b.url, c.url, suite, tmp_path / "run"))
    s = json.loads((tmp_path / "run" / "summary.json").read_text())
    cell = s["categories"]["chat"]["likelihood"]
    assert cell["decision"] != "shift" and s["categories"]["chat"]["verdict"] != "fail"


def test_a_greedy_answer_that_left_the_baseline_at_an_unlikely_token_fails_its_route_without_a_check(tmp_path: Path) -> None:
    """No check at all on the case; the candidate's answer diverges at a word the baseline model gives -9 nats."""
    suite = write_suite(tmp_path / "s.jsonl", qa_cases(4, "fmt"))
    from qualitycheck.testserver import TestServer

    with (
        TestServer(default="The cat sat.", token_logprobs=LP) as b,
        TestServer(default="The cat sat.", answers={"fmt 2?": "The zq sat."}, token_logprobs=LP) as c,
    ):
        code = main(run_argv(b.url, c.url, suite, tmp_path / "run"))
    s = json.loads((tmp_path / "run" / "summary.json").read_text())
    cat = s["categories"]["fmt"]
    assert code == 1 and cat["verdict"] == "fail" and cat["checks"][DIVERGENCE_CHECK]["regressions"] == ["fmt-2"]
    (div,) = cat["divergences"]
    assert div["kind"] == "decisive" and div["candidate_token"] and div["baseline_token"] == " cat"  # the scorer decodes its own pieces
    assert div["candidate_probability"] == pytest.approx(np.exp(-9.0)) and div["margin"] > 4.6
    quality = next(g for g in s["guardrails"] if g["name"] == "max_quality_regression_cases" and g["route"] == "fmt")
    assert quality["passed"] is False and "would not write" in quality["message"]


def test_the_likelihood_names_are_known_to_the_decision() -> None:
    assert LIKELIHOOD_CHECK == "likelihood" and DIVERGENCE_CHECK == "decisive_divergence"


def test_the_calibration_deals_each_cases_samples_between_the_sides_and_a_broken_candidates_mix_stays_below_alpha() -> None:
    """bench/likelihood_calibration.py's null: each case keeps its values and each side its count and rounds. Dealt
    from a broken candidate's run (half of each case's samples 3.3 nats per token less likely: the most skewed
    spread measured), the samples make a null the cell must not alarm on more often than its alpha."""
    from bench.likelihood_calibration import relabelled

    cases = _cases(np.random.default_rng(3), 16, shift=-3.3, samples=6)
    deal = random.Random(0)
    again = relabelled(cases[0], deal)
    pooled = sorted(v for _, v in cases[0].baseline + cases[0].candidate)
    assert sorted(v for _, v in again.baseline + again.candidate) == pooled
    assert [r for r, _ in again.baseline] == [r for r, _ in cases[0].baseline] == list(range(6))
    assert [r for r, _ in again.candidate] == [r for r, _ in cases[0].candidate]
    assert decide_shift(ROUNDS, 0.5, cases).outcome == "shift", "as stored, the broken candidate is found"
    alarms = sum(decide_shift(ROUNDS, 0.5, [relabelled(c, deal) for c in cases]).outcome == "shift" for _ in range(400))
    assert alarms / 400 <= 0.05, alarms
