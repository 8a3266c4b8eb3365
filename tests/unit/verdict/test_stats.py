from __future__ import annotations

import pytest

from bench._simulate import simulate_gate
from qualitycheck.verdict._floor import noise_floor, regression_allowance
from qualitycheck.verdict._outcomes import CaseOutcome
from qualitycheck.verdict._stats import classify_cases
from qualitycheck.verdict._tests import holm, minimum_detectable_effect, non_inferiority, paired_bootstrap_ci, paired_p_value


def outcomes(pairs, control=None):
    out = []
    for i, (b, c) in enumerate(pairs):
        k = () if control is None else (control[i],)
        kp = () if control is None else ((b, control[i]),)
        out.append(CaseOutcome(f"c{i}", "r", (b,), (c,), k, kp))
    return out


def test_mcnemar_exact_on_discordant_pairs():
    # 6 regressions, 0 improvements among 100: exact two-sided p = 2 * 0.5**6
    pairs = [(True, False)] * 6 + [(True, True)] * 94
    assert paired_p_value(outcomes(pairs)) == pytest.approx(2 * 0.5**6)
    assert paired_p_value(outcomes([(True, True)] * 10)) == 1.0
    assert paired_p_value([]) is None


def test_sign_test_on_per_case_rates_with_repeats():
    outs = [CaseOutcome(f"c{i}", "r", (True, True, True), (True, False, False)) for i in range(5)]
    outs += [CaseOutcome("u", "r", (False, False, True), (True, True, True))]
    # 5 cases went down, 1 up: exact binomial two-sided
    from scipy.stats import binomtest

    assert paired_p_value(outs) == pytest.approx(binomtest(5, 6, 0.5).pvalue)


def test_bootstrap_ci_is_seeded_and_covers_the_delta():
    b = [1.0] * 80 + [0.0] * 20
    c = [1.0] * 70 + [0.0] * 30
    ci1 = paired_bootstrap_ci(b, c, seed=7)
    assert ci1 == paired_bootstrap_ci(b, c, seed=7)
    assert ci1[0] < -0.1 < ci1[1] and ci1[1] < 0
    assert paired_bootstrap_ci([1, 1], [1, 1]) == (0.0, 0.0)


def test_non_inferiority_against_a_margin():
    assert non_inferiority((-0.01, 0.02), 0.02) == "non_inferior"
    assert non_inferiority((-0.09, -0.05), 0.02) == "inferior"
    assert non_inferiority((-0.05, 0.01), 0.02) == "inconclusive"
    assert non_inferiority((-0.05, 0.01), None) is None


def test_mde_shrinks_with_n_and_grows_with_noise():
    assert minimum_detectable_effect(300, 0.0) < minimum_detectable_effect(100, 0.0)
    assert minimum_detectable_effect(300, 0.05) > minimum_detectable_effect(300, 0.0)
    assert minimum_detectable_effect(1, 0.0) is None


def test_holm_keeps_none_and_adjusts_upward():
    adj = holm([0.01, None, 0.04, 0.03])
    assert adj[1] is None and adj[0] == pytest.approx(0.03) and all(a >= p for a, p in zip([adj[0], adj[2], adj[3]], [0.01, 0.04, 0.03]))


def test_flaky_cases_are_kept_apart_and_the_floor_measured_by_control():
    pairs = [(True, False), (True, False), (True, True), (False, False)]
    control = [True, False, True, False]  # c1: baseline pass, control fail → flaky
    cls = classify_cases(outcomes(pairs, control))
    assert cls.regressions == ["c0"] and cls.flaky == ["c1"] and cls.flaky_regressions == ["c1"]
    assert cls.noise.measured_by == "control" and cls.noise.flip_rate == pytest.approx(0.25)


def test_floor_from_repeats_and_none_without_either():
    outs = [CaseOutcome("a", "r", (True, False, True), (True, True, True)), CaseOutcome("b", "r", (True,) * 3, (True,) * 3)]
    f = noise_floor(outs)
    assert f.measured_by == "repeats" and f.flaky == ("a",) and f.pairs == 6 and f.disagreements == 2
    assert noise_floor(outcomes([(True, False)])).measured_by is None


def test_allowance_is_zero_without_floor_and_grows_with_noise():
    none = noise_floor(outcomes([(True, True)] * 10))
    assert regression_allowance(100, none) == 0
    quiet = noise_floor(outcomes([(True, True)] * 300, [True] * 300))
    noisy = noise_floor(outcomes([(True, True)] * 300, [True] * 285 + [False] * 15))
    assert regression_allowance(240, quiet) <= regression_allowance(240, noisy)
    assert regression_allowance(240, noisy) >= 3


def test_simulation_false_alarms_at_most_alpha_and_detects_a_2pp_regression():
    """The gate's own decision on generated paired outcomes (300 cases, 1% A/A disagreement)."""
    aa = simulate_gate(n=300, noise=0.01, drop=0.0, trials=200, seed=11)
    power = simulate_gate(n=300, noise=0.01, drop=0.02, trials=200, seed=12)
    assert aa <= 0.05 + 0.03  # nominal alpha, with room for 200 trials of sampling error
    assert power >= 0.6
    assert simulate_gate(n=300, noise=0.0, drop=0.02, trials=50, seed=13) == 1.0


def test_the_default_floor_false_alarms_at_most_alpha_up_to_2pct_disagreement():
    """Asking the baseline again only where the candidate diverged keeps false alarms at the nominal level.

    Without any floor the same data false-alarms most of the time; the power to see a 2-point
    regression stays that of a full control.
    """
    for noise in (0.01, 0.02):
        fa = simulate_gate(n=300, noise=noise, drop=0.0, trials=200, seed=21, design="baseline_again")
        assert fa <= 0.05 + 0.03, (noise, fa)
        fa_wording = simulate_gate(n=300, noise=noise, drop=0.0, trials=200, seed=22, design="baseline_again", text_noise=0.3)
        assert fa_wording <= 0.05 + 0.03, (noise, fa_wording)
    assert simulate_gate(n=300, noise=0.01, drop=0.0, trials=100, seed=23, design="none") > 0.5
    assert simulate_gate(n=300, noise=0.01, drop=0.02, trials=200, seed=24, design="baseline_again") >= 0.6
    assert simulate_gate(n=300, noise=0.0, drop=0.02, trials=50, seed=25, design="baseline_again") == 1.0


def test_baseline_again_weighs_regressions_against_the_cases_asked_again():
    # 10 cases asked again (their candidate diverged): 5 noisy ones disagree with themselves, 1 regressed
    asked = [CaseOutcome(f"n{i}", "r", (True,), (True,), (False,), ((True, False),)) for i in range(5)]
    asked += [CaseOutcome(f"s{i}", "r", (True,), (True,), (True,), ((True, True),)) for i in range(4)]
    asked.append(CaseOutcome("broke", "r", (True,), (False,), (True,), ((True, True),)))
    quiet = [CaseOutcome(f"q{i}", "r", (True,), (True,)) for i in range(200)]  # identical answers: not asked
    cls = classify_cases(asked + quiet, noise_source="baseline_again")
    assert cls.noise.measured_by == "baseline_again" and cls.noise.pairs == 10 and cls.noise.disagreements == 5
    assert cls.regressions == ["broke"]
    assert cls.allowance >= 1  # five A/A disagreements among ten cases explain one regression among them
    assert classify_cases(asked + quiet).allowance > cls.allowance  # all 210 cases as eligible would explain more


def test_holm_gives_statsmodels_own_floats_without_importing_it():
    import numpy as np
    from statsmodels.stats.multitest import multipletests

    rng = np.random.default_rng(5)
    for n in (1, 2, 7, 40):
        p = rng.random(n).round(3).tolist()  # rounded: ties, as identical cells produce
        p[: n // 3] = [1.0] * (n // 3)
        assert holm(p) == [float(x) for x in multipletests(p, alpha=0.05, method="holm")[1]]
