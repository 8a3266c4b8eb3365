"""format_drift's signed-rank test: the method is chosen explicitly, never scipy's slow permutation fallback."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from scipy import stats as sps

from qualitycheck.verdict._drift import DriftSamples, _paired_feature_p, format_drift, wilcoxon_method


def _samples(b: list[float], c: list[float]) -> DriftSamples:
    d = DriftSamples()
    d.b.extend(b)
    d.c.extend(c)
    return d


def test_a_40_case_category_with_ties_uses_the_normal_approximation(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(3)
    b = rng.integers(0, 4, 40).astype(float).tolist()  # integer counts: ties and zero differences
    c = (np.array(b) + rng.integers(-1, 3, 40)).tolist()
    small = _samples(b[:10], c[:10])  # 10 pairs with ties: scipy's "auto" would permute
    seen: list[Any] = []
    real = sps.wilcoxon

    def spy(*a: Any, **k: Any) -> Any:
        seen.append(k.get("method"))
        return real(*a, **k)

    monkeypatch.setattr(sps, "wilcoxon", spy)  # _stats imports scipy.stats when it computes, and calls it there
    out = format_drift({"qa": {"chars": _samples(b, c)}, "small": {"chars": small}})
    assert seen == ["asymptotic", "asymptotic"]
    assert out["qa"]["chars"]["p_value"] == pytest.approx(real(b, c, zero_method="wilcox", method="asymptotic").pvalue)


@pytest.mark.parametrize(
    ("b", "c", "method"),
    [
        ([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], [1.5, 3.1, 2.8, 5.4, 6.9, 8.2], "exact"),  # no ties, no zeros, small
        ([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], [2.0, 3.0, 4.0, 5.0, 6.0, 9.0], "asymptotic"),  # tied differences
        ([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], [1.0, 3.5, 3.7, 5.1, 6.9, 8.2], "asymptotic"),  # a zero difference
        (list(map(float, range(60))), [x + 0.01 * (i + 1) * (-1) ** i for i, x in enumerate(range(60))], "asymptotic"),  # large n
    ],
)
def test_p_values_agree_with_scipy_for_the_chosen_method(b: list[float], c: list[float], method: str) -> None:
    d = np.array(c) - np.array(b)
    assert wilcoxon_method(d) == method
    expected = sps.wilcoxon(b, c, zero_method="wilcox", method=method).pvalue
    assert _paired_feature_p(np.array(b), np.array(c), boolean=False) == pytest.approx(float(expected))


def test_without_ties_small_samples_keep_scipys_own_exact_answer() -> None:
    b, c = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0], [1.2, 2.5, 2.6, 4.9, 6.1, 5.3, 9.7]
    assert _paired_feature_p(np.array(b), np.array(c), boolean=False) == pytest.approx(float(sps.wilcoxon(b, c).pvalue))
