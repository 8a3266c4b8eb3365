"""The baseline model as referee: every answer's log-likelihood under the baseline, tested and explained.

The likelihood stage (`qualitycheck.likelihood`) scores each stored answer
under the baseline model. Two kinds of evidence come of it, and both go to
the one quality decision (`verdict._decision.decide_quality`):

- **Sampled cases: is the candidate sampling from the baseline's
  distribution?** For each case, every sample's mean log-probability per
  token under the baseline. When nothing changed, a case's baseline and
  candidate samples are exchangeable, so the difference of their means,
  d_i = mean(candidate) − mean(baseline), is centred on 0 with the
  permutation variance V_i = S_i² (1/n_b + 1/n_c) (S_i² the case's pooled
  sample variance). The statistic sums over cases: Z = Σ d_i / sqrt(Σ V_i),
  which is the studentized sign-flip statistic with one sample per side
  (Σ d_i / sqrt(Σ d_i²)), exact in its null variance whatever the scores'
  distribution. It is looked at after every sampling round with the
  group-sequential bounds of the pass-rate test (`verdict._sequential`:
  alpha spent as α·t³, binding futility under a shift of `detectable_shift`
  nats per token), two-sided: each direction at α/2. Below the baseline
  (Z ≤ −c) the candidate writes text the baseline model would rarely write
  (broken tokens, copied fragments); above it (Z ≥ c) the candidate's
  samples are more likely than the baseline's own: less varied, as a
  sampler that ignores temperature or top_p. Either is a changed
  distribution. Its p-value joins the run's Holm family of sampled cells.
- **Greedy cases: why did an answer change?** At the first token where the
  candidate's greedy answer leaves the baseline's, the baseline model's own
  distribution there says which: a *near tie* (the candidate took a token
  within `near_tie_nats` of the baseline's first choice: numerics, batching)
  or *decisive* (a token the baseline gives `decisive_nats` less, or ranks
  below the top-k it listed: a token the baseline would not write).

Pure functions of per-case figures, like the pass-rate test: the rounds'
interim decisions and the summary's are one computation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from qualitycheck.core._config import DEFAULT_DECISIVE_NATS, DEFAULT_NEAR_TIE_NATS, DEFAULT_SHIFT_NATS
from qualitycheck.core._records import GreedyDivergence, LikelihoodRecord, LikelihoodStage
from qualitycheck.core._store import CaseRecords
from qualitycheck.verdict._compare import CaseComparison
from qualitycheck.verdict._sequential import Design, _bounds_at, _norm_ppf, _p_at

__all__ = [
    "DEFAULT_DECISIVE_NATS",
    "DEFAULT_NEAR_TIE_NATS",
    "DEFAULT_SHIFT_NATS",
    "DivergenceClass",
    "DivergenceFacts",
    "DivergenceRule",
    "LikelihoodTally",
    "ShiftCase",
    "ShiftDecision",
    "ShiftStats",
    "classify_divergence",
    "current_likelihoods",
    "decide_shift",
    "shift_stats",
]

DivergenceClass = Literal["near_tie", "decisive", "unclear"]


@dataclass(frozen=True)
class DivergenceRule:
    """Where numerics end and a changed answer begins (config `likelihood:`; the defaults come from measurement, docs/stages/verdict.md)."""

    near_tie_nats: float = DEFAULT_NEAR_TIE_NATS
    decisive_nats: float = DEFAULT_DECISIVE_NATS
    report_only: bool = False
    """Decisive divergences are reported, and do not count against `max_quality_regression_cases`."""


@dataclass(frozen=True, slots=True)
class DivergenceFacts:
    """A greedy pair's first differing token under the baseline model (one repeat)."""

    case_id: str
    category: str
    route: str
    repeat: int
    position: int
    candidate_text: str | None
    candidate_logprob: float | None
    """None when the candidate's answer ended there (its end came where the baseline wrote on)."""
    candidate_rank: int | None
    baseline_text: str | None
    baseline_logprob: float | None
    margin: float | None
    """The baseline model's first choice minus the candidate's token, in nats (None: the candidate's answer ended there)."""
    runner_up_margin: float | None
    beyond_top_k: bool = False
    """The candidate's token is not among the most likely tokens the scorer listed there."""

    @property
    def candidate_probability(self) -> float | None:
        return math.exp(self.candidate_logprob) if self.candidate_logprob is not None else None


def classify_divergence(f: DivergenceFacts, rule: DivergenceRule) -> DivergenceClass:
    """near_tie: within `near_tie_nats` of the first choice; decisive: `decisive_nats` below it, or below the top-k; else unclear."""
    if f.margin is not None and f.margin <= rule.near_tie_nats and not f.beyond_top_k:
        return "near_tie"
    if f.candidate_logprob is not None and (f.beyond_top_k or (f.margin is not None and f.margin >= rule.decisive_nats)):
        return "decisive"
    return "unclear"


@dataclass(frozen=True, slots=True)
class ShiftCase:
    """One sampled case's samples under the baseline model: (repeat, mean log-probability per token) per side."""

    case_id: str
    route: str
    baseline: tuple[tuple[int, float], ...]
    candidate: tuple[tuple[int, float], ...]
    worst: tuple[int, float, str] | None = None
    """The candidate's least likely sample: (repeat, mean nats per token, its least likely tokens in words)."""

    @property
    def shift(self) -> float:
        """Its candidate samples' mean minus its baseline samples' (nats per token)."""
        b, c = [v for _, v in self.baseline], [v for _, v in self.candidate]
        return sum(c) / len(c) - sum(b) / len(b) if b and c else 0.0

    def at(self, samples: int) -> tuple[list[float], list[float]]:
        """Both sides' values among the first `samples` repeats (a look of the sequential test)."""
        return [v for rep, v in self.baseline if rep < samples], [v for rep, v in self.candidate if rep < samples]


@dataclass(frozen=True)
class ShiftLook:
    """The statistic at one look."""

    n: int
    """Cases with a sample on each side and some spread among them."""
    u: float
    """Σ d_i: the candidate's mean minus the baseline's, summed over cases (nats per token)."""
    v: float
    """Its permutation variance under 'nothing changed'."""
    baseline_mean: float | None
    candidate_mean: float | None
    alike: int = 0
    """Cases whose every sample, on both sides, scored the same: no shift, and no spread to weigh one with."""

    @property
    def z(self) -> float:
        return self.u / math.sqrt(self.v) if self.v > 0 else 0.0

    @property
    def estimate(self) -> float | None:
        """The mean shift per case, in nats per token (positive: the candidate's samples are more likely)."""
        return self.u / self.n if self.n else None

    @property
    def se(self) -> float | None:
        return math.sqrt(self.v) / self.n if self.n and self.v > 0 else None


def look_of(cases: Sequence[ShiftCase], samples: int) -> ShiftLook:
    n = alike = 0
    u = v = 0.0
    b_all: list[float] = []
    c_all: list[float] = []
    for case in cases:
        b, c = case.at(samples)
        b_all += b
        c_all += c
        if not b or not c:
            continue
        pooled = b + c
        m = len(pooled)
        if m < 2:
            continue
        mean = sum(pooled) / m
        s2 = sum((x - mean) ** 2 for x in pooled) / (m - 1)
        if s2 <= 0:
            alike += 1  # every sample alike on both sides: no shift here, and no spread to weigh one with
            continue
        n += 1
        u += sum(c) / len(c) - sum(b) / len(b)
        v += s2 * (1 / len(b) + 1 / len(c))
    return ShiftLook(n, u, v, sum(b_all) / len(b_all) if b_all else None, sum(c_all) / len(c_all) if c_all else None)


@dataclass(frozen=True)
class ShiftDecision:
    """What the looks decided for one category's likelihood cell."""

    outcome: Literal["shift", "no_shift", "undecided"]
    direction: Literal["lower", "higher"] | None
    """lower: the candidate writes text the baseline model finds less likely; higher: more likely (less varied)."""
    stopped: bool
    look: int
    samples: int
    z: float
    bound: float
    futility: float | None
    p_value: float
    """Two-sided stage-wise p-value of 'no shift'."""
    estimate: float | None
    low: float | None
    high: float | None
    """Repeated confidence bounds of the shift (nats per token) at that look."""
    mde: float | None
    """The smallest shift this information detects with 80% power (fixed-sample formula), nats per token."""
    n: int
    baseline_mean: float | None
    candidate_mean: float | None


def decide_shift(design: Design, shift: float, cases: Sequence[ShiftCase]) -> ShiftDecision:
    """Walk the looks the samples reach (`design.looks`) and decide: two one-sided tests at alpha/2, bounds from `_sequential`."""
    fractions = tuple(design.fraction(k) for k in range(len(design.looks)))
    most = max((rep for case in cases for rep, _ in (*case.baseline, *case.candidate)), default=-1) + 1
    looks = [n for n in design.looks if n <= max(most, design.looks[0])]
    half = design.alpha / 2
    z_alpha, z_beta = _norm_ppf(1 - half), _norm_ppf(1 - design.beta)
    past: list[tuple[float, float]] = []
    last: ShiftDecision | None = None
    for k, samples in enumerate(looks):
        stat = look_of(cases, samples)
        se, est = stat.se, stat.estimate
        final = k == len(design.looks) - 1
        theta = shift / se / math.sqrt(fractions[k]) if se else 0.0
        c, f, before = _bounds_at(fractions, past, k, half, theta, design.beta if se else 0.0)
        z = stat.z
        outcome: Literal["shift", "no_shift", "undecided"]
        if se is None:
            # no case with any spread: every sample of every case scored alike on both sides (identical samples), or none
            outcome = "no_shift" if stat.alike else "undecided"
        elif abs(z) >= c:
            outcome = "shift"
        elif abs(z) <= f or (final and f >= c - 1e-9):
            outcome = "no_shift"
        else:
            outcome = "undecided"
        p = min(1.0, 2 * _p_at(fractions, past, k, before, abs(z)))
        past.append((f, c))
        last = ShiftDecision(
            outcome=outcome,
            direction=("higher" if z > 0 else "lower") if outcome == "shift" else None,
            stopped=outcome != "undecided" and not final,
            look=k,
            samples=samples,
            z=z,
            bound=c,
            futility=None if f == -math.inf else f,
            p_value=p,
            estimate=est,
            low=est - c * se if est is not None and se is not None else None,
            high=est + c * se if est is not None and se is not None else None,
            mde=(z_alpha + z_beta) * se if se is not None else None,
            n=stat.n,
            baseline_mean=stat.baseline_mean,
            candidate_mean=stat.candidate_mean,
        )
        if outcome != "undecided":
            return last
    if last is None:  # no look reached: no samples scored
        return ShiftDecision("undecided", None, False, 0, 0, 0.0, math.inf, None, 1.0, None, None, None, None, 0, None, None)
    return last


@dataclass
class ShiftStats:
    """One category's likelihood cell: its sampled cases under the baseline model, and what the looks decided."""

    category: str
    cases: list[ShiftCase]
    decision: ShiftDecision
    detectable_shift: float
    routes: set[str]
    p_value_holm: float | None = None
    """The decision's p-value, Holm-adjusted over the run's sampled cells (check cells and likelihood cells)."""
    alpha: float = 0.05

    @property
    def largest(self) -> list[ShiftCase]:
        """The cases whose candidate samples moved most, in the direction of the shift (lower first, when none)."""
        sign = 1.0 if self.decision.direction == "higher" else -1.0
        return sorted(self.cases, key=lambda c: (-sign * c.shift, c.case_id))


def shift_stats(category: str, cases: Sequence[ShiftCase], design: Design, shift: float, alpha: float = 0.05) -> ShiftStats:
    return ShiftStats(category, list(cases), decide_shift(design, shift, cases), shift, {c.route for c in cases}, alpha=alpha)


# ------------------------------------------------------------------ the walk's share
@dataclass
class LikelihoodTally:
    """Each case's current likelihood records as the decision needs them: a sampled case's per-sample figures, a greedy
    pair's divergence facts (a `SplitTally`: a case's records are its own, so halves merge by concatenation).

    A record is current for an answer while its fingerprint is the answer's request's and its scorer the stage's.
    """

    scorer: str
    """The stage's scorer as its records name it (`LikelihoodRecord.scorer`)."""
    top_k: int = 20
    sampled: dict[str, list[ShiftCase]] = field(default_factory=dict)
    """category → its sampled cases with scored samples on both sides, in case order."""
    divergences: list[DivergenceFacts] = field(default_factory=list)
    missing: int = 0
    """Stored answers of sampled or divergent greedy cases that have no current scored record (too long, failed, or new)."""

    def add(self, rec: CaseRecords, comps: list[CaseComparison]) -> None:
        if not rec.likelihoods:
            return
        fingerprints = {(r.target, r.repeat): r.fingerprint for r in rec.responses if r.ok}
        current = current_likelihoods(rec, self.scorer)
        route = rec.case.tags.get("route", rec.case.category)
        if rec.case.sampled:
            b = tuple((rep, lr.mean_logprob) for (t, rep), lr in sorted(current.items()) if t == "baseline" and _scored(lr))
            c_recs = [(rep, lr) for (t, rep), lr in sorted(current.items()) if t == "candidate" and _scored(lr)]
            c = tuple((rep, lr.mean_logprob) for rep, lr in c_recs if lr.mean_logprob is not None)
            self.missing += sum(1 for key in fingerprints if key[0] in ("baseline", "candidate") and not _scored(current.get(key)))
            if b and c:
                worst_rep, worst = min(c_recs, key=lambda x: (x[1].mean_logprob or 0.0, x[0]))
                words = ", ".join(f"{t.text!r} ({math.exp(t.logprob):.1%})" for t in worst.least_likely[:3] if t.text is not None)
                self.sampled.setdefault(rec.case.category, []).append(
                    ShiftCase(rec.case.id, route, b, c, (worst_rep, worst.mean_logprob or 0.0, words))  # type: ignore[arg-type]
                )
            return
        for (target, rep), lr in sorted(current.items()):
            if target == "candidate" and lr.divergence is not None:
                self.divergences.append(_facts(rec.case.id, rec.case.category, route, rep, lr.divergence, self.top_k))

    def part(self) -> LikelihoodTally:
        return self

    def merge(self, later: LikelihoodTally) -> None:
        for cat, cases in later.sampled.items():
            self.sampled.setdefault(cat, []).extend(cases)
        self.divergences.extend(later.divergences)
        self.missing += later.missing

    @classmethod
    def for_stage(cls, stage: LikelihoodStage | None) -> LikelihoodTally | None:
        """The tally of a run whose likelihood stage scored (None when it did not run or could not score)."""
        if stage is None or not stage.evaluated:
            return None
        return cls(f"{stage.scorer} {stage.model}", stage.top_k)


def current_likelihoods(rec: CaseRecords, scorer: str) -> dict[tuple[str, int], LikelihoodRecord]:
    """(target, repeat) → the case's likelihood record that describes that stored answer now.

    A record is current while its fingerprint is the answer's request's and
    its scorer the stage's (`LikelihoodTally.scorer`): an answer asked again,
    or scored by another server, is not described by an older record. The
    decision and the report read the same records through this.
    """
    fingerprints = {(r.target, r.repeat): r.fingerprint for r in rec.responses if r.ok}
    return {
        (lr.target, lr.repeat): lr
        for lr in rec.likelihoods
        if lr.scorer == scorer and fingerprints.get((lr.target, lr.repeat)) == lr.fingerprint
    }


def _scored(lr: LikelihoodRecord | None) -> bool:
    return lr is not None and lr.status == "scored" and lr.mean_logprob is not None


def _facts(case_id: str, category: str, route: str, repeat: int, d: GreedyDivergence, top_k: int) -> DivergenceFacts:
    top = d.top[0] if d.top else None
    cand = d.answer_token
    return DivergenceFacts(
        case_id=case_id,
        category=category,
        route=route,
        repeat=repeat,
        position=d.position,
        candidate_text=cand.text if cand is not None else None,
        candidate_logprob=cand.logprob if cand is not None else None,
        candidate_rank=cand.rank if cand is not None else None,
        baseline_text=d.baseline_token.text if d.baseline_token is not None else (top.text if top is not None else None),
        baseline_logprob=d.baseline_token.logprob if d.baseline_token is not None else None,
        margin=d.margin,
        runner_up_margin=d.runner_up_margin,
        beyond_top_k=cand is not None and (cand.rank is None or cand.rank > top_k),
    )
