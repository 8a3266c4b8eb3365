"""summary.json (Contract 3): what CI gates and users script against, built as a `Summary` model.

Built only from the run store (and the config's guardrails), so `report` and
`gate` can rebuild it without calling an endpoint. The model
(`verdict._model`) is the file's one definition: keys are only ever added,
never renamed. Latency, acceptance, slices, preflight and the judge's figures
come from their own stages; a stage that measured nothing leaves its
guardrail "not evaluated", never passed. Which regressions count is decided
by `verdict._status` and written per check (`tolerated`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qualitycheck.core._records import (
    FORMAT_VERSION,
    LikelihoodStage,
    NoiseFloorRecord,
    PreflightRecord,
    SamplingRecord,
    StoredAnswers,
)
from qualitycheck.core._store import CaseRecords, RunStore
from qualitycheck.serving import LatencyTally, SliceTally, acceptance_summary, gpu_summary
from qualitycheck.serving._errors import ErrorTally
from qualitycheck.verdict._compare import CaseComparison, CaseConsumer, SplitTally, compare_run
from qualitycheck.verdict._decision import (
    ALL_ROUTES,
    HUMAN_CHECK,
    SHIFT_WORDS,
    CheckDecision,
    QualityEvidence,
    decide_quality,
    quality_evidence,
)
from qualitycheck.verdict._digest import RunDigest, TextTally
from qualitycheck.verdict._drift import format_drift
from qualitycheck.verdict._gate import Evidence, build_rules, decide, quality_thresholds
from qualitycheck.verdict._human import HumanTally
from qualitycheck.verdict._human_summary import human_category, human_cells, human_review, human_tally
from qualitycheck.verdict._judge_figures import JudgeTally
from qualitycheck.verdict._likelihood import DivergenceFacts, LikelihoodTally, ShiftStats, classify_divergence
from qualitycheck.verdict._memo import StatsMemo
from qualitycheck.verdict._model import (
    Acceptance,
    CaseDrop,
    CategoryNoiseFloor,
    CategorySummary,
    CheckNoiseFloor,
    CheckSummary,
    DivergenceSummary,
    ErrorCounts,
    Fallback,
    FormatDrift,
    GpuFacts,
    Latency,
    LikelihoodCell,
    LikelihoodSummary,
    MeasuredBy,
    NoiseFloorSummary,
    NonInferiority,
    Preflight,
    RouteFloor,
    SampledCheck,
    SamplingRound,
    SamplingSummary,
    ShiftCaseSummary,
    Slice,
    StoredRunSide,
    StoredSummary,
    Summary,
    TargetInfo,
)
from qualitycheck.verdict._sequential import design_of
from qualitycheck.verdict._settings import VerdictSettings
from qualitycheck.verdict._stats import CheckStats
from qualitycheck.verdict._tests import divergence_upper, sign_test_p

__all__ = ["SUMMARY_NAME", "build_summary", "run_evidence", "write_summary"]

SUMMARY_NAME = "summary.json"
STATS_MEMO_ARTIFACT = "stats_memo"
"""The run's `StatsMemo`: the scipy/statsmodels results of its last summary, keyed by their inputs."""


def _targets(store: RunStore) -> dict[str, TargetInfo]:
    return {
        n: TargetInfo(url=t["url"], model=t["model"], **({"label": t["label"]} if t.get("label") else {}))
        for n, t in store.manifest.get("targets", {}).items()
    }


class _Errors:
    """Failed requests per target: the counts, and why they failed (kinds with a sample message each).

    A rate alone says something is wrong, not what. Each failed response is
    folded into its side's `ErrorTally` (the sweep's grouping) as the
    summary's walk reads it, so the kinds cost no pass of their own and
    memory is one entry per kind, not a list of errors.
    """

    def __init__(self) -> None:
        self._sides: dict[str, ErrorTally] = {}

    def add(self, rec: CaseRecords) -> None:
        for r in rec.responses:
            if r.error is not None:
                self._sides.setdefault(r.target, ErrorTally()).add(r)

    def merge(self, later: _Errors) -> None:
        """Fold in the errors of the cases after this tally's (each kind keeps its first message)."""
        for side, tally in later._sides.items():
            mine = self._sides.get(side)
            if mine is None:
                self._sides[side] = tally
            else:
                mine.merge(tally)

    def summary(self, store: RunStore) -> dict[str, ErrorCounts]:
        return {
            t: ErrorCounts(
                count=v["errors"],
                requests=v["requests"],
                rate=v["errors"] / v["requests"] if v["requests"] else 0.0,
                kinds=self._sides[t].kinds() if t in self._sides else [],
            )
            for t, v in store.count_responses().items()
        }


class _Tallies:
    """The summary's share of the walk: the digest and the latency, slice, judge, error and likelihood tallies (a `SplitTally`)."""

    def __init__(self, store: RunStore, stored: StoredAnswers | None = None):
        self.digest = RunDigest()
        alongside = "control" if stored is not None and stored.live_baseline else None  # a live baseline's latency, paired
        self.latency = LatencyTally.for_store(store, alongside=alongside)
        self.slices, self.judge = SliceTally(), JudgeTally.for_store(store)
        self.errors = _Errors()
        self.likelihood = LikelihoodTally.for_stage(store.record(LikelihoodStage))

    def add(self, rec: CaseRecords, comps: list[CaseComparison]) -> None:
        self.digest.add(comps)
        self.latency.add(rec)
        self.slices.add(rec)
        self.judge.add(rec)
        self.errors.add(rec)
        if self.likelihood is not None:
            self.likelihood.add(rec, comps)

    def part(self) -> _Tallies:
        return self

    def merge(self, later: _Tallies) -> None:
        self.digest.merge(later.digest)
        self.latency.merge(later.latency)
        self.slices.merge(later.slices)
        self.judge.merge(later.judge)
        self.errors.merge(later.errors)
        if self.likelihood is not None and later.likelihood is not None:
            self.likelihood.merge(later.likelihood)


def _sampled(s: CheckStats, decided: CheckDecision) -> SampledCheck | None:
    """The check's sampled cases as summary.json records their distribution test."""
    sp = s.sampled
    if sp is None or decided.sampled is None:
        return None
    d = sp.decision
    out = SampledCheck(
        cases=sp.cases,
        samples_per_case=round(sp.samples, 4),
        baseline_pass_rate=sp.baseline_pass_rate,
        candidate_pass_rate=sp.candidate_pass_rate,
        delta=-d.estimate if d.estimate is not None else None,
        bounds=(-d.high, -d.low) if d.low is not None and d.high is not None else None,
        p_value=d.p_value,
        p_value_holm=sp.p_value_holm,
        decision=decided.sampled,
        looks=d.look + 1,
        samples_at_decision=d.samples,
        detectable_drop=sp.detectable_drop,
        mde=sp.mde,
        largest_drops=[CaseDrop(case_id=c, baseline_pass_rate=b, candidate_pass_rate=k) for c, b, k in sp.drops[:5]],
    )
    if s.margin is not None:
        out.margin = s.margin
    return out


def _check(s: CheckStats, decided: CheckDecision, judge: dict[str, object] | None, skipped: int = 0) -> CheckSummary:
    """One check's entry: the statistics, and what the decision made of them (which regressions count, the sampled outcome)."""
    sampled = _sampled(s, decided)
    return CheckSummary.model_validate(
        {
            "n": s.n,
            "baseline_pass_rate": s.baseline_pass_rate,
            "candidate_pass_rate": s.candidate_pass_rate,
            **({"control_pass_rate": s.control_pass_rate} if s.control_pass_rate is not None else {}),
            "delta": s.delta,
            "ci": s.ci,
            "p_value": s.p_value,
            "p_value_holm": s.p_value_holm,
            "regressions": list(decided.regressions),
            "tolerated": list(decided.tolerated),
            "improvements": s.improvements,
            "flaky": s.flaky,
            "flaky_regressions": s.flaky_regressions,
            "noise_floor": CheckNoiseFloor(
                measured_by=s.noise.measured_by,
                pairs=s.noise.pairs,
                flip_rate=s.noise.flip_rate,
            ),
            "regression_allowance": s.allowance,
            "regressions_beyond_floor": decided.beyond_floor,
            "mde": s.mde,
            "non_inferiority": NonInferiority(margin=s.margin, verdict=s.non_inferiority) if s.margin is not None else None,  # type: ignore[arg-type]
            **({"sampled": sampled} if sampled is not None else {}),
            **({"skipped_as_sampled": skipped} if skipped else {}),
            **(judge or {}),
        }
    )


def _category_noise(t: TextTally, cells: Mapping[str, CheckStats]) -> CategoryNoiseFloor:
    """The category's A/A self-disagreement: text divergence and per-check flip rates.

    With a control, `divergence_p_value` tests (McNemar exact, paired per
    case) whether the candidate diverges from the baseline more often than
    the control does: text divergence beyond the noise floor.
    """
    by: MeasuredBy
    if t.aa_pairs:
        by, pairs, same = "control", t.aa_pairs, t.aa_identical
    elif t.rep_pairs:
        by, pairs, same = "repeats", t.rep_pairs, t.rep_identical
    else:
        return CategoryNoiseFloor(measured_by=None, text_divergence_rate=None, check_flip_rates={})
    floor = CategoryNoiseFloor(
        measured_by=by,
        text_divergence_rate=1 - same / pairs,
        check_flip_rates={n: s.noise.flip_rate for n, s in cells.items() if s.noise.measured_by},
    )
    if t.paired:
        cand_only, ctrl_only = t.candidate_only, t.control_only
        floor.candidate_divergence_rate = t.paired_candidate_diverged / t.paired
        floor.divergence_p_value = sign_test_p(cand_only, ctrl_only)
    return floor


def _noise_floor(store: RunStore, text: Mapping[str, TextTally], stored: StoredAnswers | None = None) -> NoiseFloorSummary:
    """How this run measured its A/A floor, from what generation stored (`generation._noise`) and the text tallies.

    With a side taken from a stored run (`stored`), its record says where
    the floor's pairs came from, or why there are none.
    """
    floor = _measured_floor(store, text)
    if stored is None:
        return floor
    if stored.floor_missing and floor.source == "none":
        floor.note = f"not measured: {stored.floor_missing}; a route whose regressions it would have to weigh is undecided"
    elif stored.floor:
        floor.note = f"{stored.floor} ({floor.note})" if floor.note else stored.floor
    return floor


def _measured_floor(store: RunStore, text: Mapping[str, TextTally]) -> NoiseFloorSummary:
    asked = store.record(NoiseFloorRecord)
    aa_pairs = sum(t.aa_pairs for t in text.values())
    if aa_pairs:
        same = sum(t.aa_identical for t in text.values())
        rate = 1 - same / aa_pairs
        if asked is not None:
            return NoiseFloorSummary(
                source=asked.source,
                cases=asked.cases,
                disagreement_rate=rate,
                requests=asked.requests,
                note=f"the baseline was asked again for the {asked.cases} of {asked.of_cases} cases whose "
                f"candidate answer differed; {rate:.1%} of those answers differed from its first",
            )
        repeats = max(1, int(store.manifest.get("repeats") or 1))
        return NoiseFloorSummary(
            source="control",
            cases=aa_pairs // repeats,
            disagreement_rate=rate,
            requests=store.count_responses().get("control", {}).get("requests", 0),
            note=f"a control target answered; {rate:.1%} of its answers differed from the baseline's",
        )
    rep_pairs = sum(t.rep_pairs for t in text.values())
    if rep_pairs:
        rate = 1 - sum(t.rep_identical for t in text.values()) / rep_pairs
        repeats = max(2, int(store.manifest.get("repeats") or 2))
        return NoiseFloorSummary(
            source="repeats",
            cases=rep_pairs // (repeats - 1),
            disagreement_rate=rate,
            note=f"the baseline's repeats: {rate:.1%} of its later answers differed from its first",
        )
    if asked is not None:  # asked for nothing: every candidate answer equals the baseline's
        return NoiseFloorSummary(
            source=asked.source,
            cases=0,
            requests=0,
            note="no candidate answer differed from the baseline's, so nothing needed asking again",
        )
    return NoiseFloorSummary(source="none", note="not measured: every pass→fail flip counts as a regression")


def category_power(cells: Mapping[str, CheckStats], upper: float | None, text: TextTally | None) -> tuple[float | None, float | None, str]:
    """What the run can promise about a category: the drop it detects, and how far identical answers generalise.

    The MDE is the largest over its checks (a drop that size is detected in
    any of them): for sampled cases the distribution test's at the samples
    taken, for greedy ones the paired test's at its N.
    """
    mdes = []
    for s in cells.values():
        if s.sampled is not None and s.sampled.mde is not None:
            mdes.append(s.sampled.mde)
        if s.n > (s.sampled.cases if s.sampled is not None else 0) and s.mde is not None:
            mdes.append(s.mde)
    mde = min(1.0, max(mdes)) if mdes else None
    parts = []
    if mde is not None:
        parts.append(f"detects a pass-rate drop of {mde * 100:.0f} points or more (80% power)")
    if upper is not None and text is not None:
        pairs, same = text.greedy_pairs, text.greedy_identical
        if same == pairs:
            parts.append(f"{pairs} of {pairs} greedy cases identical: at most {upper:.1%} of such requests differ (95% bound)")
        else:
            parts.append(f"{pairs - same} of {pairs} greedy cases differ: at most {upper:.1%} of such requests do (95% bound)")
    return mde, upper, "; ".join(parts)


def _pooled_into(noise: NoiseFloorSummary, quality: QualityEvidence) -> None:
    """The pooled greedy floor every route was gated against, and the routes whose regressions it weighed."""
    noise.pairs, noise.disagreements = quality.floor.pairs, quality.floor.disagreements
    routes = {
        r: RouteFloor(regressions=len(q.regressions), eligible=q.eligible, allowance=q.allowance, supported=q.supported)
        for r, q in quality.routes.items()
        if q.regressions
    }
    if routes:
        noise.routes = routes


def _sampling(store: RunStore, digest: RunDigest) -> SamplingSummary | None:
    """The sampling rounds as generation recorded them, with the samples the run holds."""
    rec = store.record(SamplingRecord)
    cases = sum(t.sampled_cases for t in digest.text.values())
    if rec is None or not cases:
        return None
    samples = sum(t.sampled_pairs for t in digest.text.values())
    return SamplingSummary(
        mode=rec.mode,
        max_samples_per_case=rec.max_samples_per_case,
        sample_round=rec.sample_round,
        detectable_drop=rec.detectable_drop,
        sampled_cases=rec.sampled_cases,
        mean_samples_per_case=round(samples / cases, 4),
        rounds=[SamplingRound(**r.model_dump()) for r in rec.rounds],
    )


@dataclass
class _Gathered:
    """What one walk of the store and its statistics give the summary: the tallies, the decision's evidence, the figures."""

    tallies: _Tallies
    humans: HumanTally | None
    noise: NoiseFloorSummary
    evidence: QualityEvidence
    drift: dict[str, dict[str, dict[str, Any]]]
    judge: dict[str, dict[str, Any]]
    category_noise: dict[str, CategoryNoiseFloor]
    divergence: dict[str, float | None]
    stored: StoredAnswers | None
    """Where a side's answers came from when it was not asked in this run."""


def _gather(store: RunStore, settings: VerdictSettings, also: Sequence[CaseConsumer | SplitTally]) -> _Gathered:
    """Walk the store once (`compare_run`) and compute the statistics, with the run's memo of what scipy computed before."""
    stored = store.record(StoredAnswers)
    tallies = _Tallies(store, stored)
    humans = human_tally(store)  # None unless reviewers' labels were imported
    each: list[CaseConsumer | SplitTally] = [tallies, *also]
    if humans is not None:  # reviewers' labels fold in walk order only: a run with them is walked by one process

        def add_humans(rec: CaseRecords, comps: list[CaseComparison]) -> None:
            for sc in rec.scores:
                humans.add_judge_score(sc)

        each.append(add_humans)
    compare_run(store, each=each)
    digest = tallies.digest
    noise = _noise_floor(store, digest.text, stored)
    taken = max((len(o.baseline) for cells in digest.outcomes.values() for outs in cells.values() for o in outs if o.sampled), default=1)
    design = design_of(store.record(SamplingRecord), settings.detectable_drop, taken)
    category_routes = {cat: set(routes) for cat, routes in store.category_routes().items()}
    text = digest.text
    identical = {
        r for cat, t in text.items() if t.pairs and t.pairs >= t.cases and t.identical == t.pairs for r in category_routes.get(cat, ())
    }
    memo = StatsMemo.from_json(store.artifact(STATS_MEMO_ARTIFACT))
    with memo.active():  # a rebuild of an unchanged run computes nothing with scipy, and never imports it
        evidence = quality_evidence(
            digest.outcomes,
            category_routes=category_routes,
            identical_routes=identical,  # identical answers: no check can differ
            identical_rates={cat: digest.text_json(cat)["identical_rate"] for cat in category_routes},
            margins=settings.margins,
            seed=settings.seed,
            noise_source="baseline_again" if noise.source == "baseline_again" else None,
            design=design,
            human=human_cells(humans, settings.seed) if humans is not None else None,
            likelihood=tallies.likelihood.sampled if tallies.likelihood is not None else None,
            divergences=tallies.likelihood.divergences if tallies.likelihood is not None else (),
            divergence_rule=settings.divergence_rule,
            detectable_shift=settings.detectable_shift,
            floor_missing=stored.floor_missing if stored is not None else "",
        )
        drift = format_drift(digest.drift_samples())
        judge = tallies.judge.summary()
        machine = {cat: {n: c for n, c in cells.items() if n != HUMAN_CHECK} for cat, cells in evidence.cells.items()}
        category_noise = {cat: _category_noise(t, machine.get(cat, {})) for cat, t in text.items()}
        divergence = {cat: divergence_upper(t.greedy_pairs, t.greedy_pairs - t.greedy_identical) for cat, t in text.items()}
    if memo.added:
        store.put_artifact(STATS_MEMO_ARTIFACT, memo.to_json())
    return _Gathered(tallies, humans, noise, evidence, drift, judge, category_noise, divergence, stored)


def run_evidence(store: RunStore, settings: VerdictSettings | None = None) -> QualityEvidence:
    """The quality decision's evidence of a stored run, as the summary gathers it (the canary's live windows read it)."""
    return _gather(store, settings or VerdictSettings(), ()).evidence


def build_summary(store: RunStore, settings: VerdictSettings | None = None, *, also: Sequence[CaseConsumer | SplitTally] = ()) -> Summary:
    """The whole verdict from the store: comparisons, statistics, the quality decision, guardrails, fallback.

    One walk of the store (`compare_run`): each case is read and parsed once,
    compared (the comparisons are recomputed and stored on every call, so the
    verdict always follows the current scores), and handed to the digest,
    the latency, slice and judge tallies, and every consumer in `also` (the
    report's row selection), so memory stays flat in the number of cases.
    When every consumer is a `SplitTally`, a large run is walked by two
    processes (`compare_run`). What counts is decided by `decide_quality`
    alone; this renders it. The sign-off text (`Summary.signoff`) is
    rendered by the caller.
    """
    settings = settings or VerdictSettings()
    guard = settings.guardrails
    g = _gather(store, settings, also)
    digest, tallies, humans, noise, evidence = g.tallies.digest, g.tallies, g.humans, g.noise, g.evidence
    _pooled_into(noise, evidence)
    errors = tallies.errors.summary(store)
    latency = tallies.latency.summary()
    acceptance = acceptance_summary(store)
    case_counts = store.category_routes()
    category_routes = {cat: set(routes) for cat, routes in case_counts.items()}
    routes_in_run = set().union(*category_routes.values()) if category_routes else set()

    preflight = store.record(PreflightRecord)
    rules = build_rules(guard, routes_in_run, preflight_ran=preflight is not None)
    decision = decide_quality(evidence, quality_thresholds(rules))
    stored = g.stored
    compared = latency
    if stored is not None and stored.live_baseline:  # the live baseline's requests, and the candidate's on the same ones
        latency["alongside"] = compared = tallies.latency.paired_tpot()
    ev = Evidence(
        errors={t: e.model_dump() for t, e in errors.items()},
        route_errors=digest.route_errors,
        latency=compared,
        latency_missing=stored.latency_missing if stored is not None else "",
        acceptance=acceptance,
        quality=decision,
        preflight=preflight,
    )
    results = [rule.evaluate(ev) for rule in rules]
    repeats = store.manifest.get("repeats", 1)
    text = digest.text

    categories: dict[str, CategorySummary] = {}
    for cat in sorted(category_routes):
        figures = digest.text_json(cat)
        cells = evidence.cells.get(cat, {})
        decided = decision.categories[cat]
        skipped = digest.skipped_sampled.get(cat, {})
        checks = {
            name: _check(s, decided.checks[name], g.judge.get(cat) if name == "judge" else None, skipped.get(name, 0))
            for name, s in cells.items()
        }
        for name, n in skipped.items():  # a check no sampled case applied to shows, with its reason
            if name not in checks:
                checks[name] = CheckSummary(
                    baseline_pass_rate=None, candidate_pass_rate=None, delta=None, ci=None, p_value=None, regressions=[], improvements=[]
                )
                checks[name].skipped_as_sampled = n
        if cat in g.judge and "judge" not in checks:
            checks["judge"] = CheckSummary.model_validate(
                {
                    "baseline_pass_rate": None,
                    "candidate_pass_rate": None,
                    "delta": None,
                    "ci": None,
                    "p_value": None,
                    "regressions": [],
                    "improvements": [],
                    **g.judge[cat],
                }
            )
        mde, upper, power = category_power(cells, g.divergence.get(cat), text.get(cat))
        categories[cat] = CategorySummary(
            cases=sum(case_counts[cat].values()),
            routes=sorted(category_routes[cat]),
            **figures,
            noise_floor=g.category_noise.get(cat) or _category_noise(TextTally(), cells),
            checks=checks,
            format_drift={name: FormatDrift.model_validate(d) for name, d in g.drift.get(cat, {}).items()},
            verdict=decided.verdict,
            verdict_reason=decided.reason,
            mde=mde,
            divergence_upper=upper,
            power=power,
            **(human_category(humans, cat) if humans is not None else {}),
        )
        sampled_cases = text[cat].sampled_cases if cat in text else 0
        if sampled_cases:
            categories[cat].sampled_cases = sampled_cases
        if decided.would_decide is not None:
            categories[cat].would_decide = decided.would_decide
        shift = evidence.shifts.get(cat)
        if shift is not None and decided.likelihood is not None:
            categories[cat].likelihood = _likelihood_cell(shift, decided.likelihood.outcome)
        divergences = [f for facts in evidence.divergences.values() for f in facts if f.category == cat]
        if divergences:
            categories[cat].divergences = [_divergence(f, evidence) for f in divergences]
    verdict, fallback = decide(
        results,
        {cat: c.verdict for cat, c in categories.items()},
        allow_not_evaluated=settings.allow_not_evaluated,
        fallback_action=guard.fallback_action,
        category_routes=category_routes,
    )
    not_evaluated = [
        f"guardrail {r.name}" + (f" [{r.route}]" if r.route != ALL_ROUTES else "") + f": {r.message.removeprefix('not evaluated: ')}"
        for r in results
        if r.passed is None
    ]
    not_evaluated += [f"category {cat}: {c.verdict_reason}" for cat, c in categories.items() if c.verdict == "inconclusive"]
    not_evaluated += [
        f"guardrail {name}: not configured, so not gated (add it to speculative_decoding_guardrails)"
        for name in ("min_acceptance_rate", "max_tpot_p95_regression")
        if name not in guard.thresholds
    ]
    stage = store.record(LikelihoodStage)
    if stage is not None and not stage.evaluated:
        not_evaluated.append(f"likelihood evidence: not evaluated ({stage.reason or 'the scorer could not score the answers'})")
    elif stage is not None and stage.too_long:
        not_evaluated.append(
            f"likelihood evidence: {stage.too_long} answer(s) too long for the scorer's context were not scored "
            "(each is named in the run store's likelihoods table)"
        )
    if stored is not None and stored.floor_missing and noise.source == "none":
        not_evaluated.append(
            f"noise floor: not measured ({stored.floor_missing}), so a route whose regressions it would have to weigh is "
            "undecided, never passed"
        )
    elif noise.source == "none":
        not_evaluated.append(
            "noise floor: not measured (--no-noise-floor, or no baseline answers to compare), so every "
            "pass→fail flip counts as a regression (leave the default on, or add --control or --repeats)"
        )
    if stored is not None:
        if stored.latency_missing and "max_tpot_p95_regression" not in guard.thresholds:
            not_evaluated.append(f"latency: not compared ({stored.latency_missing})")
        not_evaluated += [
            f"sampled category {cat}: the stored baseline holds {n} sample(s) per case and no live baseline gave more, "
            "so its test stopped there"
            for cat, n in sorted(stored.short.items())
        ]
    summary = Summary(
        format_version=FORMAT_VERSION,
        verdict=verdict,  # type: ignore[arg-type]
        cases=store.case_count(),
        targets=_targets(store),
        repeats=repeats,
        categories=categories,
        errors=errors,
        latency=Latency.model_validate(latency),
        acceptance=Acceptance.model_validate(acceptance),
        preflight=Preflight.model_validate(preflight.model_dump(mode="json", exclude={"format_version", "profiles"}))
        if preflight is not None
        else None,
        slices={dim: {label: Slice.model_validate(v) for label, v in buckets.items()} for dim, buckets in tallies.slices.summary().items()},
        guardrails=results,
        allow_not_evaluated=settings.allow_not_evaluated,
        fallback=Fallback.model_validate(fallback),
        not_evaluated=not_evaluated,
        noise_floor=noise,
        seed=settings.seed,
    )
    bias = tallies.judge.position_bias()
    if bias:  # written only when a pairwise judge decided pairs (the field stays out of other runs' files)
        summary.judge_position_bias = bias
    if humans is not None:
        summary.human_review = human_review(humans, store)
    gpu = gpu_summary(store)
    if gpu:  # written only when something was sampled during generation
        summary.gpu = {side: GpuFacts.model_validate(facts) for side, facts in gpu.items()}
    sampling = _sampling(store, digest)
    if sampling is not None:
        summary.sampling = sampling
    if stored is not None:
        summary.stored = _stored_summary(stored, noise)
    if stage is not None:
        summary.likelihood = LikelihoodSummary(
            evaluated=stage.evaluated,
            reason=stage.reason,
            scorer=stage.scorer,
            model=stage.model,
            answers=stage.answers,
            scored=stage.scored,
            too_long=stage.too_long,
            errors=stage.errors,
            prefilled_tokens=sum(p.prefilled_tokens for p in stage.passes),
            wall_s=round(sum(p.seconds for p in stage.passes), 3),
        )
    return summary


def _stored_summary(stored: StoredAnswers, noise: NoiseFloorSummary) -> StoredSummary:
    """summary.json `stored`: which stored runs gave which side, and what the floor and latency are then."""

    def side(s: object) -> StoredRunSide:
        return StoredRunSide.model_validate(s, from_attributes=True)

    out = StoredSummary(
        baseline=side(stored.baseline),
        floor=noise.note,
        latency=(
            "the live baseline's TPOT compared with the candidate's over the requests both answered, alongside each other "
            f"(latency.alongside); the baseline's answers are the stored ones, {stored.live_baseline} answered as the control"
            if stored.live_baseline
            else f"not compared: {stored.latency_missing}"
        ),
    )
    if stored.candidate is not None:
        out.candidate = side(stored.candidate)
    if stored.live_baseline:
        out.live_baseline = stored.live_baseline
    if stored.short:
        out.short = dict(stored.short)
    return out


def _likelihood_cell(sh: ShiftStats, outcome: str) -> LikelihoodCell:
    """A category's likelihood cell as summary.json records it (its decision after Holm, `decide_quality`'s)."""
    d = sh.decision
    decision = {"drop": "shift", "no_drop": "no_shift"}.get(outcome, "undecided")
    return LikelihoodCell(
        cases=d.n,
        baseline_mean_logprob=d.baseline_mean,
        candidate_mean_logprob=d.candidate_mean,
        shift=d.estimate,
        bounds=(d.low, d.high) if d.low is not None and d.high is not None else None,
        p_value=d.p_value,
        p_value_holm=sh.p_value_holm,
        decision=decision,  # type: ignore[arg-type]
        direction=d.direction if decision == "shift" else None,
        meaning=SHIFT_WORDS[d.direction] if decision == "shift" and d.direction is not None else "",
        looks=d.look + 1,
        samples_at_decision=d.samples,
        detectable_shift=sh.detectable_shift,
        mde=d.mde,
        largest_shifts=[
            ShiftCaseSummary(case_id=c.case_id, shift=round(c.shift, 6), least_likely=c.worst[2] if c.worst else "") for c in sh.largest[:5]
        ],
    )


def _divergence(f: DivergenceFacts, evidence: QualityEvidence) -> DivergenceSummary:
    return DivergenceSummary(
        case_id=f.case_id,
        repeat=f.repeat,
        position=f.position,
        kind=classify_divergence(f, evidence.divergence_rule),
        candidate_token=f.candidate_text,
        candidate_probability=f.candidate_probability,
        candidate_rank=f.candidate_rank,
        baseline_token=f.baseline_text,
        baseline_probability=math.exp(f.baseline_logprob) if f.baseline_logprob is not None else None,
        margin=f.margin,
        runner_up_margin=f.runner_up_margin,
    )


def write_summary(folder: Path, summary: Summary) -> Path:
    """Write summary.json atomically: a reader never sees half a file."""
    path = folder / SUMMARY_NAME
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(summary.to_json_text(), encoding="utf-8")
    tmp.replace(path)
    return path
