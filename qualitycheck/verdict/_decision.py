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
from qualitycheck.verdict._likelihood import (
    DEFAULT_SHIFT_NATS,
    DivergenceClass,
    DivergenceFacts,
    DivergenceRule,
    ShiftCase,
    ShiftStats,
    classify_divergence,
)
from qualitycheck.verdict._outcomes import CaseOutcome
from qualitycheck.verdict._sequential import Design
from qualitycheck.verdict._stats import CheckStats, SampledStats, check_stats, quality_stats
from qualitycheck.verdict._tests import ALPHA

__all__ = [
    "ALL_ROUTES",
    "DIVERGENCE_CHECK",
    "HUMAN_CHECK",
    "LIKELIHOOD_CHECK",
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
DIVERGENCE_CHECK = "decisive_divergence"
"""The check greedy divergences become: a case fails it when its candidate's answer left the baseline's at a token the
baseline model would not write (`verdict._likelihood.classify_divergence`)."""
LIKELIHOOD_CHECK = "likelihood"
"""The name a category's likelihood cell goes by in findings and messages."""
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
    shifts: Mapping[str, ShiftStats] = field(default_factory=dict)
    """category → its sampled cases under the baseline model (the likelihood cell), when the likelihood stage scored them."""
    divergences: Mapping[str, tuple[DivergenceFacts, ...]] = field(default_factory=dict)
    """greedy case → its divergences from the baseline's answer under the baseline model (one per repeat that differs)."""
    divergence_rule: DivergenceRule = field(default_factory=DivergenceRule)

    def divergence_class(self, case_id: str) -> DivergenceClass | None:
        """decisive when any repeat's divergence is; near_tie when every one is; else unclear; None without a divergence."""
        classes = {classify_divergence(f, self.divergence_rule) for f in self.divergences.get(case_id, ())}
        if not classes:
            return None
        return "decisive" if "decisive" in classes else "near_tie" if classes == {"near_tie"} else "unclear"

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
        shifts = {cat: sh for cat, sh in self.shifts.items() if any(c.case_id in keep for c in sh.cases)}
        divergences = {i: d for i, d in self.divergences.items() if i in keep}
        return dataclasses.replace(
            self, cells=cells, routes=routes, scored_routes=frozenset(scored_routes), shifts=shifts, divergences=divergences
        )


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
    likelihood: Mapping[str, Sequence[ShiftCase]] | None = None,
    divergences: Sequence[DivergenceFacts] = (),
    divergence_rule: DivergenceRule | None = None,
    detectable_shift: float = DEFAULT_SHIFT_NATS,
) -> QualityEvidence:
    """The one builder of the decision's evidence, from the cases' outcomes (category → check → outcomes).

    Without `category_routes`, a category's routes are those of its cases.
    A route is scored when a check was decided on both sides for a case of
    its categories, or it is among `identical_routes` (every answer
    identical: no check could differ). `human` adds each reviewed category's
    `human` cell after the statistics (it is weighed against the reviewers'
    own floor, not the pooled one). `describe=False` computes only what the
    decision reads.

    The likelihood stage's evidence: `likelihood` (category → its sampled
    cases under the baseline model) becomes each category's likelihood cell,
    in the sampled cells' Holm family; `divergences` (greedy pairs' first
    differing tokens) become each category's `decisive_divergence` cell: a
    greedy case with a divergence fails it when the divergence is decisive
    (`divergence_rule`), with no allowance: the floor never explains a
    token the baseline would not write.
    """
    stats = quality_stats(
        outcomes,
        margins=margins,
        seed=seed,
        alpha=alpha,
        noise_source=noise_source,
        design=design,
        describe=describe,
        likelihood=likelihood,
        detectable_shift=detectable_shift,
    )
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
    by_case: dict[str, tuple[DivergenceFacts, ...]] = {}
    for f in divergences:
        by_case[f.case_id] = (*by_case.get(f.case_id, ()), f)
    evidence = QualityEvidence(
        cells=cells,
        floor=stats.floor,
        routes=stats.routes,
        category_routes={cat: frozenset(rs) for cat, rs in category_routes.items()},
        scored_routes=frozenset(scored | {r for sh in stats.shifts.values() for r in sh.routes}),
        identical_rates=dict(identical_rates or {}),
        alpha=alpha,
        shifts=stats.shifts,
        divergences=by_case,
        divergence_rule=divergence_rule or DivergenceRule(),
    )
    per_category: dict[str, list[CaseOutcome]] = {}
    for case_id, facts in by_case.items():
        f = facts[0]
        decisive = evidence.divergence_class(case_id) == "decisive"
        per_category.setdefault(f.category, []).append(CaseOutcome(case_id, f.route, (True,), (not decisive,)))
    for cat, outs in per_category.items():  # no floor: a decisive divergence is never noise
        cells.setdefault(cat, {})[DIVERGENCE_CHECK] = check_stats(cat, DIVERGENCE_CHECK, outs, seed=seed, alpha=alpha, describe=describe)
    if per_category:  # a divergence the baseline model explains is evidence of its own: its routes are scored
        explained_routes = {o.route for outs in per_category.values() for o in outs}
        evidence = dataclasses.replace(evidence, scored_routes=evidence.scored_routes | explained_routes)
    return evidence


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
    likelihood: SampledFinding | None = None
    """Its likelihood cell's finding, after Holm (None when the likelihood stage scored none of its sampled cases)."""


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
    explained = {i for rr in per_route.values() for i in rr.numerics | rr.report_only}
    categories = {
        cat: _decide_category(evidence, cat, evidence.cells.get(cat, {}), counted, explained)
        for cat in sorted(evidence.category_routes.keys() | evidence.cells.keys())
    }
    undecided: dict[str, tuple[str, ...]] = {}
    for cat in evidence.cells.keys() | evidence.shifts.keys():
        names = [n for n, s in evidence.cells.get(cat, {}).items() if s.sampled is not None and s.sampled.decision.outcome == "undecided"]
        shift = evidence.shifts.get(cat)
        if shift is not None and shift.decision.outcome == "shift":
            continue  # a changed distribution fails the category at once: more samples would not save it
        if shift is not None and shift.decision.outcome == "undecided":
            names.append(LIKELIHOOD_CHECK)
        if names:
            undecided[cat] = tuple(names)
    return QualityDecision(routes, categories, undecided)


@dataclass
class _RouteRegressions:
    cases: dict[str, list[str]] = field(default_factory=dict)
    """Every regression case of the route → the checks it regressed on."""
    decisive: set[str] = field(default_factory=set)
    """Cases whose greedy answer left the baseline's at a token the baseline would not write: counted, never noise."""
    numerics: set[str] = field(default_factory=set)
    """Cases whose every divergence is a near tie: numerics, explained case by case, never counted."""
    report_only: set[str] = field(default_factory=set)
    """Cases that regressed only on `decisive_divergence`, made report-only by the config: listed, not counted."""
    allowance: int = 0
    supported: int = 0
    """What the floors allow and support among the rest (neither decisive nor a near tie)."""

    @property
    def against_floor(self) -> int:
        return len(self.cases) - len(self.decisive) - len(self.numerics) - len(self.report_only)


def _route_regressions(ev: QualityEvidence) -> dict[str, _RouteRegressions]:
    """Per route: its greedy regressions (case → checks), what their divergences say, and what the floors allow the rest.

    The machine checks' allowance is the route's, against the deployment's
    one greedy floor (`RouteQuality`). A human-reported loss (`human` check)
    is evidence that its divergence is a real loss, so the machine checks'
    floor cannot explain it away: in a route with human regressions, the
    machine allowance covers only cases no human reported, and the
    reviewers' own allowance (attention checks) covers theirs.

    A regression whose divergence the baseline model explains is decided
    by that, whatever the floor: decisive (a token the baseline would not
    write) counts with no allowance, a near tie (numerics) is explained.
    Only the others are weighed against the floor.
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
    for route, rr in out.items():
        reviewed = human_cases.get(route, set())
        for case_id, checks in rr.cases.items():
            kind = ev.divergence_class(case_id)
            if kind == "decisive":
                only_divergence = set(checks) == {DIVERGENCE_CHECK}
                (rr.report_only if only_divergence and ev.divergence_rule.report_only else rr.decisive).add(case_id)
            elif kind == "near_tie" and case_id not in reviewed:
                rr.numerics.add(case_id)
    for route in ev.routes.keys() | human.keys():
        rr = out.setdefault(route, _RouteRegressions())
        q = ev.routes.get(route)
        machine, supported = (q.allowance, q.supported) if q is not None else (0, 0)
        if route not in human_cases:
            rr.allowance, rr.supported = machine, supported
            continue
        machine_only = len(set(rr.cases) - human_cases[route] - rr.decisive - rr.numerics - rr.report_only)
        own = min(human.get(route, 0), len(human_cases[route] - rr.decisive))
        rr.allowance = min(machine, machine_only) + own
        rr.supported = min(supported, machine_only) + own
    return out


def _findings(ev: QualityEvidence) -> dict[str, list[SampledFinding]]:
    """route → the findings of the sampled cells its cases are in: a drop or a shift fails it, an undecided test leaves it undecided."""
    out: dict[str, list[SampledFinding]] = {}
    for cat, cells in ev.cells.items():
        for s in cells.values():
            if s.sampled is not None:
                finding = sampled_finding(s)
                for route in s.sampled.routes or ev.category_routes.get(cat, frozenset()):
                    out.setdefault(route, []).append(finding)
    for cat, shift in ev.shifts.items():
        finding = shift_finding(shift)
        for route in shift.routes or ev.category_routes.get(cat, frozenset()):
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
    """Greedy regressions beyond the pooled floor or decisive, and sampled categories whose pass rate or likelihood changed."""
    name = sorted(ev.scored_routes) if route == ALL_ROUTES else [route]
    if not any(r in ev.scored_routes for r in name):
        return RouteDecision(
            route, threshold, None, None, "not evaluated: no check was decided on both the baseline and the candidate", None
        )
    cases: dict[str, list[str]] = {}
    decisive: set[str] = set()
    numerics: set[str] = set()
    report_only: set[str] = set()
    allowance = supported = 0
    for r in name:
        rr = per_route.get(r)
        if rr is None:
            continue
        for case_id, checks in rr.cases.items():
            cases.setdefault(case_id, []).extend(checks)
        decisive |= rr.decisive
        numerics |= rr.numerics
        report_only |= rr.report_only
        allowance += rr.allowance
        supported += rr.supported
    weighed = len(cases) - len(decisive) - len(numerics) - len(report_only)
    explains = min(supported, allowance)  # what the floor's measured disagreements explain, at most
    explained = min(explains, weighed)
    # the floor may tolerate up to `allowance` of the weighed ones (its exact test), and explains `explained` of them
    greedy: GreedyOutcome = (
        "fail"
        if len(decisive) + max(0, weighed - allowance) > threshold
        else "thin_floor"
        if len(decisive) + max(0, weighed - supported) > threshold
        else "pass"
    )
    unique: dict[tuple[str, str], SampledFinding] = {}
    for r in name:
        for f in findings.get(r, []):
            unique.setdefault((f.category, f.check), f)
    drops = [f for f in unique.values() if f.outcome == "drop"]
    undecided = [f for f in unique.values() if f.outcome == "undecided"]
    beyond = len(decisive) + max(0, weighed - explained)
    counted = {i: c for i, c in cases.items() if i not in numerics and i not in report_only}
    listed = "; ".join(f"{i} ({', '.join(sorted(set(c)))})" for i, c in sorted(counted.items())[:_LISTED])
    floor_text, advice = _floor_words(ev.floor)
    floor = f" ({floor_text})" if floor_text else ""
    regs = {i: tuple(c) for i, c in cases.items()}
    aside = _divergence_aside(numerics, report_only, decisive)

    def decided(passed: bool | None, observed: int | None, message: str) -> RouteDecision:
        return RouteDecision(route, threshold, passed, observed, message + aside, greedy, regs, allowance, explained)

    if drops or greedy == "fail":
        parts = []
        rates = [f for f in drops if f.check != LIKELIHOOD_CHECK]
        if rates:
            parts.append("sampled pass rate dropped: " + "; ".join(f.message for f in rates))
        if len(rates) < len(drops):
            parts.append("sampled answers changed under the baseline model: " + "; ".join(f.message for f in drops if f not in rates))
        if greedy == "fail":
            more = f" and {len(counted) - _LISTED} more" if len(counted) > _LISTED else ""
            if explained:
                noise = f" after {explained} explained by the measured noise floor{floor}"
            elif allowance and floor_text and weighed:
                noise = f" (the measured noise floor explains none of them: {floor_text})"
            else:
                noise = ""
            parts.append(f"{beyond} case(s) regressed beyond the noise floor{noise} (max {threshold}): {listed}{more}")
        return decided(False, beyond + len({c for f in drops for c in f.cases}), "; ".join(parts))
    if greedy == "thin_floor":
        measured = f"its measured disagreements explain {explained}" if explained else "it measured no disagreement to explain them"
        return decided(
            None,
            None,
            f"undecided: {weighed} regression case(s) that the measured noise does not explain{floor}: {measured}, and it "
            f"has too few pairs to tell them from noise either ({allowance} such flips could be noise at this many pairs); "
            f"{advice}: {listed}",
        )
    if undecided:
        return decided(
            None,
            None,
            "undecided: sampled pass rates could not be told apart within the budget: " + "; ".join(f.message for f in undecided),
        )
    needed = len(decisive) + weighed - threshold
    if counted:
        msg = (
            f"no regression beyond the noise floor: {len(counted)} regression case(s) tolerated, as the measured A/A "
            f"noise{floor} explains up to {explains}: {listed}"
            if needed > 0
            else f"{len(counted)} regression case(s), within the maximum {threshold}: {listed}"
        )
    else:
        msg = "no regression beyond the noise floor"
    if unique:
        msg += "; sampled pass rates: " + "; ".join(f.message for f in unique.values())
    return decided(True, beyond, msg)


def _divergence_aside(numerics: set[str], report_only: set[str], decisive: set[str]) -> str:
    """What the baseline model said of the route's divergent regressions, in a clause after the decision."""
    parts = []
    if decisive:
        parts.append(f"{len(decisive)} left the baseline's answer at a token the baseline model would not write (never noise)")
    if numerics:
        parts.append(
            f"{len(numerics)} left it at a near tie of the baseline model (numerics, not counted): {', '.join(sorted(numerics)[:5])}"
        )
    if report_only:
        parts.append(f"{len(report_only)} decisive divergence(s) reported only (likelihood.divergence_report_only)")
    return f"; of the divergent answers, {'; '.join(parts)}" if parts else ""


def _drop_cases(s: CheckStats) -> list[str]:
    """The cases whose pass rate fell in a sampled drop: counted as the cell's regressions (the drop is the category's, not noise)."""
    if s.sampled is None or sampled_outcome(s.sampled) != "drop":
        return []
    return [c for c, _, _ in s.sampled.drops if c not in s.regressions]


def _decide_category(
    ev: QualityEvidence,
    category: str,
    cells: Mapping[str, CheckStats],
    counted: Mapping[str, GreedyOutcome],
    explained: set[str],
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
        in_failed = [i for r, ids in s.routes.items() if counted.get(r) == "fail" for i in ids if i not in explained]
        in_thin = [i for r, ids in s.routes.items() if counted.get(r) == "thin_floor" for i in ids if i not in explained]
        count = set(in_failed) | set(in_thin)
        drops = _drop_cases(s)
        finding = sampled_finding(s) if s.sampled is not None else None
        weighed = [i for i in s.regressions if i not in explained]
        beyond = max(0, len(weighed) - min(s.allowance, s.supported))
        checks[name] = CheckDecision(
            regressions=(*s.regressions, *drops),
            tolerated=tuple(i for i in s.regressions if i not in count),
            beyond_floor=beyond + len(drops),
            sampled=sampled_outcome(s.sampled) if s.sampled is not None else None,
            finding=finding,
        )
        if in_failed and s.check == DIVERGENCE_CHECK:
            failed.append(f"{s.check}: {len(in_failed)} greedy answer(s) left the baseline's at a token the baseline model would not write")
        elif in_failed:
            failed.append(f"{s.check}: {beyond} regression(s) beyond the noise floor")
        if s.non_inferiority == "inferior":
            failed.append(f"{s.check}: pass rate worse than the non-inferiority margin {s.margin}")
        if finding is not None and finding.outcome == "drop":
            failed.append(finding.message)
        if in_thin and not in_failed:
            thin.append(
                f"{s.check}: regression(s) {', '.join(dict.fromkeys(in_thin))} not explained by the measured noise floor, "
                "which has too few pairs to tell them from noise"
            )
    shift = ev.shifts.get(category)
    likelihood = shift_finding(shift) if shift is not None else None
    if likelihood is not None and likelihood.outcome == "drop":
        failed.append(likelihood.message)
    if failed:
        return CategoryDecision("fail", "; ".join(failed), checks, likelihood=likelihood)
    undecided = [f"{s.check}: too few cases to show non-inferiority" for s in cells.values() if s.non_inferiority == "inconclusive"]
    undecided += [c.finding.message for c in checks.values() if c.finding is not None and c.finding.outcome == "undecided"]
    undecided += [likelihood.message] if likelihood is not None and likelihood.outcome == "undecided" else []
    undecided += thin
    if undecided:
        why = "; ".join(undecided)
        return CategoryDecision("inconclusive", why, checks, _would_decide(cells, why, shift), likelihood=likelihood)
    if not any(s.n for s in cells.values()) and likelihood is None:
        if ev.identical_rates.get(category) == 1.0:
            return CategoryDecision("pass", "no checks, but every answer is identical to the baseline's", checks)
        why = "no check decides these cases and the answers differ from the baseline's"
        return CategoryDecision("inconclusive", why, checks, _would_decide(cells, why))
    sampled = [c.finding for c in checks.values() if c.finding is not None] + ([likelihood] if likelihood is not None else [])
    if sampled:
        return CategoryDecision(
            "pass",
            "no regression beyond the noise floor; sampled pass rates: " + "; ".join(f.message for f in sampled),
            checks,
            likelihood=likelihood,
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


def shift_outcome(sh: ShiftStats) -> Literal["drop", "no_drop", "undecided"]:
    """A likelihood cell's outcome after Holm, in the sampled cells' terms: a shift (either way) fails like a drop."""
    d = sh.decision
    if d.outcome == "shift":
        return "drop" if sh.p_value_holm is not None and sh.p_value_holm < sh.alpha else "undecided"
    return "no_drop" if d.outcome == "no_shift" else "undecided"


SHIFT_WORDS = {
    "lower": "the candidate writes text the baseline model would rarely write",
    "higher": "the candidate is less varied than the baseline: its samples are more likely than the baseline's own",
}
"""What a shift means, for a release manager."""


def shift_finding(sh: ShiftStats) -> SampledFinding:
    """A likelihood cell in a sentence: both sides' mean log-likelihood per token, the shift with its bounds, p, the cases that moved most."""
    d = sh.decision
    outcome = shift_outcome(sh)
    means = (
        f"mean log-likelihood per token under the baseline model {d.baseline_mean:.2f} (baseline samples) → {d.candidate_mean:.2f} "
        f"(candidate)"
        if d.baseline_mean is not None and d.candidate_mean is not None
        else "no sample scored on both sides"
    )
    bounds = f" [{d.low:+.2f}, {d.high:+.2f}]" if d.low is not None and d.high is not None else ""
    shift = f"shift {d.estimate:+.2f} nats per token{bounds}" if d.estimate is not None else "shift n/a"
    holm = f", Holm {sh.p_value_holm:.2g}" if sh.p_value_holm is not None else ""
    msg = f"{sh.category}/{LIKELIHOOD_CHECK}: {means} over {d.n} sampled case(s) × {d.samples} samples per side, {shift}, p = {d.p_value:.2g}{holm}"
    moved: tuple[str, ...] = ()
    if outcome == "drop" and d.direction is not None:
        msg += f": {SHIFT_WORDS[d.direction]}"
        top = sh.largest[:3]
        sign = 1.0 if d.direction == "higher" else -1.0
        moved = tuple(c.case_id for c in sh.largest if c.shift * sign > 0)
        worst = "; ".join(
            f"{c.case_id} ({c.shift:+.2f}" + (f", least likely candidate sample: {c.worst[2]}" if c.worst and c.worst[2] else "") + ")"
            for c in top
        )
        msg += f"; largest shifts: {worst}"
    elif outcome == "undecided" and d.outcome == "shift":
        msg += "; significant alone but not after Holm across the run's sampled checks"
    return SampledFinding(sh.category, LIKELIHOOD_CHECK, outcome, msg, moved)


def _would_decide(cells: Mapping[str, CheckStats], why: str, shift: ShiftStats | None = None) -> str:
    """What would decide an inconclusive category, in the terms a user can act on."""
    out = []
    if shift is not None and shift_outcome(shift) == "undecided":
        d = shift.decision
        if d.outcome == "shift":
            out.append(f"{LIKELIHOOD_CHECK}: significant alone (p = {d.p_value:.2g}) but not after Holm (Holm {shift.p_value_holm:.2g})")
        elif d.mde is not None:
            out.append(
                f"{LIKELIHOOD_CHECK}: it could detect a shift of {d.mde:.2f} nats per token, not {shift.detectable_shift:.2f}: more "
                "sampled cases or samples per case (run.max_samples_per_case) would decide"
            )
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
