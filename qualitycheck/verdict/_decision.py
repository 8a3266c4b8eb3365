"""The quality decision: every route and category decided in one function, `decide_quality`, from typed evidence.

The statistics (`verdict._stats`) say what each (category, check) shows; this
module says what that means for the release, and nothing else decides it:

- **a route** fails its `max_quality_regression_cases` when its greedy
  regressions exceed what the pooled noise floor allows by more than the
  threshold (`regression_allowance`: an exact test, calibrated however few
  pairs the floor has), or when a sampled cell of its cases dropped after
  Holm. It is undecided when its regressions fit the allowance only because
  the floor has too few pairs to rule noise out (the floor's measured rate,
  `supported_allowance`, explains fewer), or when a sampled cell of it is
  undecided. Otherwise it passes;
- **a regression** is *tolerated* only in a route that passed: within the
  threshold, or explained by a measured disagreement of the floor. A floor
  that measured no disagreement explains nothing, so it tolerates nothing:
  its regressions either fail the route or leave it undecided, and the
  words "explained by the measured noise floor" appear only beside the
  regressions its measured disagreements explain;
- **a category** fails on a counted regression in a failed route, a sampled
  drop or an inferior check; it is inconclusive when the evidence cannot
  decide; otherwise it passes;
- **a sampled cell** counts as a drop only when its Holm-adjusted p-value is
  below alpha; the sampling rounds ask for more samples of the cells still
  undecided before Holm (`QualityDecision.undecided`).

The offline gate (`verdict._summary`), the canary's live windows
(`canary._quality`) and the simulations of `bench/` all build their evidence
with `quality_evidence` and call `decide_quality`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from qualitycheck.verdict._floor import NoiseFloor, NoiseSource, RouteQuality
from qualitycheck.verdict._gate import ALL_ROUTES
from qualitycheck.verdict._outcomes import CaseOutcome
from qualitycheck.verdict._sequential import Design
from qualitycheck.verdict._stats import CheckStats, SampledStats, quality_stats
from qualitycheck.verdict._tests import ALPHA

__all__ = [
    "ALL_ROUTES",
    "HUMAN_CHECK",
    "CategoryDecision",
    "CheckDecision",
    "QualityDecision",
    "QualityEvidence",
    "RouteDecision",
    "SampledFinding",
    "decide_quality",
    "quality_evidence",
    "sampled_outcome",
]

HUMAN_CHECK = "human"
"""The check human spot-checks become (`verdict._human_summary.human_check_stats`)."""
_LISTED = 20
"""Regression cases a route's message names; the rest are counted."""

Verdict = Literal["pass", "fail", "inconclusive"]
GreedyOutcome = Literal["fail", "thin_floor", "pass"]


# ------------------------------------------------------------------ the evidence
@dataclass(frozen=True)
class QualityEvidence:
    """What the quality decision reads: every cell's statistics, the pooled floor, every route weighed against it."""

    cells: Mapping[str, Mapping[str, CheckStats]]
    """category → check → its statistics (sampled cells with their Holm-adjusted p-values)."""
    floor: NoiseFloor
    """The deployment's greedy floor, pooled over the run."""
    routes: Mapping[str, RouteQuality]
    """route → its greedy regressions against the pooled floor, with the allowance and what the floor's rate supports."""
    category_routes: Mapping[str, frozenset[str]]
    """category → the routes of its cases."""
    scored_routes: frozenset[str]
    """Routes with a check decided on both sides (or whose answers were all identical, so no check could differ)."""
    identical_rates: Mapping[str, float | None] = field(default_factory=dict)
    """category → share of its pairs with identical answers (a category without checks passes only when all are)."""
    alpha: float = ALPHA

    def within(self, cases: Collection[str], scored_routes: Collection[str]) -> QualityEvidence:
        """The evidence of `cases` only (a canary's window), weighed against the floor and allowances of the whole run.

        The regressions are those among `cases`; the floor, each route's
        allowance and what its measured rate supports stay those measured
        over everything stored, so a window counts what the offline gate
        counts. A sampled cell is kept when it dropped on a case of the
        window; its test is the whole run's.
        """
        keep = set(cases)
        cells: dict[str, dict[str, CheckStats]] = {}
        for cat, by_check in self.cells.items():
            for name, s in by_check.items():
                kept = {r: [i for i in ids if i in keep] for r, ids in s.routes.items()}
                sampled = s.sampled
                if sampled is not None and not any(c in keep for c, _, _ in sampled.drops):
                    sampled = None
                cells.setdefault(cat, {})[name] = dataclasses.replace(
                    s,
                    regressions=[i for i in s.regressions if i in keep],
                    routes={r: ids for r, ids in kept.items() if ids},
                    sampled=sampled,
                )
        routes = {r: dataclasses.replace(q, regressions=tuple(i for i in q.regressions if i in keep)) for r, q in self.routes.items()}
        return dataclasses.replace(self, cells=cells, routes=routes, scored_routes=frozenset(scored_routes))


def quality_evidence(
    outcomes: Mapping[str, Mapping[str, Sequence[CaseOutcome]]],
    *,
    category_routes: Mapping[str, Collection[str]] | None = None,
    identical_routes: Collection[str] = (),
    identical_rates: Mapping[str, float | None] | None = None,
    margins: Mapping[str, float] | None = None,
    seed: int = 0,
    alpha: float = ALPHA,
    noise_source: NoiseSource | None = None,
    design: Design | None = None,
    describe: bool = True,
    human: Mapping[str, CheckStats] | None = None,
) -> QualityEvidence:
    """The one builder of the decision's evidence, from the cases' outcomes (category → check → outcomes).

    Without `category_routes`, a category's routes are those of its cases.
    A route is scored when a check was decided on both sides for a case of
    its categories, or it is among `identical_routes` (every answer
    identical: no check could differ). `human` adds each reviewed category's
    `human` cell after the statistics (it is weighed against the reviewers'
    own floor, not the pooled one). `describe=False` computes only what the
    decision reads.
    """
    stats = quality_stats(outcomes, margins=margins, seed=seed, alpha=alpha, noise_source=noise_source, design=design, describe=describe)
    cells = stats.cells
    if category_routes is None:
        routes_of: dict[str, set[str]] = {}
        for cat, by_check in outcomes.items():
            for outs in by_check.values():
                routes_of.setdefault(cat, set()).update(o.route for o in outs)
        category_routes = routes_of
    scored = {*identical_routes}
    scored.update(r for cat, by_check in cells.items() if any(s.n for s in by_check.values()) for r in category_routes.get(cat, ()))
    for cat, cell in (human or {}).items():
        cells.setdefault(cat, {})[HUMAN_CHECK] = cell
    return QualityEvidence(
        cells=cells,
        floor=stats.floor,
        routes=stats.routes,
        category_routes={cat: frozenset(rs) for cat, rs in category_routes.items()},
        scored_routes=frozenset(scored),
        identical_rates=dict(identical_rates or {}),
        alpha=alpha,
    )


# ------------------------------------------------------------------ the decision
@dataclass(frozen=True)
class SampledFinding:
    """One (category, check) cell's sampled cases, as the quality guardrail of their routes reads them."""

    category: str
    check: str
    outcome: Literal["drop", "no_drop", "undecided"]
    """After Holm across the run's sampled cells."""
    message: str
    """The evidence in a sentence: both rates, the drop's bounds, p, and the cases with the largest drops."""
    cases: tuple[str, ...] = ()
    """For a drop: the cases whose pass rate fell (the regression cases it counts)."""


@dataclass(frozen=True)
class RouteDecision:
    """One route's quality guardrail (`max_quality_regression_cases`), decided."""

    route: str
    threshold: int
    passed: bool | None
    """None: undecided, or not evaluated (no check decided on both sides); never counted as passed."""
    observed: int | None
    """Regressions counted against the threshold (beyond what measured noise explains, and the sampled drops' cases)."""
    message: str
    greedy: GreedyOutcome | None
    """What the greedy regressions alone decide (None: not evaluated)."""
    regressions: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Greedy regression case → the checks it regressed on."""
    allowance: int = 0
    """The regressions the pooled floor's exact test cannot tell from noise."""
    explained: int = 0
    """The regressions the floor's measured disagreements themselves explain (0 when it measured none)."""


@dataclass(frozen=True)
class CheckDecision:
    """One (category, check): which of its regressions count, which are tolerated, and its sampled outcome after Holm."""

    regressions: tuple[str, ...]
    """Greedy regressions, then the cases whose pass rate fell in a sampled drop."""
    tolerated: tuple[str, ...]
    """Regressions that do not count: in a route that passed (within its threshold, or explained by measured noise)."""
    beyond_floor: int
    """Regressions beyond what the measured noise floor explains, with a sampled drop's cases."""
    sampled: Literal["drop", "no_drop", "undecided"] | None = None
    finding: SampledFinding | None = None


@dataclass(frozen=True)
class CategoryDecision:
    verdict: Verdict
    reason: str
    """Why, in words a release manager reads."""
    checks: Mapping[str, CheckDecision]
    would_decide: str | None = None
    """For an inconclusive category: what evidence would decide it."""


@dataclass(frozen=True)
class QualityDecision:
    routes: Mapping[str, RouteDecision]
    """route (or '*') → its quality guardrail, for every threshold asked."""
    categories: Mapping[str, CategoryDecision]
    undecided: Mapping[str, tuple[str, ...]]
    """category → its sampled checks still undecided on the samples taken, before Holm: the sampling rounds' rule."""


def sampled_outcome(sp: SampledStats) -> Literal["drop", "no_drop", "undecided"]:
    """A sampled cell's outcome: a drop only when its Holm-adjusted p-value is below alpha; one Holm does not support is undecided."""
    if sp.decision.outcome == "drop":
        return "drop" if sp.p_value_holm is not None and sp.p_value_holm < sp.alpha else "undecided"
    return sp.decision.outcome


def decide_quality(evidence: QualityEvidence, thresholds: Mapping[str, int]) -> QualityDecision:
    """Every route of `thresholds` (route, or '*' for all, → max_quality_regression_cases) and every category, decided.

    Routes without a threshold are not gated on quality: their regressions
    are listed, and tolerated. See the module docstring for the rules.
    """
    per_route = _route_regressions(evidence)
    findings = _findings(evidence)
    routes = {route: _decide_route(evidence, per_route, findings, route, t) for route, t in thresholds.items()}
    every = set().union(*evidence.category_routes.values()) if evidence.category_routes else set()
    counted: dict[str, GreedyOutcome] = {}
    for d in routes.values():
        if d.greedy in ("fail", "thin_floor"):
            for r in every if d.route == ALL_ROUTES else {d.route}:
                if counted.get(r) != "fail":
                    counted[r] = d.greedy
    categories = {
        cat: _decide_category(evidence, cat, evidence.cells.get(cat, {}), counted)
        for cat in sorted(evidence.category_routes.keys() | evidence.cells.keys())
    }
    undecided: dict[str, tuple[str, ...]] = {}
    for cat, cells in evidence.cells.items():
        names = tuple(n for n, s in cells.items() if s.sampled is not None and s.sampled.decision.outcome == "undecided")
        if names:
            undecided[cat] = names
    return QualityDecision(routes, categories, undecided)


@dataclass
class _RouteRegressions:
    cases: dict[str, list[str]] = field(default_factory=dict)
    allowance: int = 0
    supported: int = 0


def _route_regressions(ev: QualityEvidence) -> dict[str, _RouteRegressions]:
    """Per route: its greedy regressions (case → checks) and the allowance and support its floors give them.

    The machine checks' allowance is the route's, against the deployment's
    one greedy floor (`RouteQuality`). A human-reported loss (`human` check)
    is evidence that its divergence is a real loss, so the machine checks'
    floor cannot explain it away: in a route with human regressions, the
    machine allowance covers only cases no human reported, and the
    reviewers' own allowance (attention checks) covers theirs.
    """
    out: dict[str, _RouteRegressions] = {}
    human: dict[str, int] = {}
    human_cases: dict[str, set[str]] = {}
    for cells in ev.cells.values():
        for s in cells.values():
            for route, ids in s.routes.items():
                per = out.setdefault(route, _RouteRegressions()).cases
                for i in ids:
                    per.setdefault(i, []).append(s.check)
                if s.check == HUMAN_CHECK and ids:
                    share = s.allowance if len(s.routes) == 1 else s.allowance * len(ids) // len(s.regressions)
                    human[route] = max(human.get(route, 0), share)
                    human_cases.setdefault(route, set()).update(ids)
    for route in {r for r, q in ev.routes.items()} | human.keys():
        rr = out.setdefault(route, _RouteRegressions())
        q = ev.routes.get(route)
        machine, supported = (q.allowance, q.supported) if q is not None else (0, 0)
        if route not in human_cases:
            rr.allowance, rr.supported = machine, supported
            continue
        machine_only = len(set(rr.cases) - human_cases[route])
        own = min(human.get(route, 0), len(human_cases[route]))
        rr.allowance = min(machine, machine_only) + own
        rr.supported = min(supported, machine_only) + own
    return out


def _findings(ev: QualityEvidence) -> dict[str, list[SampledFinding]]:
    """route → the findings of the sampled cells its cases are in: a drop fails it, an undecided test leaves it undecided."""
    out: dict[str, list[SampledFinding]] = {}
    for cat, cells in ev.cells.items():
        for s in cells.values():
            if s.sampled is not None:
                finding = sampled_finding(s)
                for route in s.sampled.routes or ev.category_routes.get(cat, frozenset()):
                    out.setdefault(route, []).append(finding)
    return out


def _floor_words(floor: NoiseFloor) -> tuple[str, str]:
    """The pooled floor's figures for messages, and what would give it more pairs."""
    if floor.measured_by == "control":
        return (
            f"the control decided a check differently from the baseline on {floor.disagreements} of {floor.pairs} cases",
            "more cases, or --repeats N (every case asked N times of both), would decide",
        )
    if floor.measured_by == "repeats":
        return (
            f"{floor.disagreements} of {floor.pairs} pairs of the baseline's repeats decided a check differently",
            "more repeats or more cases would decide",
        )
    advice = "asking every case twice (--control URL) or more cases would decide"
    if floor.measured_by is not None:
        return f"{floor.disagreements} of {floor.pairs} cases asked again decided a check differently the second time", advice
    return "", advice


def _decide_route(
    ev: QualityEvidence,
    per_route: Mapping[str, _RouteRegressions],
    findings: Mapping[str, list[SampledFinding]],
    route: str,
    threshold: int,
) -> RouteDecision:
    """Greedy regressions beyond the pooled floor, and sampled categories whose pass rate dropped."""
    name = sorted(ev.scored_routes) if route == ALL_ROUTES else [route]
    if not any(r in ev.scored_routes for r in name):
        return RouteDecision(
            route, threshold, None, None, "not evaluated: no check was decided on both the baseline and the candidate", None
        )
    cases: dict[str, list[str]] = {}
    allowance = supported = 0
    for r in name:
        rr = per_route.get(r)
        if rr is None:
            continue
        for case_id, checks in rr.cases.items():
            cases.setdefault(case_id, []).extend(checks)
        allowance += rr.allowance
        supported += rr.supported
    explained = min(supported, allowance)
    needed = len(cases) - threshold
    greedy: GreedyOutcome = "fail" if len(cases) - allowance > threshold else "thin_floor" if needed > 0 and needed > supported else "pass"
    unique: dict[tuple[str, str], SampledFinding] = {}
    for r in name:
        for f in findings.get(r, []):
            unique.setdefault((f.category, f.check), f)
    drops = [f for f in unique.values() if f.outcome == "drop"]
    undecided = [f for f in unique.values() if f.outcome == "undecided"]
    beyond = max(0, len(cases) - explained)
    listed = "; ".join(f"{i} ({', '.join(sorted(set(c)))})" for i, c in sorted(cases.items())[:_LISTED])
    floor_text, advice = _floor_words(ev.floor)
    floor = f" ({floor_text})" if floor_text else ""
    regs = {i: tuple(c) for i, c in cases.items()}

    def decided(passed: bool | None, observed: int | None, message: str) -> RouteDecision:
        return RouteDecision(route, threshold, passed, observed, message, greedy, regs, allowance, explained)

    if drops or greedy == "fail":
        parts = []
        if drops:
            parts.append("sampled pass rate dropped: " + "; ".join(f.message for f in drops))
        if greedy == "fail":
            more = f" and {len(cases) - _LISTED} more" if len(cases) > _LISTED else ""
            if explained:
                noise = f" after {explained} explained by the measured noise floor{floor}"
            elif allowance and floor_text:
                noise = f" (the measured noise floor explains none of them: {floor_text})"
            else:
                noise = ""
            parts.append(f"{beyond} case(s) regressed beyond the noise floor{noise} (max {threshold}): {listed}{more}")
        return decided(False, beyond + len({c for f in drops for c in f.cases}), "; ".join(parts))
    if greedy == "thin_floor":
        explains = f"its measured disagreements explain {explained}" if explained else "it measured no disagreement to explain them"
        return decided(
            None,
            None,
            f"undecided: {len(cases)} regression case(s) that the measured noise does not explain{floor}: {explains}, and it "
            f"has too few pairs to tell them from noise either ({allowance} such flips could be noise at this many pairs); "
            f"{advice}: {listed}",
        )
    if undecided:
        return decided(
            None,
            None,
            "undecided: sampled pass rates could not be told apart within the budget: " + "; ".join(f.message for f in undecided),
        )
    if cases:
        msg = (
            f"no regression beyond the noise floor: {len(cases)} regression case(s) tolerated, as the measured A/A "
            f"noise{floor} explains up to {explained}: {listed}"
            if needed > 0
            else f"{len(cases)} regression case(s), within the maximum {threshold}: {listed}"
        )
    else:
        msg = "no regression beyond the noise floor"
    if unique:
        msg += "; sampled pass rates: " + "; ".join(f.message for f in unique.values())
    return decided(True, beyond, msg)


def _drop_cases(s: CheckStats) -> list[str]:
    """The cases whose pass rate fell in a sampled drop: counted as the cell's regressions (the drop is the category's, not noise)."""
    if s.sampled is None or sampled_outcome(s.sampled) != "drop":
        return []
    return [c for c, _, _ in s.sampled.drops if c not in s.regressions]


def _decide_category(
    ev: QualityEvidence, category: str, cells: Mapping[str, CheckStats], counted: Mapping[str, GreedyOutcome]
) -> CategoryDecision:
    """fail on a counted regression, a sampled drop or an inferior check; inconclusive when the evidence cannot decide; else pass.

    A regression counts when the quality guardrail of its route failed (the
    route's regressions were weighed together against the pooled floor, and
    which of them the noise explains cannot be told apart case by case, so
    they count together or not at all), and also when its route was left
    undecided because the floor cannot explain it; only the first fails the
    category. Inconclusive, never pass: a sampled check its samples could
    not decide, regressions its floor's pairs are too few to decide,
    non-inferiority not shown, or answers that differ with no check to
    judge them.
    """
    checks: dict[str, CheckDecision] = {}
    failed: list[str] = []
    thin: list[str] = []
    for name, s in cells.items():
        in_failed = [i for r, ids in s.routes.items() if counted.get(r) == "fail" for i in ids]
        in_thin = [i for r, ids in s.routes.items() if counted.get(r) == "thin_floor" for i in ids]
        count = set(in_failed) | set(in_thin)
        drops = _drop_cases(s)
        finding = sampled_finding(s) if s.sampled is not None else None
        checks[name] = CheckDecision(
            regressions=(*s.regressions, *drops),
            tolerated=tuple(i for i in s.regressions if i not in count),
            beyond_floor=s.regressions_beyond_floor + len(drops),
            sampled=sampled_outcome(s.sampled) if s.sampled is not None else None,
            finding=finding,
        )
        if in_failed:
            failed.append(f"{s.check}: {s.regressions_beyond_floor} regression(s) beyond the noise floor")
        if s.non_inferiority == "inferior":
            failed.append(f"{s.check}: pass rate worse than the non-inferiority margin {s.margin}")
        if finding is not None and finding.outcome == "drop":
            failed.append(finding.message)
        if in_thin and not in_failed:
            thin.append(
                f"{s.check}: regression(s) {', '.join(dict.fromkeys(in_thin))} not explained by the measured noise floor, "
                "which has too few pairs to tell them from noise"
            )
    if failed:
        return CategoryDecision("fail", "; ".join(failed), checks)
    undecided = [f"{s.check}: too few cases to show non-inferiority" for s in cells.values() if s.non_inferiority == "inconclusive"]
    undecided += [c.finding.message for c in checks.values() if c.finding is not None and c.finding.outcome == "undecided"]
    undecided += thin
    if undecided:
        why = "; ".join(undecided)
        return CategoryDecision("inconclusive", why, checks, _would_decide(cells, why))
    if not any(s.n for s in cells.values()):
        if ev.identical_rates.get(category) == 1.0:
            return CategoryDecision("pass", "no checks, but every answer is identical to the baseline's", checks)
        why = "no check decides these cases and the answers differ from the baseline's"
        return CategoryDecision("inconclusive", why, checks, _would_decide(cells, why))
    sampled = [c.finding for c in checks.values() if c.finding is not None]
    if sampled:
        return CategoryDecision(
            "pass", "no regression beyond the noise floor; sampled pass rates: " + "; ".join(f.message for f in sampled), checks
        )
    return CategoryDecision("pass", "no regression beyond the noise floor", checks)


def sampled_finding(s: CheckStats) -> SampledFinding:
    """One sampled cell in a sentence: both rates, the drop with its repeated confidence bounds, p, the largest drops."""
    sp = s.sampled
    assert sp is not None
    d = sp.decision
    delta = f"Δ {-d.estimate * 100:+.1f}" if d.estimate is not None else "Δ n/a"
    bounds = f" [{-d.high * 100:+.1f}, {-d.low * 100:+.1f}]" if d.low is not None and d.high is not None else ""
    holm = f", Holm {sp.p_value_holm:.2g}" if sp.p_value_holm is not None else ""
    msg = (
        f"{s.category}/{s.check}: {sp.baseline_pass_rate:.0%} → {sp.candidate_pass_rate:.0%} over {sp.cases} sampled case(s) × "
        f"{d.samples} samples per side, {delta} points{bounds}, one-sided p = {d.p_value:.2g}{holm}"
    )
    outcome = sampled_outcome(sp)
    if outcome == "drop":
        worst = ", ".join(f"{cid} {b:.0%}→{c:.0%}" for cid, b, c in sp.drops[:5])
        msg += f"; largest drops: {worst}"
    elif outcome == "undecided":
        msg += f"; {to_decide(sp)}"
    return SampledFinding(s.category, s.check, outcome, msg, tuple(c for c, _, _ in sp.drops) if outcome == "drop" else ())


def to_decide(sp: SampledStats) -> str:
    """What would decide an undecided sampled cell: the cases, or samples per case, its information falls short of."""
    d = sp.decision
    if d.outcome == "drop":  # significant alone, not after Holm across the run's sampled cells
        return f"significant alone (p = {d.p_value:.2g}) but not after Holm across the run's sampled checks (Holm {sp.p_value_holm:.2g})"
    if d.mde is None or d.mde <= 0:
        return "no sample of these cases was decided on both sides"
    want = d.mde / sp.detectable_drop
    if want <= 1:
        return f"the estimate sits between the bounds at the last look taken ({d.samples} samples per side)"
    more_cases = math.ceil(sp.cases * want * want)
    more_samples = math.ceil(d.samples * want * want)
    return (
        f"it could detect a drop of {d.mde * 100:.0f} points, not {sp.detectable_drop * 100:.0f}: about {more_cases} cases at "
        f"this budget, or {more_samples} samples per case (run.max_samples_per_case), would decide"
    )


def _would_decide(cells: Mapping[str, CheckStats], why: str) -> str:
    """What would decide an inconclusive category, in the terms a user can act on."""
    out = []
    for s in cells.values():
        if s.sampled is not None and sampled_outcome(s.sampled) == "undecided":
            out.append(f"{s.check}: {to_decide(s.sampled)}")
        if s.non_inferiority == "inconclusive":
            out.append(f"{s.check}: more cases, until the CI lies wholly above −{s.margin} or below it")
    if "too few pairs" in why:
        out.append("the noise floor's pairs: more cases, --control URL (a second baseline replica asked every case) or --repeats N")
    if "no check decides" in why:
        out.append("a check on these cases (exact: true for greedy ones, or a format or reference check)")
    return "; ".join(out)
