"""Sampled cases compared as distributions, in rounds, with error rates that hold under optional stopping.

A sampled case (temperature > 0) gives a different answer every time it is
asked, so one baseline answer against one candidate answer says nothing; what
can be compared is how often each side passes a check. Each case is asked
several times per side, and a (category, check) cell is decided by a test of
the per-case pass-rate differences over its cases:

- **The statistic is stratified by case** (Cochran–Mantel–Haenszel): within a
  case, the baseline's and the candidate's samples are exchangeable when the
  candidate draws from the baseline's distribution, so, given how many of
  the case's samples passed, the baseline's share is hypergeometric. The sum
  over cases of the baseline's passes minus that expectation is the score
  `U`, its null variance `V`; `Z = U / sqrt(V)`. With one sample per side it
  is McNemar's statistic. `U / sum(w)` (w = nb·nc / (nb + nc) per case) is
  the Mantel–Haenszel estimate of the drop in pass rate, with standard error
  `sqrt(V) / sum(w)`.
- **Rounds and looks.** Cases are sampled `run.sample_round` at a time per
  side, up to `run.max_samples_per_case` (by default 2, 4, 6, 8, 10: five
  looks). The cell is tested at each look on the samples taken so far. Looking more than once would inflate
  false alarms, so the look's critical value comes from a group-sequential
  design: an O'Brien–Fleming-type alpha-spending function over the planned
  information fraction t = samples / max_samples (Lan–DeMets), computed by
  numerical integration of the joint normal law of the looks. Early looks
  spend almost nothing, so the last look keeps nearly the critical value of
  a single test and its power.
- **Stopping for no drop.** A cell also stops when the data are
  inconsistent with a drop of `drop` (the drop the run must be able to
  detect, default 10 points): a futility bound from beta-spending under that
  alternative; it is binding (the rounds stop there), and the efficacy values
  spend alpha on the paths it leaves going. Reaching it is a decided "no
  drop"; at the budget's last look it takes the rest of beta, and where the
  information suffices it meets the critical value.
  A cell that ends between the two bounds is undecided: too few cases or
  samples to tell, and the category is inconclusive, never passed.
- **Non-inferiority.** With a margin m for the check, the cell passes when
  the drop is shown below m (its repeated confidence bound) and fails when it
  is shown above m; the same spending function makes both bounds valid under
  the looks.
- **p-values.** The stage-wise ordering p-value of the look the cell stopped
  at (the chance, with no drop, of crossing earlier or crossing there with a
  larger statistic), one-sided: Holm adjusts them across the run's sampled
  cells, and a cell fails only when its adjusted p is below alpha.

Everything is a pure function of per-case counts, so the rounds'
decisions during generation and the summary's afterwards are the same
computation on the same stored samples (`decide_cell`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from qualitycheck.core._config import RunOptions
from qualitycheck.core._records import SamplingRecord

__all__ = [
    "BETA",
    "DEFAULT_DROP",
    "CaseCounts",
    "CellLook",
    "Design",
    "SampledDecision",
    "decide_cell",
    "design_for",
    "design_of",
    "look_statistic",
]

DEFAULT_DROP = 0.10
"""The drop in pass rate a sampled cell must be able to detect (80% power) before it passes (`run.detectable_drop`)."""
BETA = 0.20
"""1 − power at `drop`: the futility bound's error rate."""
SPEND_RHO = 3.0
"""Exponent of the alpha-spending function alpha·t^rho (3: O'Brien–Fleming-like, 1: Pocock-like)."""
BETA_RHO = 2.0
"""Exponent of the beta-spending function of the futility bound: spending beta sooner than alpha stops
faithful candidates earlier, at a point or two of power (bench/gate_power.py measures both)."""
CONTINUITY = 0.25
"""Continuity correction of u for the test of a drop: with as many samples on each side, u moves in
steps of one half, and the normal law of a lattice statistic over-counts the point on the bound. Half a
step keeps the false-alarm rate at or below alpha (bench/gate_power.py), at about one point of power."""
_GRID = 241
_WIDTH = 8.0
"""The numerical integration covers ±8 standard deviations of the score at each look."""


@dataclass(frozen=True, slots=True)
class CaseCounts:
    """One case's samples of one check up to a look: passes and decided samples per side."""

    case_id: str
    b_pass: int
    b_n: int
    c_pass: int
    c_n: int

    @property
    def drop(self) -> float:
        """Baseline pass rate − candidate pass rate (positive: the candidate passes less)."""
        return self.b_pass / self.b_n - self.c_pass / self.c_n


@dataclass(frozen=True)
class Design:
    """The looks and error rates of one sequential test: what makes its decisions reproducible."""

    looks: tuple[int, ...]
    """Samples per side at each look, increasing; the last is the budget. A fixed `--repeats N` is one look at N."""
    alpha: float = 0.05
    """One-sided false-alarm rate of the whole sequence of looks."""
    drop: float = DEFAULT_DROP
    beta: float = BETA
    margin: float | None = None
    """A non-inferiority margin: decide drop < margin against drop > margin instead of no drop against a drop."""

    @classmethod
    def rounds(cls, max_samples: int, round_size: int = 2, **kw: float | None) -> Design:
        """Looks every `round_size` samples up to `max_samples` (the last look at the budget itself)."""
        looks = list(range(round_size, max_samples, round_size)) + [max_samples]
        return cls(tuple(looks), **kw)  # type: ignore[arg-type]

    def fraction(self, k: int) -> float:
        """The planned information fraction at look k (0-based): samples taken over the budget."""
        return self.looks[k] / self.looks[-1]


def design_for(run: RunOptions, alpha: float = 0.05) -> Design:
    """The run's looks: one at `repeats` when the run fixes it, else a look after every round up to the budget."""
    if run.repeats > 1:
        return Design((run.repeats,), alpha=alpha, drop=run.detectable_drop)
    return Design.rounds(run.max_samples_per_case, min(run.sample_round, run.max_samples_per_case), alpha=alpha, drop=run.detectable_drop)


def design_of(record: SamplingRecord | None, detectable_drop: float, taken: int, alpha: float = 0.05) -> Design:
    """The looks a stored run's samples were taken at, so that gating it again reads them as they were taken.

    From the run's sampling record when it has one: another config given to
    `gate` or `score` changes the guardrails, not the looks already taken.
    Answers not taken in rounds (a shadow or canary recording, imported
    traffic) get one look at the samples there are (`taken` per side), testing
    for the `detectable_drop` the gate is configured with.
    """
    if record is None:
        return Design((max(1, taken),), alpha=alpha, drop=detectable_drop)
    if record.mode == "fixed":
        return Design((record.max_samples_per_case,), alpha=alpha, drop=record.detectable_drop)
    top = record.max_samples_per_case
    return Design.rounds(top, min(record.sample_round, top), alpha=alpha, drop=record.detectable_drop)


@dataclass(frozen=True)
class CellLook:
    """The statistic of one cell at one look."""

    n: int
    """Cases with at least one decided sample on each side."""
    u: float
    """Σ (baseline passes − their null expectation): positive when the candidate passes less."""
    v: float
    """Null variance of u (hypergeometric, given each case's passes)."""
    w: float
    """Σ nb·nc/(nb+nc): u/w is the Mantel–Haenszel drop in pass rate."""
    v_smooth: float
    """Σ w·p(1−p) with each case's pass rate p smoothed as (passes + ½)/(samples + 1): u's variance for
    the estimate's precision, never zero (a case whose samples all passed so far may still fail)."""

    @property
    def z(self) -> float:
        """The statistic of the drop, 0 when every case's samples all agree (then u is 0 too)."""
        return self.u / math.sqrt(self.v) if self.v > 0 else 0.0

    @property
    def z_corrected(self) -> float:
        """The statistic the drop is tested with: u less half its lattice step (`CONTINUITY`) over sqrt(v)."""
        return (self.u - CONTINUITY) / math.sqrt(self.v) if self.v > 0 else 0.0

    @property
    def estimate(self) -> float | None:
        """The Mantel–Haenszel drop in pass rate (baseline − candidate), None without cases."""
        return self.u / self.w if self.w > 0 else None

    @property
    def se(self) -> float | None:
        return math.sqrt(self.v_smooth) / self.w if self.w > 0 else None


def look_statistic(cases: Sequence[CaseCounts]) -> CellLook:
    """The stratified score statistic over cases (a case without samples on both sides adds nothing)."""
    u = v = w = vs = 0.0
    n = 0
    for c in cases:
        nb, nc = c.b_n, c.c_n
        if nb <= 0 or nc <= 0:
            continue
        n += 1
        tot = nb + nc
        k = c.b_pass + c.c_pass
        wi = nb * nc / tot
        w += wi
        u += c.b_pass - k * nb / tot
        if 0 < k < tot:
            v += nb * nc * k * (tot - k) / (tot * tot * (tot - 1))
        p = (k + 0.5) / (tot + 1)
        vs += wi * p * (1 - p)
    return CellLook(n, u, v, w, vs)


# ------------------------------------------------------------------ the group-sequential law
def _phi(x: np.ndarray) -> np.ndarray:
    out: np.ndarray = np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
    return out


def _norm_sf(x: np.ndarray | float) -> np.ndarray:
    from scipy.special import ndtr

    out: np.ndarray = ndtr(-np.asarray(x, dtype=float))
    return out


def _norm_ppf(p: float) -> float:
    from scipy.special import ndtri

    return float(ndtri(p))


class _Walk:
    """The sub-density of the score S_t = Z·sqrt(t) over the looks, on a grid, for a drift theta per unit t.

    Independent increments: S at the next look is S now plus N(theta·Δt, Δt).
    The density is carried only over the region where the test continued.
    """

    def __init__(self, theta: float):
        self.theta = theta
        self.t = 0.0
        self.x: np.ndarray | None = None  # grid of S at the last look
        self.f: np.ndarray | None = None  # its sub-density times the quadrature weights

    def _moments(self, t: float) -> tuple[float, float]:
        dt = t - self.t
        return self.theta * dt, math.sqrt(dt)

    def prob_above(self, t: float, s: float) -> float:
        """P(continued so far and S_t > s)."""
        mean, sd = self._moments(t)
        if self.x is None or self.f is None:
            return float(_norm_sf((s - mean) / sd))
        return float(np.sum(self.f * _norm_sf((s - self.x - mean) / sd)))

    def prob_below(self, t: float, s: float) -> float:
        """P(continued so far and S_t < s)."""
        mean, sd = self._moments(t)
        if self.x is None or self.f is None:
            return float(1 - _norm_sf((s - mean) / sd))
        return float(np.sum(self.f * (1 - _norm_sf((s - self.x - mean) / sd))))

    def prob_below_fn(self, t: float) -> Callable[[float], float]:
        return lambda s: self.prob_below(t, s)

    def advance(self, t: float, low: float, high: float) -> None:
        """Move to look t, keeping the density of the paths that continued (low < S_t < high)."""
        mean, sd = self._moments(t)
        centre = self.theta * t
        span = _WIDTH * math.sqrt(t)
        lo = max(low, centre - span)
        hi = min(high, centre + span)
        if hi <= lo:
            self.x, self.f, self.t = np.array([lo]), np.array([0.0]), t
            return
        x = np.linspace(lo, hi, _GRID)
        h = (hi - lo) / (_GRID - 1)
        q = np.full(_GRID, 2.0)
        q[1::2] = 4.0
        q[0] = q[-1] = 1.0
        q *= h / 3  # Simpson's weights
        if self.x is None or self.f is None:
            dens = _phi((x - mean) / sd) / sd
        else:
            dens = (self.f[None, :] * _phi((x[:, None] - self.x[None, :] - mean) / sd)).sum(axis=1) / sd
        self.x, self.f, self.t = x, dens * q, t


def _solve(fn: Callable[[float], float], target: float, lo: float, hi: float) -> float:
    """The s where the increasing fn(s) equals target, by bisection."""
    for _ in range(60):
        mid = (lo + hi) / 2
        if fn(mid) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def _spent(total: float, t: float, rho: float | None = None) -> float:
    """What a spending function total·t^rho has spent by information fraction t (rho: `SPEND_RHO` unless given)."""
    return float(total * min(1.0, t) ** (SPEND_RHO if rho is None else rho))


def _bounds_at(
    fractions: Sequence[float], past: Sequence[tuple[float, float]], k: int, alpha: float, theta: float, beta: float
) -> tuple[float, float, float]:
    """Look k's efficacy and futility values of Z, and alpha spent before it, given the earlier looks' bounds.

    Futility is binding (the rounds always stop there), so the paths it
    stops can no longer cross later and the efficacy value spends exactly
    alpha·t^rho − alpha·t_prev^rho on the paths still going: the last look's
    value stays close to a single test's. The futility value spends
    beta·t^BETA_RHO under the drift `theta` of the drop to detect (the rest
    of beta at the budget's last look); where it would lie above the
    efficacy value the two meet.
    """
    t = fractions[k]
    prev_t = fractions[k - 1] if k else 0.0
    root_t = math.sqrt(t)
    null, alt = _Walk(0.0), _Walk(theta)
    for j in range(k):
        lo, hi = past[j][0] * math.sqrt(fractions[j]), past[j][1] * math.sqrt(fractions[j])
        null.advance(fractions[j], lo, hi)
        alt.advance(fractions[j], lo, hi)
    a = _spent(alpha, t) - _spent(alpha, prev_t)
    span = (_WIDTH + abs(theta)) * root_t + 1
    c = _solve(lambda s: -null.prob_above(t, s), -a, -span, span) / root_t if a > 0 else math.inf
    last = t >= 1.0
    b = (beta if last else _spent(beta, t, BETA_RHO)) - _spent(beta, prev_t, BETA_RHO)
    f = _solve(alt.prob_below_fn(t), b, -span + theta * t, span + theta * t) / root_t if b > 0 else -math.inf
    return c, min(f, c), _spent(alpha, prev_t)


def _p_at(fractions: Sequence[float], past: Sequence[tuple[float, float]], k: int, alpha_before: float, z: float) -> float:
    """One-sided stage-wise p-value of stopping at look k with statistic z (the earlier looks' bounds binding)."""
    null = _Walk(0.0)
    for j in range(k):
        null.advance(fractions[j], past[j][0] * math.sqrt(fractions[j]), past[j][1] * math.sqrt(fractions[j]))
    t = fractions[k]
    return float(min(1.0, alpha_before + null.prob_above(t, z * math.sqrt(t))))


# ------------------------------------------------------------------ one cell's decision
Outcome = Literal["drop", "no_drop", "undecided"]


@dataclass(frozen=True)
class SampledDecision:
    """What the looks decided for one (category, check) cell of sampled cases."""

    outcome: Outcome
    """drop: the candidate passes significantly less (or worse than the margin); no_drop: a drop of `drop` (or
    beyond the margin) is ruled out; undecided: neither within the budget."""
    stopped: bool
    """True when a bound was crossed before the budget's last look: the cell needs no more samples."""
    look: int
    """The look (0-based) the decision was made at: the last one taken when undecided."""
    samples: int
    """Samples per side at that look."""
    z: float
    bound: float
    """The efficacy critical value at that look."""
    futility: float | None
    """The futility value at that look (None with a margin)."""
    p_value: float
    """One-sided stage-wise p-value of 'no drop' (with a margin: of 'drop ≤ margin')."""
    estimate: float | None
    """Mantel–Haenszel drop in pass rate at that look."""
    low: float | None
    high: float | None
    """Repeated confidence bounds of the drop at that look (one-sided level 1 − alpha each)."""
    mde: float | None
    """The smallest drop this information detects with 80% power at one-sided alpha (fixed-sample formula)."""
    n: int


def decide_cell(design: Design, looks: Sequence[Sequence[CaseCounts]]) -> SampledDecision:
    """Walk the looks taken so far (`looks[k]`: the cases' counts up to `design.looks[k]` samples) and decide.

    Stops at the first look whose bound is crossed; afterwards the cell is
    decided whatever later samples show (they were taken for other cells of
    its cases' category). Undecided when no bound was crossed by the last
    look given: `stopped` is False, and the rounds go on if the budget allows.
    """
    fractions = tuple(design.fraction(k) for k in range(len(design.looks)))
    z_alpha, z_beta = _norm_ppf(1 - design.alpha), _norm_ppf(1 - design.beta)
    past: list[tuple[float, float]] = []
    last = None
    for k, cases in enumerate(looks):
        stat = look_statistic(cases)
        est, se = stat.estimate, stat.se
        final = k == len(design.looks) - 1
        mde = (z_alpha + z_beta) * se if se is not None else None
        outcome: Outcome
        if design.margin is not None:  # two one-sided tests against the margin; no futility of its own
            c, f, before = _bounds_at(fractions, past, k, design.alpha, 0.0, 0.0)
            z = (stat.u - design.margin * stat.w) / math.sqrt(stat.v_smooth) if se is not None else 0.0
        else:
            # the drift of Z per unit of information fraction if the candidate dropped by `drop`
            theta = design.drop * stat.w / math.sqrt(stat.v_smooth) / math.sqrt(fractions[k]) if se is not None else 0.0
            c, f, before = _bounds_at(fractions, past, k, design.alpha, theta, design.beta if se is not None else 0.0)
            z = stat.z_corrected
        low = est - c * se if est is not None and se is not None else None
        high = est + c * se if est is not None and se is not None else None
        if se is None:
            outcome = "undecided"
        elif design.margin is not None:
            outcome = "drop" if z >= c else "no_drop" if high is not None and high < design.margin else "undecided"
        else:
            # at the budget's last look the bounds meet: what does not cross the efficacy bound rules the drop out
            outcome = "drop" if z >= c else "no_drop" if stat.z <= f or (final and f >= c - 1e-9) else "undecided"
        p = _p_at(fractions, past, k, before, z)
        past.append((f, c))
        last = SampledDecision(
            outcome,
            outcome != "undecided" and not final,
            k,
            design.looks[k],
            z,
            c,
            None if f == -math.inf else f,
            p,
            est,
            low,
            high,
            mde,
            stat.n,
        )
        if outcome != "undecided":
            return last
    assert last is not None, "decide_cell needs at least one look"
    return last
