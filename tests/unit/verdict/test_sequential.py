"""The distribution test of sampled cases: the stratified statistic, the group-sequential bounds, the decisions."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from qualitycheck.core._config import RunOptions
from qualitycheck.verdict._decision import sampled_outcome
from qualitycheck.verdict._floor import pooled_floor, supported_allowance
from qualitycheck.verdict._outcomes import CaseOutcome
from qualitycheck.verdict._sequential import CONTINUITY, CaseCounts, Design, decide_cell, design_for, look_statistic
from qualitycheck.verdict._stats import check_stats, quality_stats, sampled_stats


def test_with_one_sample_per_side_the_statistic_is_mcnemars():
    """A case with one sample per side is a 2×2 table: the stratified score over cases is McNemar's z."""
    cases = [CaseCounts(f"d{i}", 1, 1, 0, 1) for i in range(7)] + [CaseCounts(f"u{i}", 0, 1, 1, 1) for i in range(2)]
    cases += [CaseCounts(f"s{i}", 1, 1, 1, 1) for i in range(20)]
    look = look_statistic(cases)
    assert look.z == pytest.approx((7 - 2) / math.sqrt(7 + 2))
    assert look.estimate == pytest.approx((7 - 2) / 29), "the Mantel–Haenszel drop is the mean per-case drop with equal samples"


def test_the_stratified_variance_is_the_hypergeometric_one():
    c = CaseCounts("a", 3, 4, 1, 4)  # 4 of 8 samples passed
    look = look_statistic([c])
    assert look.u == pytest.approx(3 - 4 * 4 / 8)
    assert look.v == pytest.approx(sps.hypergeom(8, 4, 4).var())


def test_a_single_look_is_the_fixed_sample_one_sided_test():
    design = Design((8,))
    cases = [CaseCounts(f"c{i}", 6, 8, 4, 8) for i in range(5)] + [CaseCounts(f"k{i}", 5, 8, 5, 8) for i in range(5)]
    d = decide_cell(design, [cases])
    assert d.bound == pytest.approx(sps.norm.ppf(0.95), abs=1e-6)
    look = look_statistic(cases)
    z = (look.u - CONTINUITY) / math.sqrt(look.v)
    assert d.z == pytest.approx(z) and d.p_value == pytest.approx(sps.norm.sf(z), abs=1e-6)


def test_early_looks_spend_little_alpha_so_the_last_bound_stays_near_a_single_tests():
    from qualitycheck.verdict._sequential import _bounds_at

    fractions = [0.2, 0.4, 0.6, 0.8, 1.0]
    past: list[tuple[float, float]] = []
    for k in range(5):  # no futility: the efficacy bounds of alpha-spending alone
        c, f, spent = _bounds_at(fractions, past, k, 0.05, 0.0, 0.0)
        past.append((f, c))
    bounds = [c for _, c in past]
    assert bounds == sorted(bounds, reverse=True), "the critical value falls look by look"
    assert bounds[0] > 3.0 and bounds[-1] < 1.75 and spent == pytest.approx(0.05 * 0.8**3)


def test_an_obvious_drop_decides_at_the_first_look_and_identical_samples_rule_a_drop_out():
    design = Design.rounds(10, 2)
    broken = [CaseCounts(f"c{i}", 2, 2, 0, 2) for i in range(30)]
    d = decide_cell(design, [broken])
    assert d.outcome == "drop" and d.stopped and d.samples == 2 and d.p_value < 1e-6
    looks = [[CaseCounts(f"c{i}", n, n, n, n) for i in range(30)] for n in design.looks]
    d = decide_cell(design, looks)
    assert d.outcome == "no_drop" and d.stopped, "every sample passing on both sides rules a 10-point drop out before the budget"
    few = [CaseCounts(f"c{i}", 1, 2, 1, 2) for i in range(3)]
    assert decide_cell(design, [few]).outcome == "undecided", "three coin flips decide nothing"


def test_a_cell_too_small_to_detect_the_drop_ends_undecided_at_the_budget():
    design = Design((2, 4))
    rng = np.random.default_rng(3)
    cases = [CaseCounts(f"c{i}", int(rng.integers(1, 4)), 4, int(rng.integers(1, 4)), 4) for i in range(4)]
    d = decide_cell(design, [[CaseCounts(c.case_id, c.b_pass // 2, 2, c.c_pass // 2, 2) for c in cases], cases])
    assert d.outcome == "undecided" and not d.stopped and d.mde is not None and d.mde > design.drop


def test_at_the_last_look_where_the_bounds_meet_every_cell_is_decided():
    """The efficacy bound reads the continuity-corrected statistic: where the futility bound meets it, z between the two is no drop."""
    table = {(0, 0): 38, (0, 1): 53, (0, 2): 15, (1, 0): 57, (1, 1): 80, (1, 2): 36, (2, 0): 19, (2, 1): 55, (2, 2): 47}
    cases = [CaseCounts(f"c{k}-{i}", b, 2, c, 2) for k, ((b, c), n) in enumerate(table.items()) for i in range(n)]
    stat = look_statistic(cases)
    d = decide_cell(Design((2,)), [cases])
    assert d.futility == d.bound and stat.z_corrected < d.bound <= stat.z, "the case between the two statistics"
    assert d.outcome == "no_drop"


def test_a_decision_is_kept_once_a_bound_was_crossed():
    """Later samples (taken for another check of the category) never undo an earlier look's decision."""
    design = Design.rounds(6, 2)
    first = [CaseCounts(f"c{i}", 2, 2, 0, 2) for i in range(20)]
    later = [CaseCounts(f"c{i}", 3, 4, 3, 4) for i in range(20)]
    d = decide_cell(design, [first, later])
    assert d.outcome == "drop" and d.look == 0


def test_a_margin_decides_non_inferiority_instead_of_no_drop():
    design = Design.rounds(8, 2, margin=0.2)
    # five of forty cases fail one candidate sample: a drop of a few points, well within a 20-point margin
    looks = [[CaseCounts(f"c{i}", n, n, n - (i < 5), n) for i in range(40)] for n in (2, 4, 6, 8)]
    d = decide_cell(design, looks)
    assert d.outcome == "no_drop" and d.high is not None and d.high < 0.2
    worse = [[CaseCounts(f"c{i}", n, n, 0, n) for i in range(40)] for n in (2, 4)]
    assert decide_cell(design, worse).outcome == "drop"


def test_the_run_options_give_the_looks():
    assert design_for(RunOptions()).looks == (2, 4, 6, 8, 10)
    assert design_for(RunOptions(max_samples_per_case=5, sample_round=2)).looks == (2, 4, 5)
    assert design_for(RunOptions(repeats=6)).looks == (6,), "--repeats fixes the number: one look"
    assert design_for(RunOptions(max_samples_per_case=1)).looks == (1,)


def _sampled(cid: str, b: tuple[bool, ...], c: tuple[bool, ...], route: str = "r") -> CaseOutcome:
    reps = tuple(range(len(b)))
    return CaseOutcome(cid, route, b, c, (), (), True, reps, reps)


def test_flaky_cases_never_hide_a_category_drop():
    """Every baseline disagrees with itself at temperature 0.9 (all flaky), yet the category's pass rate drop is found."""
    outs = {"json": {"json_parse": [_sampled(f"c{i}", (True, False, True, True), (False, False, False, True)) for i in range(30)]}}
    q = quality_stats(outs, design=Design((2, 4)))
    cell = q.cells["json"]["json_parse"]
    assert len(cell.flaky) == 30 and cell.regressions == []
    assert cell.sampled is not None and sampled_outcome(cell.sampled) == "drop"
    assert cell.sampled.baseline_pass_rate == 0.75 and cell.sampled.candidate_pass_rate == 0.25


def test_holm_across_sampled_cells_can_leave_a_lone_drop_undecided():
    weak = [_sampled(f"w{i}", (True, True, False, True), (True, False, False, True)) for i in range(12)]
    weak += [_sampled(f"x{i}", (True, True, True, True), (True, True, True, True)) for i in range(28)]
    alone = quality_stats({"a": {"regex": weak}}, design=Design((4,)))
    p = alone.cells["a"]["regex"].sampled
    assert p is not None and p.decision.outcome == "drop" and sampled_outcome(p) == "drop"
    many = {f"cat{k}": {"regex": [_sampled(f"{k}-{i}", (True,) * 4, (True,) * 4) for i in range(40)]} for k in range(8)}
    many["a"] = {"regex": weak}
    crowd = quality_stats(many, design=Design((4,)))
    sp = crowd.cells["a"]["regex"].sampled
    assert sp is not None and sp.decision.outcome == "drop"
    assert sp.p_value_holm is not None and sp.p_value_holm > sp.decision.p_value
    assert sp.p_value_holm >= 0.05, "nine cells: Holm multiplies the lone cell's p beyond alpha"
    assert sampled_outcome(sp) == "undecided", "a drop multiplicity does not support is not a finding, nor a pass"


def test_sampled_cases_stay_out_of_the_greedy_floor():
    greedy = [CaseOutcome(f"g{i}", "r", (True,), (True,), (True,), ((True, True),)) for i in range(10)]
    noisy = [_sampled(f"s{i}", (True, False), (False, True)) for i in range(10)]
    floor = pooled_floor({"a": {"exact": greedy}, "b": {"regex": noisy}}, "baseline_again")
    assert floor.pairs == 10 and floor.disagreements == 0


def test_counts_follow_the_repeat_numbers_of_each_outcome():
    """An errored sample leaves a gap: a look counts the samples whose repeat falls before it."""
    o = CaseOutcome("c", "r", (True, False, True), (True, True), (), (), True, (0, 1, 3), (0, 2))
    assert o.counts(2) == CaseCounts("c", 1, 2, 1, 1)
    assert o.counts(4) == CaseCounts("c", 2, 3, 2, 2)
    sp = sampled_stats([o], Design((2, 4)))
    assert sp is not None and sp.samples == 2.5


def test_a_floor_that_never_disagreed_supports_no_regression():
    from qualitycheck.verdict._stats import NoiseFloor, regression_allowance

    small = NoiseFloor("baseline_again", pairs=4, disagreements=0)
    assert regression_allowance(2, small) >= 1, "four pairs cannot rule out noise"
    assert supported_allowance(2, small) == 0, "but noise never showed, so it explains nothing"
    noisy = NoiseFloor("control", pairs=300, disagreements=12)
    assert supported_allowance(250, noisy) >= 5


def test_a_margin_still_judges_the_greedy_cases_of_a_cell_that_also_has_sampled_ones():
    """Twelve greedy cases cannot show non-inferiority to a 1-point margin; one sampled case beside them must not hide that."""
    greedy = [CaseOutcome(f"g{i}", "r", (True,), (i != 0,), (), ()) for i in range(12)]
    alone = check_stats("c", "regex", greedy, margin=0.01)
    mixed = check_stats("c", "regex", [*greedy, _sampled("s0", (True, False), (True, True))], margin=0.01)
    assert alone.non_inferiority == "inconclusive"
    assert mixed.non_inferiority == "inconclusive" and mixed.sampled is not None


def test_a_pair_of_the_floor_disagrees_when_any_of_its_checks_does():
    """Two A/A pairs of one case: the first differs on one check, the second on another; both pairs disagree."""
    a = CaseOutcome("g", "r", (True, True), (True, True), (False, True), ((True, False), (True, True)))
    b = CaseOutcome("g", "r", (True, True), (True, True), (True, False), ((True, True), (True, False)))
    floor = pooled_floor({"c": {"a": [a], "b": [b]}})
    assert floor.pairs == 2 and floor.disagreements == 2
