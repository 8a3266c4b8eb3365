"""The gate simulated: how often it fails with nothing wrong, and how often it catches a drop of a given size.

Bench code, outside the product: each simulation draws paired outcomes,
builds the decision's evidence with the product's own builder
(`verdict._decision.quality_evidence`) and decides with its one function
(`decide_quality`), exactly as a run, the sampling rounds and the canary do,
so what `bench/gate_power.py` prints is what a run would decide:

- `simulate_gate`: one greedy category against its noise floor (the
  false-alarm rate with nothing wrong; the power to see a 2-point drop);
- `simulate_routes`: greedy cases over several routes, each weighed
  against the run's pooled floor, gated as `max_quality_regression_cases: 0`;
- `simulate_sampled`: a category of sampled cases, sampled in rounds as the
  pipeline samples them (`pipeline._sampling`): what the run decides, and
  the samples per case it spent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from qualitycheck.core._config import RunOptions
from qualitycheck.verdict._decision import QualityDecision, decide_quality, quality_evidence
from qualitycheck.verdict._floor import NoiseSource
from qualitycheck.verdict._likelihood import ShiftCase
from qualitycheck.verdict._memo import StatsMemo
from qualitycheck.verdict._outcomes import CaseOutcome
from qualitycheck.verdict._sequential import Design, design_for
from qualitycheck.verdict._tests import ALPHA

__all__ = [
    "LikelihoodFigures",
    "RouteFigures",
    "SampledFigures",
    "simulate_gate",
    "simulate_likelihood",
    "simulate_routes",
    "simulate_sampled",
]


def _decided(
    outcomes: Mapping[str, Mapping[str, Sequence[CaseOutcome]]],
    thresholds: Mapping[str, int],
    *,
    alpha: float = ALPHA,
    noise_source: NoiseSource | None = None,
    design: Design | None = None,
) -> QualityDecision:
    """The product's decision on simulated outcomes: its evidence builder, then `decide_quality`."""
    evidence = quality_evidence(outcomes, alpha=alpha, noise_source=noise_source, design=design, describe=False)
    return decide_quality(evidence, thresholds)


def _simulated_outcomes(
    rng: np.random.Generator, n: int, pass_rate: float, noise: float, drop: float, design: str, text_noise: float
) -> list[CaseOutcome]:
    """Paired outcomes: each case has a pass probability near 0 or 1 (stable) or
    in between (noisy); the candidate loses `drop` of the stable cases outright.

    Noisy cases diverge in text too, and so does a further share `text_noise`
    of cases whose wording varies while their checks hold (the usual case
    under batching). `design` is how the floor is measured: `control` (the
    baseline again on every case), `baseline_again` (only where the
    candidate's text diverged: noisy, wording-only and broken cases) or
    `none`.
    """
    noisy = rng.random(n) < 2 * noise
    wording = noisy | (rng.random(n) < text_noise) if text_noise else noisy
    p_case = np.where(rng.random(n) < pass_rate, 1.0, 0.0)
    p_case = np.where(noisy, 0.5, p_case)
    base = rng.random(n) < p_case
    ctrl = rng.random(n) < p_case
    cand_p = p_case.copy()
    stable = np.flatnonzero((p_case == 1.0) & ~wording)
    broken = np.zeros(n, dtype=bool)
    k = round(drop * n)
    if k:
        idx = rng.choice(stable, size=min(k, len(stable)), replace=False)
        cand_p[idx] = 0.0
        broken[idx] = True
    cand = rng.random(n) < cand_p
    asked = {"control": np.ones(n, dtype=bool), "baseline_again": wording | broken, "none": np.zeros(n, dtype=bool)}[design]
    return [
        CaseOutcome(
            f"c{i}",
            "r",
            (bool(base[i]),),
            (bool(cand[i]),),
            (bool(ctrl[i]),) if asked[i] else (),
            ((bool(base[i]), bool(ctrl[i])),) if asked[i] else (),
        )
        for i in range(n)
    ]


def simulate_gate(
    *,
    n: int = 300,
    pass_rate: float = 0.8,
    noise: float = 0.01,
    drop: float = 0.0,
    trials: int = 500,
    max_cases: int = 0,
    design: str = "control",
    text_noise: float = 0.0,
    alpha: float = ALPHA,
    seed: int = 0,
) -> float:
    """Share of simulated runs in which the quality guardrail fails the category.

    With drop=0 (A/A) this is the false-alarm rate; with drop=0.02 it is the
    power to see a 2-percentage-point regression. `noise` is the A/A
    disagreement rate: a share 2·noise of the cases are coin flips on every
    target (batching non-determinism), the rest are stable. `design` is how
    the run measures its floor (see `_simulated_outcomes`).
    The decision is the gate's own: the route's quality guardrail with
    `max_quality_regression_cases: max_cases`.
    """
    rng = np.random.default_rng(seed)
    source: NoiseSource | None = "baseline_again" if design == "baseline_again" else None
    fails = 0
    with StatsMemo().active():  # the allowances repeat from trial to trial: computed once each
        for _ in range(trials):
            outs = _simulated_outcomes(rng, n, pass_rate, noise, drop, design, text_noise)
            decision = _decided({"cat": {"check": outs}}, {"r": max_cases}, alpha=alpha, noise_source=source)
            fails += decision.routes["r"].passed is False
    return fails / trials


@dataclass(frozen=True)
class RouteFigures:
    """Shares of simulated runs: failed (some route's quality guardrail), every broken route failed, undecided."""

    failed: float
    every_broken_route: float
    undecided: float


def simulate_routes(
    *,
    cases: int = 31,
    routes: int = 5,
    per_route: int = 0,
    noise: float = 0.0,
    pass_rate: float = 0.9,
    wording: float = 0.0,
    trials: int = 500,
    alpha: float = ALPHA,
    seed: int = 0,
) -> RouteFigures:
    """Greedy cases dealt over `routes`; `per_route` of each route's stable passing cases break on the candidate.

    The floor is the default one: the baseline asked again where the
    candidate's text diverged (noisy, wording-only and broken cases). Every
    route is gated by `max_quality_regression_cases: 0` against the run's
    pooled floor, exactly as a run gates it.
    """
    rng = np.random.default_rng(seed)
    route_of = [f"r{i % routes}" for i in range(cases)]
    failed = every = undecided = 0
    memo = StatsMemo()
    for _ in range(trials):
        noisy = rng.random(cases) < 2 * noise
        words = noisy | (rng.random(cases) < wording)
        p_case = np.where(noisy, 0.5, np.where(rng.random(cases) < pass_rate, 1.0, 0.0))
        base, again = rng.random(cases) < p_case, rng.random(cases) < p_case
        cand_p = p_case.copy()
        broken = np.zeros(cases, dtype=bool)
        for r in range(routes):
            stable = [i for i in range(cases) if route_of[i] == f"r{r}" and p_case[i] == 1.0 and not words[i]]
            for i in rng.permutation(stable)[:per_route]:
                cand_p[i], broken[i] = 0.0, True
        cand = rng.random(cases) < cand_p
        asked = words | broken
        outs = [
            CaseOutcome(
                f"c{i}",
                route_of[i],
                (bool(base[i]),),
                (bool(cand[i]),),
                (bool(again[i]),) if asked[i] else (),
                ((bool(base[i]), bool(again[i])),) if asked[i] else (),
            )
            for i in range(cases)
        ]
        with memo.active():
            decision = _decided(
                {"cat": {"check": outs}}, dict.fromkeys(sorted(set(route_of)), 0), alpha=alpha, noise_source="baseline_again"
            )
        results = {r: d.passed for r, d in decision.routes.items()}
        failed += any(v is False for v in results.values())
        undecided += not any(v is False for v in results.values()) and any(v is None for v in results.values())
        if per_route:
            every += all(results[f"r{r}"] is False for r in range(routes))
    return RouteFigures(failed / trials, every / trials, undecided / trials)


@dataclass(frozen=True)
class SampledFigures:
    """Shares of simulated runs deciding each way, and the samples per side per case they spent on average."""

    drop: float
    no_drop: float
    undecided: float
    mean_samples: float


def simulate_sampled(
    *,
    cases: int = 30,
    low: float = 0.5,
    high: float = 0.95,
    drop: float = 0.0,
    run: RunOptions | None = None,
    trials: int = 500,
    seed: int = 0,
) -> SampledFigures:
    """A category of sampled cases whose baseline pass rates spread evenly over [low, high]; the candidate's are `drop` lower.

    Sampled in rounds as `pipeline._sampling` does (every case of the
    undecided category gets the next round, until the decision says it is
    decided or the budget of `run` is spent), and decided by the product's
    decision. With `run.repeats` above 1 it is the fixed design.
    """
    run = run or RunOptions()
    design: Design = design_for(run)
    rng = np.random.default_rng(seed)
    p = np.linspace(low, high, cases)
    q = np.clip(p - drop, 0.0, 1.0)
    reps = tuple(range(design.looks[-1]))
    counts = {"drop": 0, "no_drop": 0, "undecided": 0}
    spent = 0
    for _ in range(trials):
        b = rng.random((cases, design.looks[-1])) < p[:, None]
        c = rng.random((cases, design.looks[-1])) < q[:, None]
        decision = None
        for n in design.looks:
            outs = [
                CaseOutcome(f"c{i}", "r", tuple(map(bool, b[i, :n])), tuple(map(bool, c[i, :n])), (), (), True, reps[:n], reps[:n])
                for i in range(cases)
            ]
            decision = _decided({"cat": {"check": outs}}, {}, design=design)
            if not decision.undecided:
                break
        assert decision is not None
        outcome = decision.categories["cat"].checks["check"].sampled
        assert outcome is not None
        counts[outcome] += 1
        spent += n
    return SampledFigures(counts["drop"] / trials, counts["no_drop"] / trials, counts["undecided"] / trials, spent / trials)


@dataclass(frozen=True)
class LikelihoodFigures:
    """Shares of simulated runs whose likelihood cell found a shift, ruled one out, or stayed undecided; samples spent."""

    shift: float
    no_shift: float
    undecided: float
    mean_samples: float


def simulate_likelihood(
    *,
    cases: int = 16,
    shift: float = 0.0,
    between_sd: float = 0.4,
    within_sd: float = 0.35,
    candidate_sd: float | None = None,
    run: RunOptions | None = None,
    trials: int = 500,
    seed: int = 0,
) -> LikelihoodFigures:
    """A sampled category under the baseline model: each case's level spread by `between_sd`, its samples by `within_sd`.

    The candidate's samples are `shift` nats per token away (and spread by
    `candidate_sd`, the baseline's by default). Sampled in rounds as
    `pipeline._sampling` does, and decided by the product's evidence builder
    and `decide_quality`: the figures are what a run would decide. With no
    shift and the same spread (exchangeable scores), the share that found a
    shift is the false-alarm rate.
    """
    run = run or RunOptions()
    design: Design = design_for(run)
    rng = np.random.default_rng(seed)
    top = design.looks[-1]
    counts = {"drop": 0, "no_drop": 0, "undecided": 0}
    spent = 0
    for _ in range(trials):
        level = rng.normal(-1.5, between_sd, cases)
        b = level[:, None] + rng.normal(0, within_sd, (cases, top))
        c = level[:, None] + shift + rng.normal(0, candidate_sd if candidate_sd is not None else within_sd, (cases, top))
        decision = None
        for n in design.looks:
            likelihood = {
                "cat": [
                    ShiftCase(f"c{i}", "r", tuple((r, float(b[i, r])) for r in range(n)), tuple((r, float(c[i, r])) for r in range(n)))
                    for i in range(cases)
                ]
            }
            evidence = quality_evidence({}, design=design, describe=False, likelihood=likelihood, category_routes={"cat": {"r"}})
            decision = decide_quality(evidence, {"r": 0})
            if not decision.undecided:
                break
        assert decision is not None
        finding = decision.categories["cat"].likelihood
        assert finding is not None
        counts[finding.outcome] += 1
        spent += n
    return LikelihoodFigures(counts["drop"] / trials, counts["no_drop"] / trials, counts["undecided"] / trials, spent / trials)
