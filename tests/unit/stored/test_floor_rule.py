"""A noise floor the run needed and could not measure weighs nothing: what it would have weighed is undecided, never passed."""

from __future__ import annotations

from qualitycheck.verdict._decision import decide_quality, quality_evidence
from qualitycheck.verdict._likelihood import DivergenceFacts
from qualitycheck.verdict._outcomes import CaseOutcome

MISSING = "the baseline's answers are stored and nothing asked it again"


def _outcomes(regressions: int, cases: int = 30) -> dict[str, dict[str, list[CaseOutcome]]]:
    outs = [CaseOutcome(f"c{i}", "r", (True,), (i >= regressions,)) for i in range(cases)]
    return {"cat": {"exact": outs}}


def _decisive(case_id: str) -> DivergenceFacts:
    """A greedy divergence at a token the baseline model gives 9 nats less than its first choice."""
    return DivergenceFacts(case_id, "cat", "r", 0, 2, "x", -9.1, 40, "y", -0.1, 9.0, 0.5, False)


def test_regressions_no_floor_could_weigh_leave_the_route_undecided_where_no_floor_would_fail_it() -> None:
    outcomes = _outcomes(5)
    unmeasured = decide_quality(quality_evidence(outcomes), {"r": 0})
    assert unmeasured.routes["r"].passed is False, "with no floor asked for (--no-noise-floor) every flip counts"
    missing = decide_quality(quality_evidence(outcomes, floor_missing=MISSING), {"r": 0})
    route, category = missing.routes["r"], missing.categories["cat"]
    assert route.passed is None and route.observed is None and route.greedy == "no_floor"
    assert "no noise floor could weigh" in route.message and MISSING in route.message
    assert category.verdict == "inconclusive" and MISSING in category.reason
    assert category.checks["exact"].tolerated == (), "an undecided route tolerates nothing"
    assert category.would_decide is not None and "--baseline URL with --baseline-run" in category.would_decide


def test_a_route_that_needs_no_floor_still_passes_and_a_decisive_divergence_still_fails() -> None:
    within = decide_quality(quality_evidence(_outcomes(1), floor_missing=MISSING), {"r": 1})
    assert within.routes["r"].passed is True, "one regression within a threshold of one needs no floor to weigh it"
    clean = decide_quality(quality_evidence(_outcomes(0), floor_missing=MISSING), {"r": 0})
    assert clean.routes["r"].passed is True and clean.categories["cat"].verdict == "pass"
    decisive = decide_quality(quality_evidence(_outcomes(1), floor_missing=MISSING, divergences=[_decisive("c0")]), {"r": 0})
    assert decisive.routes["r"].passed is False, "no floor explains a token the baseline would not write"
    assert decisive.categories["cat"].verdict == "fail"


def test_the_canarys_window_keeps_the_missing_floor() -> None:
    ev = quality_evidence(_outcomes(5), floor_missing=MISSING)
    window = ev.within({"c0", "c1", "c2"}, {"r"})
    assert window.floor_missing == MISSING
    assert decide_quality(window, {"r": 0}).routes["r"].passed is None
