"""Paired statistics per (category, check), the A/A noise floor, and format drift.

Every number here is paired: the same case answered by the baseline and the
candidate. Pass rates are averaged per case first (a case with repeats counts
once, with its pass rate), so a sampled case cannot outvote a greedy one.

- delta and its CI: paired bootstrap over cases (scipy, seeded → reproducible)
- p-value: exact McNemar on the discordant pairs (statsmodels); with repeats,
  the exact sign test on per-case pass-rate changes (scipy), its generalisation
- non-inferiority: the CI against a margin per check
- minimum detectable effect: paired t-test power (statsmodels) for this N
- Holm across every (category, check) cell (statsmodels' arithmetic, in numpy)
- noise floor: how often the baseline disagrees with itself (control target
  or repeats); cases that do are *flaky* and kept apart from regressions,
  and the regression count is judged against the flips noise alone would
  produce (a binomial allowance at level alpha)

scipy and statsmodels are imported by the computations that need them, never
with this module: importing them costs more than a second, more than
summarising a 10,000-case run. Those computations are pure functions of
small inputs, so a `StatsMemo` can hand back what a previous summary of the
same run computed (see its docstring): `qualitycheck report` and `gate` on a
run whose statistics are unchanged never import either.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from array import array
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeGuard, TypeVar

import numpy as np

from qualitycheck.verdict._compare import CaseComparison
from qualitycheck.verdict._sequential import CaseCounts, Design, SampledDecision, decide_cell

__all__ = [
    "ALPHA",
    "CaseClassification",
    "CaseOutcome",
    "CheckStats",
    "DriftSamples",
    "NoiseFloor",
    "QualityStats",
    "RouteQuality",
    "SampledStats",
    "StatsMemo",
    "add_case_outcomes",
    "add_drift",
    "check_stats",
    "classify_cases",
    "divergence_upper",
    "format_drift",
    "holm",
    "mcnemar_exact_p",
    "minimum_detectable_effect",
    "noise_floor",
    "non_inferiority",
    "paired_bootstrap_ci",
    "paired_p_value",
    "pooled_floor",
    "quality_stats",
    "regression_allowance",
    "route_quality",
    "sampled_stats",
    "supported_allowance",
    "undecided_sampled",
]

ALPHA = 0.05
NoiseSource = Literal["control", "repeats", "baseline_again"]
"""How an A/A noise floor was measured (`noise_floor`)."""
POWER = 0.8
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_BATCH_VALUES = 250_000
"""Resampled values held at once by the bootstrap (2 MB of float64; scipy keeps a few such arrays)."""
DECIDED = ("pass", "fail")

T = TypeVar("T")


# ---------------------------------------------------------------- memo of the scipy/statsmodels results
class StatsMemo:
    """What this module's scipy and statsmodels computations returned, keyed by their whole input.

    Each such computation is a pure function of a few counts or of packed
    values (McNemar and sign tests of discordant counts, the noise allowance,
    the t-test effect for N cases, the bootstrap and the signed-rank test of
    one array), so a summary rebuilt from an unchanged run asks the same
    questions again. Active (`active()`), the memo answers those from what it
    holds and computes only the rest; `qualitycheck report` and `gate` keep it
    with the run (`to_json`/`from_json`). Arrays enter a key as a digest of
    their bytes. The salt holds the versions of numpy, scipy and statsmodels
    and a digest of this module's source, so a memo written by other code is
    discarded whole, never half-trusted.
    """

    def __init__(self, entries: Mapping[str, Any] | None = None):
        self.entries: dict[str, Any] = dict(entries or {})
        self.added = 0

    @classmethod
    def from_json(cls, data: Any) -> StatsMemo:
        """The memo as `to_json` wrote it; an empty one when it was written under another salt (or is not one)."""
        if isinstance(data, dict) and data.get("salt") == memo_salt() and isinstance(data.get("entries"), dict):
            return cls(data["entries"])
        return cls()

    def to_json(self) -> dict[str, Any]:
        return {"salt": memo_salt(), "entries": self.entries}

    @contextmanager
    def active(self) -> Iterator[StatsMemo]:
        """Answer this module's computations from the memo (and record new ones) inside the block."""
        token = _ACTIVE.set(self)
        try:
            yield self
        finally:
            _ACTIVE.reset(token)

    def get_or_compute(self, key: str, compute: Callable[[], T]) -> T:
        if key in self.entries:
            return self.entries[key]  # type: ignore[no-any-return]
        value = self.entries[key] = compute()
        self.added += 1
        return value


_ACTIVE: ContextVar[StatsMemo | None] = ContextVar("qualitycheck_stats_memo", default=None)
_SALT: list[str] = []


def memo_salt() -> str:
    """Library versions and this module's source: what the memo's values depend on besides their keys."""
    if not _SALT:
        from importlib.metadata import PackageNotFoundError, version

        parts = []
        for dist in ("numpy", "scipy", "statsmodels"):
            try:
                parts.append(f"{dist}={version(dist)}")
            except PackageNotFoundError:
                parts.append(f"{dist}=?")
        parts.append(hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16])
        _SALT.append(";".join(parts))
    return _SALT[0]


def _remembered(kind: str, key: Sequence[Any], compute: Callable[[], T]) -> T:
    """`compute()`, or its value from the active memo under (kind, key); computed as is without one."""
    memo = _ACTIVE.get()
    if memo is None:
        return compute()
    return memo.get_or_compute(f"{kind}:{json.dumps(list(key))}", compute)


def _digest(values: np.ndarray) -> str:
    """An array as a memo key: its length and a digest of its float64 bytes."""
    raw = np.ascontiguousarray(values, dtype=np.float64).tobytes()
    return f"{len(values)}/{hashlib.sha256(raw).hexdigest()}"


def mcnemar_exact_p(down: int, up: int) -> float:
    """McNemar's exact two-sided p-value of a 2×2 table's discordant cells (statsmodels; the concordant cells do not enter it)."""

    def compute() -> float:
        from statsmodels.stats.contingency_tables import mcnemar

        return float(mcnemar([[0, down], [up, 0]], exact=True).pvalue)

    return _remembered("mcnemar", (down, up), compute)


@dataclass(frozen=True, slots=True)
class CaseOutcome:
    """One case's decided outcomes (True = pass) for one check, per target over repeats.

    `control` holds the control target's outcomes at the same repeats as the
    baseline; empty when there is no control.
    """

    case_id: str
    route: str
    baseline: tuple[bool, ...]
    candidate: tuple[bool, ...]
    control: tuple[bool, ...] = ()
    control_pairs: tuple[tuple[bool, bool], ...] = ()
    """(baseline, control) outcomes at the same repeat: the A/A pairs."""
    sampled: bool = False
    """The case samples (temperature > 0): judged by its pass rates, in the category's distribution test."""
    b_reps: tuple[int, ...] = ()
    c_reps: tuple[int, ...] = ()
    """For a sampled case, the repeat of each baseline and candidate outcome (the looks count samples by repeat)."""

    @property
    def b_rate(self) -> float:
        return sum(self.baseline) / len(self.baseline)

    @property
    def c_rate(self) -> float:
        return sum(self.candidate) / len(self.candidate)

    def counts(self, samples: int) -> CaseCounts:
        """Passes and decided samples per side among the first `samples` repeats (a look of the sequential test)."""
        b = [ok for ok, rep in zip(self.baseline, self.b_reps or range(len(self.baseline)), strict=True) if rep < samples]
        c = [ok for ok, rep in zip(self.candidate, self.c_reps or range(len(self.candidate)), strict=True) if rep < samples]
        return CaseCounts(self.case_id, sum(b), len(b), sum(c), len(c))

    def __reduce__(self) -> tuple[Callable[..., CaseOutcome], tuple[Any, ...]]:
        """Pickled as a constructor call (cheaper than a slotted dataclass's state), and re-sharing its tuples when read."""
        return _outcome, (
            self.case_id,
            self.route,
            self.sampled,
            self.baseline,
            self.candidate,
            self.control,
            self.control_pairs,
            self.b_reps,
            self.c_reps,
        )


_SHARED: dict[tuple[Any, ...], tuple[Any, ...]] = {}
"""Outcome tuples repeat endlessly ((True,), (False,), ...): one shared copy each keeps 100,000 cases small."""


def _shared(t: tuple[Any, ...]) -> tuple[Any, ...]:
    return _SHARED.setdefault(t, t) if len(t) <= 16 else t


def _outcome(case_id: str, route: str, sampled: bool, *outcomes: tuple[Any, ...]) -> CaseOutcome:
    """A `CaseOutcome` read back from a pickle (the walk's second process sends them), its outcome tuples shared again."""
    b, c, k, pairs, br, cr = map(_shared, outcomes)
    return CaseOutcome(case_id, route, b, c, k, pairs, sampled, br, cr)


def add_case_outcomes(into: dict[str, dict[str, list[CaseOutcome]]], reps: Sequence[CaseComparison]) -> None:
    """Add one case's decided outcomes over its repeats to category → check → outcomes.

    A check the case did not decide on both sides adds nothing, but its list
    exists, so a check no case decided still shows (n = 0) instead of vanishing.
    """
    if not reps:
        return
    case_id, route, sampled = reps[0].case_id, reps[0].route, reps[0].sampled
    per_check = into.setdefault(reps[0].category, {})
    if len(reps) == 1 and reps[0].repeat == 0:  # one repeat, the usual run: each check's outcome read once
        for n, one in sorted(reps[0].checks.items()):
            outs = per_check.setdefault(n, [])
            if one.baseline in DECIDED and one.candidate in DECIDED:
                bp = one.baseline == "pass"
                if one.control in DECIDED:
                    kp = one.control == "pass"
                    outs.append(
                        CaseOutcome(
                            case_id,
                            route,
                            _shared((bp,)),
                            _shared((one.candidate == "pass",)),
                            _shared((kp,)),
                            _shared(((bp, kp),)),
                            sampled,
                        )
                    )
                else:
                    outs.append(CaseOutcome(case_id, route, _shared((bp,)), _shared((one.candidate == "pass",)), (), (), sampled))
        return
    for n in sorted({n for r in reps for n in r.checks}):
        outs = per_check.setdefault(n, [])
        b: list[bool] = []
        c: list[bool] = []
        k: list[bool] = []
        br: list[int] = []
        cr: list[int] = []
        pairs: list[tuple[bool, bool]] = []
        for r in reps:
            o = r.checks.get(n)
            if o is None:
                continue
            if o.baseline in DECIDED:
                b.append(o.baseline == "pass")
                br.append(r.repeat)
            if o.candidate in DECIDED:
                c.append(o.candidate == "pass")
                cr.append(r.repeat)
            if o.control in DECIDED:
                k.append(o.control == "pass")
                if o.baseline in DECIDED:
                    pairs.append((o.baseline == "pass", o.control == "pass"))
        if b and c:
            reps_b, reps_c = (_shared(tuple(br)), _shared(tuple(cr))) if sampled else ((), ())
            outs.append(
                CaseOutcome(
                    case_id, route, _shared(tuple(b)), _shared(tuple(c)), _shared(tuple(k)), _shared(tuple(pairs)), sampled, reps_b, reps_c
                )
            )


# ---------------------------------------------------------------- noise floor
@dataclass(frozen=True)
class NoiseFloor:
    """How often the baseline disagrees with itself for one (category, check)."""

    measured_by: NoiseSource | None
    """'control', 'repeats', or None when the run cannot tell (no control, one repeat)."""
    pairs: int = 0
    """A/A pairs compared (baseline vs control at the same repeat, or repeat vs repeat)."""
    disagreements: int = 0
    flaky: tuple[str, ...] = ()
    """Cases whose baseline disagreed with itself."""

    @property
    def flip_rate(self) -> float | None:
        """Share of A/A pairs that decided differently."""
        return self.disagreements / self.pairs if self.pairs else None


def noise_floor(outcomes: Sequence[CaseOutcome], source: NoiseSource | None = None) -> NoiseFloor:
    """Measure A/A disagreement from the control target, or else from baseline repeats.

    `source="baseline_again"` says the control answers are the baseline asked
    again for the cases whose candidate text diverged only (the default
    floor, `generation._noise`); their pairs are measured the same way, and
    `classify_cases` then judges regressions among those cases only.
    """
    if any(o.control_pairs for o in outcomes):
        pairs = sum(len(o.control_pairs) for o in outcomes)
        dis = sum(sum(b != k for b, k in o.control_pairs) for o in outcomes)
        flaky = tuple(o.case_id for o in outcomes if any(b != k for b, k in o.control_pairs) or len(set(o.baseline)) > 1)
        return NoiseFloor("baseline_again" if source == "baseline_again" else "control", pairs, dis, flaky)
    if any(len(o.baseline) > 1 for o in outcomes):
        pairs = dis = 0
        for o in outcomes:
            r, k = len(o.baseline), sum(o.baseline)
            pairs += r * (r - 1) // 2
            dis += k * (r - k)
        flaky = tuple(o.case_id for o in outcomes if len(set(o.baseline)) > 1)
        return NoiseFloor("repeats", pairs, dis, flaky)
    return NoiseFloor(None)


def regression_allowance(eligible: int, floor: NoiseFloor, alpha: float = ALPHA) -> int:
    """The most regressions among `eligible` cases that the measured noise alone explains at level `alpha`.

    Noise flips a passing case to failing at some rate q; the A/A pairs see
    disagreements at rate 2q (either direction). Comparing the two counts as
    Poisson rates, conditionally on their sum the regressions R are
    Binomial(R + D, E / (E + 2P)) under "no regression beyond noise"
    (E eligible cases, P A/A pairs, D disagreements). The allowance is the
    largest R this exact test does not reject, so it is calibrated even
    when the control saw no disagreement at all, and shrinks as the control
    grows (more repeats, more pairs). Without a measured floor it is 0.
    """
    if floor.measured_by is None or eligible <= 0 or floor.pairs <= 0:
        return 0

    def compute() -> int:
        from scipy import stats as sps

        p0 = eligible / (eligible + 2 * floor.pairs)
        allowed = 0
        for r in range(1, eligible + 1):
            if sps.binomtest(r, r + floor.disagreements, p0, alternative="greater").pvalue < alpha:
                break
            allowed = r
        return allowed

    return _remembered("allowance", (eligible, floor.pairs, floor.disagreements, alpha), compute)


def supported_allowance(eligible: int, floor: NoiseFloor, alpha: float = ALPHA) -> int:
    """The most regressions the floor's measured rate itself explains: a Poisson count at that rate, at level `alpha`.

    `regression_allowance` also tolerates what a floor measured on few pairs
    cannot rule out: with 0 disagreements over 8 pairs it still allows a
    regression or two, because 8 pairs do not show the noise to be small.
    That is a lack of evidence, not noise: regressions tolerated only for it
    leave their route undecided (`verdict._status`). Here the rate is the
    one the pairs show at the least (the one-sided Clopper–Pearson lower
    bound of D / P at level `alpha`, halved: a pair's disagreement is a flip
    either way), so a floor that never disagreed supports none and one
    disagreement in two pairs supports little.
    """
    if floor.measured_by is None or eligible <= 0 or floor.pairs <= 0 or floor.disagreements <= 0:
        return 0

    def compute() -> int:
        from scipy import stats as sps

        low = float(sps.beta.ppf(alpha, floor.disagreements, floor.pairs - floor.disagreements + 1))
        lam = eligible * low / 2
        r = 0
        while sps.poisson.sf(r, lam) >= alpha:  # P(X ≥ r + 1) still plausible
            r += 1
        return r

    return _remembered("supported_low", (eligible, floor.pairs, floor.disagreements, alpha), compute)


def pooled_floor(outcomes: Mapping[str, Mapping[str, Sequence[CaseOutcome]]], source: NoiseSource | None = None) -> NoiseFloor:
    """The deployment's one greedy noise floor: A/A disagreement over every re-asked case of the run, counted per case.

    Batching noise is a property of the serving stack, not of a route or a
    check, so it is measured once over all greedy cases and every route's
    regressions are weighed against it. A pair is one case asked twice (the
    control, the baseline again, or two of its repeats); it disagrees when
    any of the case's checks decided differently. Sampled cases are not
    part of it: they differ by design and are compared as distributions.
    """
    per_case: dict[str, list[CaseOutcome]] = {}
    for cells in outcomes.values():
        for outs in cells.values():
            for o in outs:
                if not o.sampled:
                    per_case.setdefault(o.case_id, []).append(o)
    if any(o.control_pairs for outs in per_case.values() for o in outs):
        pairs = dis = 0
        for outs in per_case.values():
            most = max(len(o.control_pairs) for o in outs)
            pairs += most
            # a pair disagrees when any check decided it differently (checks hold the same pairs, in repeat order)
            dis += sum(any(i < len(o.control_pairs) and o.control_pairs[i][0] != o.control_pairs[i][1] for o in outs) for i in range(most))
        return NoiseFloor("baseline_again" if source == "baseline_again" else "control", pairs, dis)
    if any(len(o.baseline) > 1 for outs in per_case.values() for o in outs):
        pairs = dis = 0
        for outs in per_case.values():
            r = max(len(o.baseline) for o in outs)
            pairs += r * (r - 1) // 2
            dis += max(sum(o.baseline) * (len(o.baseline) - sum(o.baseline)) for o in outs)
        return NoiseFloor("repeats", pairs, dis)
    return NoiseFloor(None)


@dataclass(frozen=True)
class RouteQuality:
    """One route's greedy regressions weighed against the deployment's pooled floor."""

    route: str
    regressions: tuple[str, ...]
    """Greedy cases that regressed on some check (not flaky on it), each once."""
    eligible: int
    """Greedy cases that could regress: passing on the baseline, not flaky (with the baseline asked again
    only where the candidate diverged: the re-asked cases, flaky ones included)."""
    allowance: int
    """The most regressions the pooled floor explains at level alpha (`regression_allowance`)."""
    supported: int
    """The most the floor's measured rate itself explains (`supported_allowance`); below `allowance` when the
    floor rests on few pairs."""

    @property
    def beyond(self) -> int:
        return max(0, len(self.regressions) - self.allowance)


def route_quality(
    outcomes: Mapping[str, Mapping[str, Sequence[CaseOutcome]]],
    cells: Mapping[str, Mapping[str, CheckStats]],
    floor: NoiseFloor,
    alpha: float = ALPHA,
) -> dict[str, RouteQuality]:
    """Every route's greedy regressions (from the cells' classification) against the pooled floor."""
    partial = floor.measured_by == "baseline_again"
    flaky_on: dict[str, set[str]] = {}
    for cat, stats in cells.items():
        for name, st in stats.items():
            for cid in st.flaky:
                flaky_on.setdefault(cid, set()).add(f"{cat}/{name}")
    eligible: dict[str, set[str]] = {}
    for cat, by_check in outcomes.items():
        for name, outs in by_check.items():
            for o in outs:
                if o.sampled or o.b_rate <= 0.5:
                    continue
                if partial:
                    if o.control_pairs:
                        eligible.setdefault(o.route, set()).add(o.case_id)
                elif f"{cat}/{name}" not in flaky_on.get(o.case_id, ()):
                    eligible.setdefault(o.route, set()).add(o.case_id)
    regressed: dict[str, dict[str, None]] = {}
    for stats in cells.values():
        for st in stats.values():
            for route, ids in st.routes.items():
                regressed.setdefault(route, {}).update(dict.fromkeys(ids))
    out: dict[str, RouteQuality] = {}
    for route in sorted(eligible.keys() | regressed.keys()):
        e = len(eligible.get(route, set()) | set(regressed.get(route, {})))
        out[route] = RouteQuality(
            route,
            tuple(regressed.get(route, {})),
            e,
            regression_allowance(e, floor, alpha),
            supported_allowance(e, floor, alpha),
        )
    return out


# ---------------------------------------------------------------- tests
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

    low, high = _remembered("bootstrap", (_digest(d), seed, level, resamples), compute)
    return (low, high)


def paired_p_value(outcomes: Sequence[CaseOutcome]) -> float | None:
    """Two-sided exact test of 'no change' on the discordant cases.

    One repeat: McNemar exact on the 2×2 table. Repeats: the exact sign test
    on cases whose pass rate went down vs up (McNemar is its binary case).
    """
    if not outcomes:
        return None
    down = sum(o.c_rate < o.b_rate for o in outcomes)
    up = sum(o.c_rate > o.b_rate for o in outcomes)
    if down + up == 0:
        return 1.0
    if all(len(o.baseline) == 1 and len(o.candidate) == 1 for o in outcomes):
        return mcnemar_exact_p(down, up)

    def compute() -> float:
        from scipy import stats as sps

        return float(sps.binomtest(down, down + up, 0.5).pvalue)

    return _remembered("sign", (down, up), compute)


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

    k2 = _remembered("ttest_effect", (n, alpha, power), compute) ** 2
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

    return _remembered("divergence_upper", (pairs, divergent, level), compute)


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


# ---------------------------------------------------------------- per check
@dataclass
class SampledStats:
    """The sampled cases of one (category, check), compared as pass-rate distributions (`verdict._sequential`)."""

    cases: int
    samples: float
    """Mean decided samples per side per case."""
    baseline_pass_rate: float
    candidate_pass_rate: float
    """Means of the per-case pass rates over all samples taken."""
    decision: SampledDecision
    """What the looks decided, at the look they stopped at."""
    drops: list[tuple[str, float, float]]
    """(case, baseline rate, candidate rate) of the cases whose pass rate fell, largest drop first."""
    detectable_drop: float
    """The drop the design must be able to detect before the cell passes (`run.detectable_drop`)."""
    routes: set[str]
    """Routes of the cell's sampled cases."""
    p_value_holm: float | None = None
    """The decision's p-value, Holm-adjusted over the run's sampled cells."""
    alpha: float = ALPHA

    @property
    def mde(self) -> float | None:
        """The smallest drop the test detects with 80% power.

        Decided "no drop", that is `detectable_drop` itself, wherever it
        stopped: the futility bound spends beta over the looks under exactly
        that drop, so a drop that size ends anywhere but "no drop" at least 80%
        of the time. Otherwise it is the fixed-sample figure at the last look.
        """
        if self.decision.outcome == "no_drop" and self.outcome == "no_drop":
            return self.detectable_drop
        return self.decision.mde

    @property
    def outcome(self) -> Literal["drop", "no_drop", "undecided"]:
        """drop only when the Holm-adjusted p-value is below alpha; a drop multiplicity does not support is undecided."""
        if self.decision.outcome == "drop":
            return "drop" if self.p_value_holm is not None and self.p_value_holm < self.alpha else "undecided"
        return self.decision.outcome


@dataclass
class CheckStats:
    """The comparison of one check in one category (the `Comparison` record of DESIGN.md).

    Rates, delta, CI and p cover every case of the cell. Greedy cases are
    classified one by one (regressions, flaky, the allowance against the
    pooled floor); sampled cases are judged together, in `sampled`.
    """

    category: str
    check: str
    n: int
    baseline_pass_rate: float | None
    candidate_pass_rate: float | None
    control_pass_rate: float | None
    delta: float | None
    ci: tuple[float, float] | None
    p_value: float | None
    regressions: list[str]
    improvements: list[str]
    flaky: list[str]
    flaky_regressions: list[str]
    noise: NoiseFloor
    allowance: int
    mde: float | None
    margin: float | None
    non_inferiority: str | None
    p_value_holm: float | None = None
    routes: dict[str, list[str]] = field(default_factory=dict)
    """route → greedy regression case ids (for per-route guardrails)."""
    sampled: SampledStats | None = None
    """The distribution test of the cell's sampled cases; None when it has none."""

    @property
    def regressions_beyond_floor(self) -> int:
        return max(0, len(self.regressions) - self.allowance)


@dataclass(frozen=True)
class CaseClassification:
    """Which cases regressed, improved or are flaky for one (category, check), and the noise allowance."""

    regressions: list[str]
    improvements: list[str]
    flaky: list[str]
    flaky_regressions: list[str]
    routes: dict[str, list[str]]
    noise: NoiseFloor
    allowance: int

    @property
    def regressions_beyond_floor(self) -> int:
        return max(0, len(self.regressions) - self.allowance)


def classify_cases(
    outcomes: Sequence[CaseOutcome],
    alpha: float = ALPHA,
    noise_source: NoiseSource | None = None,
    pooled: NoiseFloor | None = None,
) -> CaseClassification:
    """The gate's quality decision input: regressions among cases the baseline agrees with itself on.

    A case regresses when its pass rate drops by more than half (one repeat:
    pass → fail). Flaky cases never count; their drops are listed apart. The
    allowance is how many regressions the measured noise floor alone would
    produce among the cases the baseline passes, at level `alpha`: the
    `pooled` floor of the whole run when given (the gate's), else this
    cell's own.

    With the baseline asked again only where the candidate diverged
    (`baseline_again`), the A/A pairs cover those cases alone, so the
    regressions are weighed against the cases that were asked again, flaky
    ones included: both counts then come from one population, in which
    disagreements occur at twice the rate of noise regressions. Excluding
    the flaky cases there (as a full control does, where they are a small
    share) would shrink that population to its stable half and flag noise
    as regressions; `bench/gate_power.py` measures the result.
    """
    floor = noise_floor(outcomes, noise_source)
    partial = floor.measured_by == "baseline_again"
    flaky = set(floor.flaky)
    regressions: list[str] = []
    improvements: list[str] = []
    flaky_reg: list[str] = []
    routes: dict[str, list[str]] = {}
    eligible = 0
    for o in outcomes:
        drop = o.b_rate - o.c_rate
        if partial and o.control_pairs and o.b_rate > 0.5:
            eligible += 1
        if o.case_id in flaky:
            if drop > 0.5:
                flaky_reg.append(o.case_id)
            continue
        if not partial and o.b_rate > 0.5:
            eligible += 1
        if drop > 0.5:
            regressions.append(o.case_id)
            routes.setdefault(o.route, []).append(o.case_id)
        elif -drop > 0.5:
            improvements.append(o.case_id)
    return CaseClassification(
        regressions, improvements, sorted(flaky), flaky_reg, routes, floor, regression_allowance(eligible, pooled or floor, alpha)
    )


def sampled_stats(outcomes: Sequence[CaseOutcome], design: Design, alpha: float = ALPHA) -> SampledStats | None:
    """The distribution test of a cell's sampled cases, replayed over the looks their samples reach."""
    outs = [o for o in outcomes if o.sampled]
    if not outs:
        return None
    most = max(max((o.b_reps or range(len(o.baseline))), default=-1) for o in outs) + 1
    looks = [[o.counts(n) for o in outs] for n in design.looks if n <= max(most, design.looks[0])]
    decision = decide_cell(design, looks)
    drops = sorted(((o.case_id, o.b_rate, o.c_rate) for o in outs if o.c_rate < o.b_rate), key=lambda d: (d[2] - d[1], d[0]))
    return SampledStats(
        cases=len(outs),
        samples=sum(len(o.baseline) + len(o.candidate) for o in outs) / (2 * len(outs)),
        baseline_pass_rate=float(np.mean([o.b_rate for o in outs])),
        candidate_pass_rate=float(np.mean([o.c_rate for o in outs])),
        decision=decision,
        drops=drops,
        detectable_drop=design.margin if design.margin is not None else design.drop,
        routes={o.route for o in outs},
        alpha=alpha,
    )


def check_stats(
    category: str,
    check: str,
    outcomes: Sequence[CaseOutcome],
    *,
    margin: float | None = None,
    seed: int = 0,
    alpha: float = ALPHA,
    noise_source: NoiseSource | None = None,
    pooled: NoiseFloor | None = None,
    design: Design | None = None,
) -> CheckStats:
    """Everything the gate and the report need for one (category, check).

    Greedy cases are classified against the `pooled` floor; sampled cases
    are tested together with `design` (the run's looks; by default the
    fixed number of samples they have).
    """
    greedy = [o for o in outcomes if not o.sampled]
    cls = classify_cases(greedy, alpha, noise_source, pooled)
    n = len(outcomes)
    b = [o.b_rate for o in outcomes]
    c = [o.c_rate for o in outcomes]
    k = [sum(o.control) / len(o.control) for o in outcomes if o.control]
    ci = paired_bootstrap_ci(b, c, seed=seed) if n else None
    discordance = float(np.mean([abs(x - y) for x, y in zip(b, c, strict=True)])) if n else 0.0
    sampled = None
    if len(greedy) < n:
        if design is None:
            most = max(max(len(o.baseline), len(o.candidate)) for o in outcomes if o.sampled)
            design = Design((most,), margin=margin)
        elif margin is not None and design.margin != margin:
            design = dataclasses.replace(design, margin=margin)
        sampled = sampled_stats(outcomes, design, alpha)
    # the margin over the greedy cases' CI: the sampled ones are tested against it by their own test
    ni_ci = ci
    if sampled is not None:
        ni_ci = None
        if greedy and margin is not None:
            ni_ci = paired_bootstrap_ci([o.b_rate for o in greedy], [o.c_rate for o in greedy], seed=seed)
    return CheckStats(
        category=category,
        check=check,
        n=n,
        baseline_pass_rate=float(np.mean(b)) if n else None,
        candidate_pass_rate=float(np.mean(c)) if n else None,
        control_pass_rate=float(np.mean(k)) if k else None,
        delta=float(np.mean(c) - np.mean(b)) if n else None,
        ci=ci,
        p_value=paired_p_value(outcomes),
        regressions=cls.regressions,
        improvements=cls.improvements,
        flaky=cls.flaky if not sampled else sorted({*cls.flaky, *noise_floor([o for o in outcomes if o.sampled]).flaky}),
        flaky_regressions=cls.flaky_regressions,
        noise=cls.noise,
        allowance=cls.allowance,
        mde=minimum_detectable_effect(n, discordance, alpha),
        margin=margin,
        non_inferiority=non_inferiority(ni_ci, margin) if ni_ci else None,
        routes=cls.routes,
        sampled=sampled,
    )


@dataclass
class QualityStats:
    """The quality statistics of a run: every (category, check) cell, the pooled greedy floor, and every route against it."""

    cells: dict[str, dict[str, CheckStats]]
    floor: NoiseFloor
    """The deployment's greedy floor, pooled over the run (`pooled_floor`)."""
    routes: dict[str, RouteQuality]


def quality_stats(
    outcomes: Mapping[str, Mapping[str, Sequence[CaseOutcome]]],
    *,
    margins: dict[str, float] | None = None,
    seed: int = 0,
    alpha: float = ALPHA,
    noise_source: NoiseSource | None = None,
    design: Design | None = None,
) -> QualityStats:
    """Every cell's statistics, with Holm-adjusted p-values across all cells (and across the sampled cells' tests).

    The greedy floor is pooled over the run first, so every cell's
    allowance and every route's are measured against the same evidence.
    """
    margins = margins or {}
    floor = pooled_floor(outcomes, noise_source)
    cells: dict[str, dict[str, CheckStats]] = {}
    for cat, by_check in sorted(outcomes.items()):
        for check, outs in sorted(by_check.items()):
            cells.setdefault(cat, {})[check] = check_stats(
                cat,
                check,
                outs,
                margin=margins.get(check),
                seed=seed,
                alpha=alpha,
                noise_source=noise_source,
                pooled=floor if floor.measured_by is not None else None,
                design=design,
            )
    every = [s for per in cells.values() for s in per.values()]
    for s, p in zip(every, holm([s.p_value for s in every], alpha), strict=True):
        s.p_value_holm = p
    _holm_sampled([s.sampled for s in every if s.sampled is not None], alpha)
    return QualityStats(cells, floor, route_quality(outcomes, cells, floor, alpha))


def _holm_sampled(cells: Sequence[SampledStats], alpha: float) -> None:
    """Holm across the run's sampled cells: a cell's drop counts only when its adjusted p-value is below alpha."""
    for sp, p in zip(cells, holm([sp.decision.p_value for sp in cells], alpha), strict=True):
        sp.p_value_holm = p


def undecided_sampled(
    outcomes: Mapping[str, Mapping[str, Sequence[CaseOutcome]]],
    design: Design,
    *,
    margins: Mapping[str, float] | None = None,
    alpha: float = ALPHA,
) -> dict[str, list[str]]:
    """category → its sampled checks still undecided on the samples taken: the sampling rounds ask these categories again.

    The same test the summary runs afterwards (`sampled_stats`), on the
    looks the samples reach so far. A cell whose bound was crossed is
    decided: more samples would not move its decision (the looks replay and
    stop there). Holm across the sampled cells comes after, in the summary,
    and can only turn a drop that multiplicity does not support undecided.
    """
    margins = margins or {}
    cells: dict[tuple[str, str], SampledStats] = {}
    for cat, by_check in sorted(outcomes.items()):
        for check, outs in sorted(by_check.items()):
            m = margins.get(check)
            sp = sampled_stats(outs, dataclasses.replace(design, margin=m) if m is not None else design, alpha)
            if sp is not None:
                cells[cat, check] = sp
    out: dict[str, list[str]] = {}
    for (cat, check), sp in cells.items():
        if sp.decision.outcome == "undecided":
            out.setdefault(cat, []).append(check)
    return out


# ---------------------------------------------------------------- format drift
class DriftSamples:
    """One format feature's paired values in one category, as packed doubles (8 bytes a value).

    `b`/`c` pair the baseline with the candidate on every case both answered;
    `kb`/`k` pair the baseline with the control where the control answered.
    """

    __slots__ = ("b", "c", "k", "kb")

    def __init__(self) -> None:
        self.b, self.c, self.kb, self.k = array("d"), array("d"), array("d"), array("d")


def add_drift(into: dict[str, DriftSamples], fb: Mapping[str, Any], fc: Mapping[str, Any], fk: Mapping[str, Any] | None) -> None:
    """Add one (case, repeat)'s format features of each side; non-numeric features are not compared."""
    for name, vb in fb.items():
        vc = fc.get(name)
        if not _numeric(vb) or not _numeric(vc):
            continue
        d = into.get(name)
        if d is None:
            d = into[name] = DriftSamples()
        d.b.append(float(vb))
        d.c.append(float(vc))
        if fk is not None and _numeric(fk.get(name)):
            d.kb.append(float(vb))
            d.k.append(float(fk[name]))


_PLAIN_NUMBERS = frozenset((bool, int, float))


class _Block:
    """Rows of one feature layout: every side's values appended whole, in the layout's order."""

    __slots__ = ("b", "c", "k", "keys", "rows")

    def __init__(self, keys: tuple[str, ...], control: bool):
        self.keys = keys
        self.rows: array[int] = array("q")
        self.b: array[float] = array("d")
        self.c: array[float] = array("d")
        self.k: array[float] | None = array("d") if control else None


class DriftTally:
    """One category's paired feature values, exactly as `add_drift` on each of its rows would hold them.

    `add_drift` pays a few Python steps per feature per row (thirty features,
    every case). Here a row's sides are appended whole: rows whose sides
    have the same features in the same order, all plain numbers (every
    answer's `format_features` has), go into the block of that layout in
    one call per side, and `samples()` cuts each feature's pairs out of
    the blocks at the end, dropping the pairs `add_drift` skips (a side not
    a number, or NaN) and keeping row order. Any other row goes through
    `add_drift` itself, numbered, and is merged back in that order.
    """

    __slots__ = ("_blocks", "_loose", "_loose_rows", "rows")

    def __init__(self) -> None:
        self.rows = 0
        self._blocks: dict[tuple[tuple[str, ...], bool], _Block] = {}
        self._loose: list[dict[str, DriftSamples]] = []
        self._loose_rows: list[int] = []

    def add(self, fb: Mapping[str, Any], fc: Mapping[str, Any], fk: Mapping[str, Any] | None) -> None:
        """One (case, repeat)'s format features of each side (`fk`: the control's, or None)."""
        row = self.rows
        self.rows += 1
        keys = tuple(fb)
        plain = _PLAIN_NUMBERS
        if (
            tuple(fc) == keys
            and (fk is None or tuple(fk) == keys)
            and plain.issuperset(map(type, fb.values()))
            and plain.issuperset(map(type, fc.values()))
            and (fk is None or plain.issuperset(map(type, fk.values())))
        ):
            block = self._blocks.get((keys, fk is not None))
            if block is None:
                block = self._blocks[keys, fk is not None] = _Block(keys, fk is not None)
            block.rows.append(row)
            block.b.fromlist(list(fb.values()))  # a list converts in one C loop; extend(values) goes item by item
            block.c.fromlist(list(fc.values()))
            if block.k is not None and fk is not None:
                block.k.fromlist(list(fk.values()))
            return
        into: dict[str, DriftSamples] = {}
        add_drift(into, fb, fc, fk)
        if into:
            self._loose.append(into)
            self._loose_rows.append(row)

    def merge(self, later: DriftTally) -> None:
        """Fold in the rows of the cases after this tally's, numbered after its own (blocks of a layout it has continue)."""
        offset = self.rows
        for key, block in later._blocks.items():
            mine = self._blocks.get(key)
            if mine is None:
                mine = self._blocks[key] = _Block(block.keys, block.k is not None)
            mine.rows.frombytes((np.frombuffer(block.rows, dtype=np.int64) + offset).tobytes())
            mine.b.extend(block.b)
            mine.c.extend(block.c)
            if mine.k is not None and block.k is not None:
                mine.k.extend(block.k)
        self._loose.extend(later._loose)
        self._loose_rows.extend(row + offset for row in later._loose_rows)
        self.rows += later.rows

    def samples(self) -> dict[str, DriftSamples]:
        """feature → its paired values in row order (features without a single pair are absent, as with `add_drift`)."""
        parts: dict[str, list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]]] = {}
        for block in self._blocks.values():
            width = len(block.keys)
            rows = np.frombuffer(block.rows, dtype=np.int64)
            b = np.frombuffer(block.b, dtype=np.float64).reshape(-1, width)
            c = np.frombuffer(block.c, dtype=np.float64).reshape(-1, width)
            k = np.frombuffer(block.k, dtype=np.float64).reshape(-1, width) if block.k is not None else None
            for j, name in enumerate(block.keys):
                ok = ~(np.isnan(b[:, j]) | np.isnan(c[:, j]))
                with_k = ok & ~np.isnan(k[:, j]) if k is not None else np.zeros(len(rows), dtype=bool)
                kcol = k[with_k, j] if k is not None else np.empty(0)
                parts.setdefault(name, []).append((rows[ok], b[ok, j], c[ok, j], rows[with_k], b[with_k, j], kcol))
        for row, into in zip(self._loose_rows, self._loose, strict=True):
            for name, d in into.items():
                r = np.full(len(d.b), row, dtype=np.int64)
                rk = np.full(len(d.k), row, dtype=np.int64)
                parts.setdefault(name, []).append((r, np.asarray(d.b), np.asarray(d.c), rk, np.asarray(d.kb), np.asarray(d.k)))
        out: dict[str, DriftSamples] = {}
        for name, pieces in parts.items():
            rows_bc, b, c, rows_k, kb, k = (np.concatenate([p[i] for p in pieces]) for i in range(6))
            if not len(rows_bc):
                continue
            if len(pieces) > 1:
                order, korder = np.argsort(rows_bc, kind="stable"), np.argsort(rows_k, kind="stable")
                b, c, kb, k = b[order], c[order], kb[korder], k[korder]
            d = out[name] = DriftSamples()
            d.b.frombytes(np.ascontiguousarray(b, dtype=np.float64).tobytes())
            d.c.frombytes(np.ascontiguousarray(c, dtype=np.float64).tobytes())
            d.kb.frombytes(np.ascontiguousarray(kb, dtype=np.float64).tobytes())
            d.k.frombytes(np.ascontiguousarray(k, dtype=np.float64).tobytes())
        return out


def format_drift(samples: Mapping[str, Mapping[str, DriftSamples]], alpha: float = ALPHA) -> dict[str, dict[str, dict[str, Any]]]:
    """category → feature → rates on each side, the paired p-value and a drift flag.

    Each feature's kind is the one declared next to it (`FEATURE_KINDS` in
    scoring): booleans are rates, numbers means, in every category alike,
    whatever values a category happens to hold; a feature not declared there
    is a mean. A feature is flagged when the paired
    test (McNemar exact for booleans, Wilcoxon signed-rank for numbers) is
    significant at `alpha` and the change exceeds the control's own change
    (the A/A noise floor; zero without a control).
    """
    from qualitycheck.scoring._format import FEATURE_KINDS  # the scoring package loads every check family: only when needed

    out: dict[str, dict[str, dict[str, Any]]] = {}
    for cat, feats in sorted(samples.items()):
        for name, d in sorted(feats.items()):
            b, c = np.frombuffer(d.b, dtype=np.float64), np.frombuffer(d.c, dtype=np.float64)
            boolean = FEATURE_KINDS.get(name, "mean") == "rate"
            noise = abs(float(np.mean(d.k) - np.mean(d.kb))) if d.k else 0.0
            delta = float(c.mean() - b.mean())
            p = _paired_feature_p(b, c, boolean)
            entry: dict[str, Any] = {
                "baseline": float(b.mean()),
                "candidate": float(c.mean()),
                "delta": delta,
                "kind": "rate" if boolean else "mean",
                "p_value": p,
                "noise": noise if d.k else None,
                "flag": bool(p is not None and p < alpha and abs(delta) > noise),
            }
            if d.k:
                entry["control"] = float(np.mean(d.k))
            out.setdefault(cat, {})[name] = entry
    return out


def _numeric(v: Any) -> TypeGuard[float]:
    return isinstance(v, (bool, int, float)) and not (isinstance(v, float) and np.isnan(v))


def _paired_feature_p(b: np.ndarray, c: np.ndarray, boolean: bool) -> float | None:
    if len(b) == 0:
        return None
    if boolean:
        down = int(np.sum((b == 1) & (c == 0)))
        up = int(np.sum((b == 0) & (c == 1)))
        if down + up == 0:
            return 1.0
        return mcnemar_exact_p(down, up)
    d = c - b
    if np.all(d == 0):
        return 1.0
    method = wilcoxon_method(d)

    def compute() -> float:
        from scipy import stats as sps

        return float(sps.wilcoxon(b, c, zero_method="wilcox", method=method).pvalue)

    return _remembered("wilcoxon", (method, _digest(b), _digest(c)), compute)


WILCOXON_EXACT_MAX = 50
"""Largest number of pairs the signed-rank test is computed exactly for (scipy's own bound for "auto")."""


def wilcoxon_method(d: np.ndarray) -> Literal["exact", "asymptotic"]:
    """The signed-rank test's method for paired differences `d`, chosen explicitly.

    The exact null distribution is valid only without zero differences and
    without ties among the absolute differences, and cheap for small n: use
    it there. Everywhere else the normal approximation with scipy's tie
    correction. scipy's "auto" would run a permutation test for 13 pairs or
    fewer with ties (seconds per feature, every format feature of every
    small category), whose answer the approximation gives in microseconds.
    """
    nonzero = np.abs(d[d != 0])
    if len(nonzero) == len(d) and len(d) <= WILCOXON_EXACT_MAX and len(np.unique(nonzero)) == len(nonzero):
        return "exact"
    return "asymptotic"
