"""Each (category, check) cell's statistics, and every route's greedy regressions against the pooled floor.

A cell holds the paired figures of its cases (rates, delta, CI, p, MDE: the
`Comparison` record of DESIGN.md), the classification of its greedy cases
(regressions, improvements, flaky cases, the allowance the pooled floor gives
them) and the distribution test of its sampled cases. What all of it decides
is not decided here: `verdict._decision.decide_quality` reads these figures
and decides every route and category in one place.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from qualitycheck.verdict._floor import (
    NoiseFloor,
    NoiseSource,
    RouteQuality,
    can_regress,
    noise_floor,
    pooled_floor,
    regression_allowance,
    supported_allowance,
)
from qualitycheck.verdict._likelihood import DEFAULT_SHIFT_NATS, ShiftCase, ShiftStats, shift_stats
from qualitycheck.verdict._outcomes import CaseOutcome
from qualitycheck.verdict._sequential import Design, SampledDecision, decide_cell
from qualitycheck.verdict._tests import ALPHA, holm, minimum_detectable_effect, non_inferiority, paired_bootstrap_ci, paired_p_value

__all__ = [
    "CaseClassification",
    "CheckStats",
    "QualityStats",
    "SampledStats",
    "check_stats",
    "classify_cases",
    "quality_stats",
    "route_quality",
    "sampled_stats",
]


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
    """What the looks decided, at the look they stopped at (before Holm across the run's sampled cells)."""
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
        if self.decision.outcome == "no_drop":
            return self.detectable_drop
        return self.decision.mde


@dataclass
class CaseClassification:
    """Which greedy cases of one (category, check) regressed, improved or are flaky, and the noise allowance."""

    regressions: list[str]
    improvements: list[str]
    flaky: list[str]
    flaky_regressions: list[str]
    routes: dict[str, list[str]]
    """route → greedy regression case ids (for per-route guardrails)."""
    noise: NoiseFloor
    allowance: int
    """The regressions the floor's exact test cannot tell from noise (`regression_allowance`)."""
    supported: int
    """The regressions the floor's measured disagreements themselves explain (`supported_allowance`; 0 when it measured none)."""

    @property
    def regressions_beyond_floor(self) -> int:
        """Regressions beyond what the measured noise explains: a floor that measured no disagreement explains none."""
        return max(0, len(self.regressions) - min(self.allowance, self.supported))


@dataclass
class CheckStats(CaseClassification):
    """The comparison of one check in one category (the `Comparison` record of DESIGN.md).

    Rates, delta, CI and p cover every case of the cell. Greedy cases are
    classified one by one (the inherited `CaseClassification`: regressions,
    flaky, the allowance against the pooled floor); sampled cases are
    judged together, in `sampled`.
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
    mde: float | None
    margin: float | None
    non_inferiority: str | None
    p_value_holm: float | None = None
    sampled: SampledStats | None = None
    """The distribution test of the cell's sampled cases; None when it has none."""


def classify_cases(
    outcomes: Sequence[CaseOutcome],
    alpha: float = ALPHA,
    noise_source: NoiseSource | None = None,
    pooled: NoiseFloor | None = None,
) -> CaseClassification:
    """The greedy cases of one cell: regressions among cases the baseline agrees with itself on.

    A case regresses when its pass rate drops by more than half (one repeat:
    pass → fail). Flaky cases never count; their drops are listed apart. The
    allowance is how many regressions the measured noise floor alone would
    produce among the cases that could regress (`can_regress`), at level
    `alpha`: the `pooled` floor of the whole run when given (the gate's),
    else this cell's own.

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
        eligible += can_regress(o, partial, o.case_id in flaky)
        if o.case_id in flaky:
            if drop > 0.5:
                flaky_reg.append(o.case_id)
            continue
        if drop > 0.5:
            regressions.append(o.case_id)
            routes.setdefault(o.route, []).append(o.case_id)
        elif -drop > 0.5:
            improvements.append(o.case_id)
    against = pooled or floor
    return CaseClassification(
        regressions,
        improvements,
        sorted(flaky),
        flaky_reg,
        routes,
        floor,
        regression_allowance(eligible, against, alpha),
        supported_allowance(eligible, against, alpha) if regressions else 0,
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
    describe: bool = True,
) -> CheckStats:
    """Everything the gate and the report need for one (category, check).

    Greedy cases are classified against the `pooled` floor; sampled cases
    are tested together with `design` (the run's looks; by default the
    fixed number of samples they have). `describe=False` leaves out what
    only describes the cell (CI, p, MDE, non-inferiority): the sampling
    rounds and the simulations ask what the cell decides, thousands of times.
    """
    greedy = [o for o in outcomes if not o.sampled]
    cls = classify_cases(greedy, alpha, noise_source, pooled)
    n = len(outcomes)
    b = [o.b_rate for o in outcomes]
    c = [o.c_rate for o in outcomes]
    k = [sum(o.control) / len(o.control) for o in outcomes if o.control]
    sampled = None
    if len(greedy) < n:
        if design is None:
            most = max(max(len(o.baseline), len(o.candidate)) for o in outcomes if o.sampled)
            design = Design((most,), margin=margin)
        elif margin is not None and design.margin != margin:
            design = dataclasses.replace(design, margin=margin)
        sampled = sampled_stats(outcomes, design, alpha)
    ci = ni_ci = None
    mde = p = None
    if describe and n:
        ci = ni_ci = paired_bootstrap_ci(b, c, seed=seed)
        p = paired_p_value(outcomes)
        mde = minimum_detectable_effect(n, float(np.mean([abs(x - y) for x, y in zip(b, c, strict=True)])), alpha)
        # the margin over the greedy cases' CI: the sampled ones are tested against it by their own test
        if sampled is not None:
            ni_ci = None
            if greedy and margin is not None:
                ni_ci = paired_bootstrap_ci([o.b_rate for o in greedy], [o.c_rate for o in greedy], seed=seed)
    if sampled is not None:  # a sampled case whose baseline samples disagree is flaky too (listed, never a regression)
        cls.flaky = sorted({*cls.flaky, *noise_floor([o for o in outcomes if o.sampled]).flaky})
    return CheckStats(
        **{f.name: getattr(cls, f.name) for f in dataclasses.fields(CaseClassification)},
        category=category,
        check=check,
        n=n,
        baseline_pass_rate=float(np.mean(b)) if n else None,
        candidate_pass_rate=float(np.mean(c)) if n else None,
        control_pass_rate=float(np.mean(k)) if k else None,
        delta=float(np.mean(c) - np.mean(b)) if n else None,
        ci=ci,
        p_value=p,
        mde=mde,
        margin=margin,
        non_inferiority=non_inferiority(ni_ci, margin) if ni_ci else None,
        sampled=sampled,
    )


@dataclass
class QualityStats:
    """The quality statistics of a run: every (category, check) cell, the pooled greedy floor, and every route against it."""

    cells: dict[str, dict[str, CheckStats]]
    floor: NoiseFloor
    """The deployment's greedy floor, pooled over the run (`pooled_floor`)."""
    routes: dict[str, RouteQuality]
    shifts: dict[str, ShiftStats] = field(default_factory=dict)
    """category → its sampled cases' likelihood cell (`verdict._likelihood`), when the likelihood stage scored them."""


def quality_stats(
    outcomes: Mapping[str, Mapping[str, Sequence[CaseOutcome]]],
    *,
    margins: Mapping[str, float] | None = None,
    seed: int = 0,
    alpha: float = ALPHA,
    noise_source: NoiseSource | None = None,
    design: Design | None = None,
    describe: bool = True,
    likelihood: Mapping[str, Sequence[ShiftCase]] | None = None,
    detectable_shift: float = DEFAULT_SHIFT_NATS,
) -> QualityStats:
    """Every cell's statistics, with Holm-adjusted p-values across all cells (and across the sampled cells' tests).

    The greedy floor is pooled over the run first, so every cell's
    allowance and every route's are measured against the same evidence.
    Each category with `likelihood` cases gets a likelihood cell, tested
    with the same looks (`design`, or one look at the samples there are);
    its p-value joins the sampled cells' Holm family.
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
                describe=describe,
            )
    shifts: dict[str, ShiftStats] = {}
    for cat, cases in sorted((likelihood or {}).items()):
        if cases:
            most = max(rep for case in cases for rep, _ in (*case.baseline, *case.candidate)) + 1
            looks = design if design is not None else Design((most,))
            shifts[cat] = shift_stats(cat, cases, dataclasses.replace(looks, alpha=alpha), detectable_shift, alpha)
    every = [s for per in cells.values() for s in per.values()]
    for s, p in zip(every, holm([s.p_value for s in every], alpha), strict=True):
        s.p_value_holm = p
    # Holm over the sampled cells' tests: the pass-rate cells', then the likelihood cells'
    sampled: list[SampledStats | ShiftStats] = [s.sampled for s in every if s.sampled is not None]
    sampled += shifts.values()
    for sp, p in zip(sampled, holm([sp.decision.p_value for sp in sampled], alpha), strict=True):
        sp.p_value_holm = p
    return QualityStats(cells, floor, route_quality(outcomes, cells, floor, alpha), shifts)


def route_quality(
    outcomes: Mapping[str, Mapping[str, Sequence[CaseOutcome]]],
    cells: Mapping[str, Mapping[str, CheckStats]],
    floor: NoiseFloor,
    alpha: float = ALPHA,
) -> dict[str, RouteQuality]:
    """Every route's greedy regressions (from the cells' classification) against the pooled floor.

    A case could regress on a route when it could on some check of it
    (`can_regress`, flaky on that check or not as the floor counts it), or did.
    """
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
                if not o.sampled and can_regress(o, partial, f"{cat}/{name}" in flaky_on.get(o.case_id, ())):
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
