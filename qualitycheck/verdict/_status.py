"""Per-case status: decided here once; the summary, the report, the sign-off and the pytest plugin render it.

A case's status follows from two inputs only: the statistics' classification
of each (category, check) (`CheckStats`: regressions, improvements, flaky
cases, the noise allowance) with the guardrails' outcome, and the compare
stage's records of the case (errors, identical texts).

- `regression`: a regression counted against `max_quality_regression_cases`:
  its (category, check) has more regressions than the measured noise floor
  explains, and the quality guardrail of the case's route failed;
- `tolerated`: every other regression, which the measured noise floor or
  the route's allowance explains (listed, not counted);
- `flaky`: the baseline disagrees with itself on this case, against the
  control or across its repeats (the statistics' A/A definition, the only
  one); a flaky case is never a regression or an improvement, whatever
  the candidate does;
- `improved`: the pass rate rose by more than half (fail → pass);
- `error`: a stored response or score of the case is an error;
- `divergent`: in some repeat the candidate's text differs from the baseline's;
- `identical`: every repeat answered on both sides, with equal texts.

Human spot-checks are a check too (`human`, `human_check_stats`): a pair
whose reviewers preferred the baseline is a candidate loss, a regression
of the case unless the reviewers' own noise (sides picked between
identical answers, the attention checks) explains it, exactly as the A/A
floor explains flips of the other checks.

The first three and `improved` are per check; a case carries every status
that applies, in `STATUS_ORDER`, and the first of them is its primary
status (what the report lists it under). Which regressions count is written
into summary.json (`checks.<check>.tolerated`), so a reader of the file
renders the same statuses without deciding anything (`check_statuses`,
`StatusBook`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from qualitycheck.verdict._compare import CaseComparison
from qualitycheck.verdict._gate import ALL_ROUTES, Evidence, GuardrailResult, SampledFinding
from qualitycheck.verdict._human import PairVotes
from qualitycheck.verdict._model import CheckSummary, Summary
from qualitycheck.verdict._stats import CaseOutcome, CheckStats, NoiseFloor, QualityStats, SampledStats, check_stats, regression_allowance

__all__ = [
    "HUMAN_CHECK",
    "STATUS_ORDER",
    "CaseStatus",
    "Status",
    "StatusBook",
    "add_regression_evidence",
    "category_verdict",
    "check_statuses",
    "greedy_route_decisions",
    "human_check_stats",
    "sampled_finding",
    "to_decide",
    "tolerated_regressions",
]

Status = Literal["regression", "tolerated", "error", "improved", "flaky", "divergent", "identical"]

STATUS_ORDER: tuple[Status, ...] = ("regression", "tolerated", "error", "improved", "flaky", "divergent", "identical")
"""What needs a look first: a case's primary status is the first of its statuses in this order."""

_QUALITY_RULE = "max_quality_regression_cases"
HUMAN_CHECK = "human"
"""The check human spot-checks become (`human_check_stats`)."""


# ------------------------------------------------------------------ what counts (the summary's side)
def add_regression_evidence(ev: Evidence, quality: QualityStats, category_routes: Mapping[str, set[str]] | None = None) -> None:
    """What the quality guardrail judges, per route: greedy regressions against the pooled floor, sampled cells' tests.

    The machine checks' allowance is the route's, against the deployment's
    one greedy floor (`RouteQuality`). Regressions within the allowance are
    still listed, so the guardrail's message can name them as tolerated.

    A human-reported loss (`human` check) is evidence that its divergence is
    a real loss, so the machine checks' floor cannot explain it away: in a
    route with human regressions, the machine allowance covers only cases
    no human reported, and the reviewers' own allowance (attention checks)
    covers theirs.

    A sampled cell is a finding for every route of its category's sampled
    cases: a significant drop fails them, an undecided test leaves them
    undecided.
    """
    human: dict[str, int] = {}
    human_cases: dict[str, set[str]] = {}
    for cat, cells in quality.cells.items():
        for s in cells.values():
            for route, ids in s.routes.items():
                per = ev.regressions.setdefault(route, {})
                for i in ids:
                    per.setdefault(i, []).append(s.check)
                if s.check == HUMAN_CHECK:
                    share = s.allowance if len(s.routes) == 1 else s.allowance * len(ids) // len(s.regressions)
                    human[route] = max(human.get(route, 0), share)
                    human_cases.setdefault(route, set()).update(ids)
            if s.sampled is not None:
                finding = sampled_finding(s)
                for route in s.sampled.routes or (category_routes or {}).get(cat, set()):
                    ev.sampled.setdefault(route, []).append(finding)
    machine = {r: q.allowance for r, q in quality.routes.items()}
    supported = {r: q.supported for r, q in quality.routes.items()}
    for route in machine.keys() | human.keys():
        if route not in human_cases:
            ev.allowances[route] = machine.get(route, 0)
            ev.supported[route] = supported.get(route, 0)
            continue
        machine_only = len(set(ev.regressions.get(route, {})) - human_cases[route])
        own = min(human.get(route, 0), len(human_cases[route]))
        ev.allowances[route] = min(machine.get(route, 0), machine_only) + own
        ev.supported[route] = min(supported.get(route, 0), machine_only) + own
    f = quality.floor
    if f.measured_by == "control":
        ev.floor = f"the control decided a check differently from the baseline on {f.disagreements} of {f.pairs} cases"
        ev.floor_advice = "more cases, or --repeats N (every case asked N times of both), would decide"
    elif f.measured_by == "repeats":
        ev.floor = f"{f.disagreements} of {f.pairs} pairs of the baseline's repeats decided a check differently"
        ev.floor_advice = "more repeats or more cases would decide"
    elif f.measured_by is not None:
        ev.floor = f"{f.disagreements} of {f.pairs} cases asked again decided a check differently the second time"


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
    outcome = sp.outcome
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


def greedy_route_decisions(ev: Evidence, results: Iterable[GuardrailResult], routes_in_run: set[str]) -> tuple[set[str], set[str]]:
    """The routes whose greedy regressions failed their quality guardrail, and those left undecided by a thin floor.

    Read from the guardrail's own decision (`Evidence.greedy_decision`), not
    from its result: a route failed by a sampled drop, or undecided by an
    undecided sampled cell, says nothing about its greedy regressions.
    """
    failed: set[str] = set()
    thin: set[str] = set()
    for r in results:
        if r.name != _QUALITY_RULE or r.threshold is None:
            continue
        routes = sorted(ev.scored_routes) if r.route == ALL_ROUTES else [r.route]
        decision = ev.greedy_decision(routes, int(r.threshold))
        every = routes_in_run if r.route == ALL_ROUTES else {r.route}
        if decision == "fail":
            failed |= every
        elif decision == "thin_floor":
            thin |= every
    return failed, thin


def tolerated_regressions(s: CheckStats, failed_routes: set[str]) -> list[str]:
    """The greedy regressions of one (category, check) that do not count against the quality guardrail.

    A regression counts when the quality guardrail of its route failed:
    the route's regressions were weighed together against the pooled
    floor, and which of them the noise explains cannot be told apart case by
    case, so they count together or not at all.
    """
    counted = {i for route, ids in s.routes.items() if route in failed_routes for i in ids}
    return [i for i in s.regressions if i not in counted]


def category_verdict(
    cells: Mapping[str, CheckStats],
    tolerated: Mapping[str, list[str]],
    identical_rate: float | None,
    undecided_routes: set[str] = frozenset(),  # type: ignore[assignment]
) -> tuple[Literal["pass", "fail", "inconclusive"], str]:
    """fail on a counted regression, a sampled drop or an inferior check; inconclusive when the evidence cannot decide; else pass.

    Inconclusive, never pass: a sampled check its samples could not decide,
    regressions tolerated in a route whose floor rests on too few pairs
    (`undecided_routes`), non-inferiority not shown, or answers that differ
    with no check to judge them.
    """
    reasons = []
    for name, s in cells.items():
        if set(s.regressions) - set(tolerated.get(name, ())):
            reasons.append(f"{s.check}: {s.regressions_beyond_floor} regression(s) beyond the noise floor")
        if s.non_inferiority == "inferior":
            reasons.append(f"{s.check}: pass rate worse than the non-inferiority margin {s.margin}")
        if s.sampled is not None and s.sampled.outcome == "drop":
            reasons.append(sampled_finding(s).message)
    if reasons:
        return "fail", "; ".join(reasons)
    undecided = [f"{s.check}: too few cases to show non-inferiority" for s in cells.values() if s.non_inferiority == "inconclusive"]
    undecided += [sampled_finding(s).message for s in cells.values() if s.sampled is not None and s.sampled.outcome == "undecided"]
    undecided += [
        f"{s.check}: regression(s) {', '.join(tolerated.get(name, []))} tolerated only because the noise floor was measured on too few pairs"
        for name, s in cells.items()
        if tolerated.get(name) and any(r in undecided_routes for r, ids in s.routes.items() if set(ids) & set(tolerated[name]))
    ]
    if undecided:
        return "inconclusive", "; ".join(undecided)
    if not any(s.n for s in cells.values()):
        if identical_rate == 1.0:
            return "pass", "no checks, but every answer is identical to the baseline's"
        return "inconclusive", "no check decides these cases and the answers differ from the baseline's"
    sampled = [s for s in cells.values() if s.sampled is not None]
    if sampled:
        return "pass", "no regression beyond the noise floor; sampled pass rates: " + "; ".join(sampled_finding(s).message for s in sampled)
    return "pass", "no regression beyond the noise floor"


def human_check_stats(
    category: str, pairs: Sequence[PairVotes], attention_labels: int, attention_picked: int, *, seed: int = 0
) -> CheckStats:
    """The `human` check of one category: the baseline is the reference, the candidate fails a pair its reviewers lost.

    A pair's outcome is its reviewers' majority (`PairVotes.outcome`); a
    case reviewed over several repeats regresses when it lost more than half
    of them, as every check's cases do. The floor is the attention checks:
    a reviewer picking a side between identical answers is noise with no
    change behind it, at twice the rate noise alone would make a loss (either
    side), which is the A/A model of `regression_allowance`. So only losses
    beyond what that noise explains count; reviewers who never picked a side
    there showed no noise, and a run without attention labels has no floor:
    in both cases every human loss counts.
    """
    per_case: dict[str, list[PairVotes]] = {}
    for pv in pairs:
        if pv.outcome is not None:
            per_case.setdefault(pv.case_id, []).append(pv)
    outcomes = [
        CaseOutcome(
            case_id=cid,
            route=votes[0].route,
            baseline=tuple(True for _ in votes),
            candidate=tuple(v.outcome != "baseline" for v in votes),
        )
        for cid, votes in sorted(per_case.items())
    ]
    stats = check_stats(category, HUMAN_CHECK, outcomes, seed=seed)
    if not attention_labels:
        return stats
    floor = NoiseFloor("attention_checks", attention_labels, attention_picked)  # type: ignore[arg-type]  # the human floor's own source
    # A reviewer's loss label is direct evidence, not a flip of a noisy check: when the reviewers never
    # picked a side between identical answers, no noise was seen and every loss counts.
    allowance = regression_allowance(len(outcomes), floor) if attention_picked else 0
    return dataclasses.replace(stats, noise=floor, allowance=allowance)


# ------------------------------------------------------------------ per case (the readers' side)
def check_statuses(check: CheckSummary) -> dict[str, Status]:
    """case id → its status on this check, as summary.json records it (cases without one are absent)."""
    out: dict[str, Status] = {i: "flaky" for i in check.flaky}
    out.update({i: "improved" for i in check.improvements})
    out.update({i: "tolerated" for i in check.tolerated})
    out.update({i: "regression" for i in check.counted})
    return out


@dataclass(frozen=True, slots=True)
class CaseStatus:
    """One case: every status that applies (primary first) and its status per check."""

    statuses: tuple[Status, ...] = ()
    """In STATUS_ORDER; empty when nothing was compared for the case (no answer stored)."""
    checks: Mapping[str, Status] = field(default_factory=dict)
    """check → regression | tolerated | improved | flaky, for the checks that hold one."""

    @property
    def primary(self) -> Status | None:
        return self.statuses[0] if self.statuses else None

    def checks_with(self, status: Status) -> list[str]:
        return sorted(n for n, st in self.checks.items() if st == status)


def _errored(c: CaseComparison) -> bool:
    answered = c.finish_reasons  # the sides with a stored response in this repeat
    sides = (("baseline", c.baseline_ok), ("candidate", c.candidate_ok), ("control", c.control_ok))
    if any(side in answered and ok is False for side, ok in sides):
        return True
    return any("error" in (o.baseline, o.candidate, o.control) for o in c.checks.values())


class StatusBook:
    """Every case's status from summary.json and the compare stage's records, one case at a time.

    Holds only the cases summary.json lists (regressions, improvements,
    flaky), so a reader walking a 100,000-case run keeps what it keeps.
    """

    def __init__(self, summary: Summary):
        self.repeats = max(1, summary.repeats)
        self._by_case: dict[str, dict[str, Status]] = {}
        for cat in summary.categories.values():
            for name, check in cat.checks.items():
                for case_id, status in check_statuses(check).items():
                    self._by_case.setdefault(case_id, {})[name] = status

    @classmethod
    def without_checks(cls, repeats: int) -> StatusBook:
        """A book that knows no check's status: a case's error, divergent and identical only.

        Those follow from the case's own comparisons, so a reader walking the
        store knows them before the statistics have decided any regression.
        """
        book = cls.__new__(cls)
        book.repeats = max(1, repeats)
        book._by_case = {}
        return book

    def case(self, case_id: str, comps: Sequence[CaseComparison]) -> CaseStatus:
        """The status of one case from its comparison records (all its repeats)."""
        checks = self._by_case.get(case_id, _NO_CHECKS)
        errored = divergent = False
        identical = bool(comps) and len(comps) == self.repeats
        for c in comps:
            errored = errored or _errored(c)
            if c.identical is False:
                divergent = True
            elif not c.identical:
                identical = False
        found: list[Status] = [*checks.values()]
        if errored:
            found.append("error")
        if divergent:
            found.append("divergent")
        elif identical:
            found.append("identical")
        key = frozenset(found)
        statuses = _IN_ORDER.get(key)
        if statuses is None:
            statuses = _IN_ORDER[key] = tuple(s for s in STATUS_ORDER if s in key)
        return CaseStatus(statuses, checks)


_NO_CHECKS: Mapping[str, Status] = {}
_IN_ORDER: dict[frozenset[Status], tuple[Status, ...]] = {}
"""A set of statuses → the same in STATUS_ORDER (a run has a handful of distinct sets)."""
