"""The paired tests of one (category, check): the exact sign test, the bootstrap CI, the MDE, Holm, non-inferiority.

Every number here is paired: the same case answered by the baseline and the
candidate. Pass rates are averaged per case first (a case with repeats counts
once, with its pass rate), so a sampled case cannot outvote a greedy one.

- p-value: the exact two-sided sign test on the cases whose pass rate went
  down against those whose rate went up (with one repeat, McNemar's exact
  test: its discordant cells are the signs), computed in exact integer
  arithmetic, so no library is imported for it
- delta and its CI: paired bootstrap over cases (scipy, seeded → reproducible)
- non-inferiority: the CI against a margin per check
- minimum detectable effect: paired t-test power (statsmodels) for this N
- Holm across every (category, check) cell (statsmodels' arithmetic, in numpy)

scipy and statsmodels are imported by the computations that need them, and
their results are kept in the run's memo (`verdict._memo`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from qualitycheck.verdict._memo import array_key, remembered
from qualitycheck.verdict._outcomes import CaseOutcome

__all__ = [
    "ALPHA",
    "POWER",
    "divergence_upper",
    "holm",
    "minimum_detectable_effect",
    "non_inferiority",
    "paired_bootstrap_ci",
    "paired_p_value",
    "sign_test_p",
]

ALPHA = 0.05
POWER = 0.8
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_BATCH_VALUES = 250_000
"""Resampled values held at once by the bootstrap (2 MB of float64; scipy keeps a few such arrays)."""


def sign_test_p(down: int, up: int) -> float:
    """The exact two-sided sign test of `down` against `up` signs (ties left out): 1.0 without any.

    The one sign test of the verdict: McNemar's exact test (its discordant
    cells), the sign test of per-case pass-rate changes, and the reviewers'
    preferences all call it. The binomial tail is summed in integers and
    divided once, so the value is the exact one correctly rounded; it agrees
    with statsmodels' and scipy's to about 1e-13.
    """
    n = down + up
    if n == 0:
        return 1.0

    def compute() -> float:
        k = min(down, up)
        term = tail = 1  # C(n, 0)
        for i in range(k):
            term = term * (n - i) // (i + 1)
            tail += term
        return min(1.0, (2 * tail) / (1 << n))

    return remembered("sign", (down, up), compute)


def paired_bootstrap_ci(
    baseline: Sequence[float],
    candidate: Sequence[float],
    *,
    seed: int = 0,
    level: float = 0.95,
    resamples: int = BOOTSTRAP_RESAMPLES,
) -> tuple[float, float]:
    """Percentile CI of mean(candidate) - mean(baseline), resampling whole cases."""
    b = np.asarray(baseline, dtype=float)
    c = np.asarray(candidate, dtype=float)
    d = c - b
    if len(d) == 0:
        return (float("nan"), float("nan"))
    if np.all(d == d[0]):
        return (float(d[0]), float(d[0]))
    # resampled in batches of at most ~BOOTSTRAP_BATCH_VALUES values: 2000 resamples of 100,000 cases
    # at once would take 1.6 GB. The generator draws the same indices however they are batched.
    batch = max(1, min(resamples, BOOTSTRAP_BATCH_VALUES // len(d)))

    def compute() -> list[float]:
        from scipy import stats as sps

        res = sps.bootstrap(
            (d,),
            np.mean,
            n_resamples=resamples,
            confidence_level=level,
            method="percentile",
            rng=np.random.default_rng(seed),
            vectorized=True,
            batch=batch,
        )
        return [float(res.confidence_interval.low), float(res.confidence_interval.high)]

    low, high = remembered("bootstrap", (array_key(d), seed, level, resamples), compute)
    return (low, high)


def paired_p_value(outcomes: Sequence[CaseOutcome]) -> float | None:
    """Two-sided exact test of 'no change' on the discordant cases: the sign test of cases whose pass rate went down vs up.

    With one repeat it is McNemar's exact test on the 2×2 table (its discordant cells are the signs).
    """
    if not outcomes:
        return None
    down = sum(o.c_rate < o.b_rate for o in outcomes)
    up = sum(o.c_rate > o.b_rate for o in outcomes)
    return sign_test_p(down, up)


def minimum_detectable_effect(n: int, discordance: float, alpha: float = ALPHA, power: float = POWER) -> float | None:
    """Smallest pass-rate drop this N detects with `power` at two-sided `alpha`.

    Per-case differences have variance ≈ π + δ for a drop δ made of extra
    pass→fail flips on top of a discordance π already present. With k the
    standardised effect a paired t-test detects at this N (statsmodels),
    the drop must be δ = k·sqrt(π + δ): δ = (k² + sqrt(k⁴ + 4k²π)) / 2.
    """
    if n < 2:
        return None

    def compute() -> float:
        from statsmodels.stats.power import TTestPower

        return float(TTestPower().solve_power(effect_size=None, nobs=n, alpha=alpha, power=power, alternative="two-sided"))

    k2 = remembered("ttest_effect", (n, alpha, power), compute) ** 2
    delta = (k2 + np.sqrt(k2 * k2 + 4 * k2 * discordance)) / 2
    return float(min(delta, 1.0))


def divergence_upper(pairs: int, divergent: int, level: float = 0.95) -> float | None:
    """One-sided upper confidence bound of the share of pairs that differ (Clopper–Pearson): 30 of 30 identical → 0.095.

    Identical answers are evidence: this says how far they generalise to
    requests like them. None without pairs.
    """
    if pairs <= 0:
        return None
    if divergent >= pairs:
        return 1.0
    if divergent == 0:  # the closed form (1 − level)^(1/n), without scipy
        return float(1 - (1 - level) ** (1 / pairs))

    def compute() -> float:
        from scipy import stats as sps

        return float(sps.beta.ppf(level, divergent + 1, pairs - divergent))

    return remembered("divergence_upper", (pairs, divergent, level), compute)


def non_inferiority(ci: tuple[float, float], margin: float | None) -> str | None:
    """non_inferior when the whole CI lies above -margin, inferior when below, else inconclusive."""
    if margin is None or any(np.isnan(x) for x in ci):
        return None
    if ci[0] > -margin:
        return "non_inferior"
    if ci[1] < -margin:
        return "inferior"
    return "inconclusive"


def holm(p_values: Sequence[float | None], alpha: float = ALPHA) -> list[float | None]:
    """Holm-adjusted p-values, None where the input is None.

    statsmodels' `multipletests(method="holm")` step for step (the same
    argsort, products and running maximum, so the same floats), without
    importing statsmodels; `alpha` decides rejections there, never the
    adjusted values, and is kept for the callers.
    """
    idx = [i for i, p in enumerate(p_values) if p is not None]
    out: list[float | None] = [None] * len(p_values)
    if idx:
        pvals = np.asarray([p_values[i] for i in idx])
        order = np.argsort(pvals)
        ranked = np.take(pvals, order)
        adjusted = np.maximum.accumulate(ranked * np.arange(len(ranked), 0, -1))
        adjusted[adjusted > 1] = 1
        adj = np.empty_like(adjusted)
        adj[order] = adjusted
        for i, p in zip(idx, adj, strict=True):
            out[i] = float(p)
    return out
