"""summary.json as a typed record (Contract 3): the one definition its writer and every reader share.

`build_summary` fills a `Summary`, `write_summary` dumps it, and the report,
sign-off, terminal summary and pytest plugin read it back with
`read_summary` (or `Summary.model_validate_json`), never through `.get`
chains on a dict. `summary_json_schema()` is what `qualitycheck schema
summary` prints and what docs/schema/summary.schema.json holds.

Field names are the contract: they are only ever added, never renamed. A
summary.json written before a field existed still loads (every field
added after Contract 3 has a default). Two kinds of section:

- *closed* sections are written here (verdict, categories, checks, noise
  floor, drift, errors, guardrails, fallback): an unknown key is refused,
  so the schema names every key;
- *open* sections are what another stage hands over (latency and
  acceptance from serving, slices, the preflight record, the judge's
  figures merged into a check): keys that stage adds pass through, and a
  key it leaves out stays out of the file rather than being written as
  null.

Some fields are written only when they apply (`label` of a target without
one, `control_pass_rate` without a control, ...): such a field is left out
of the file unless the writer set it, exactly as the stages always wrote it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, ValidationError, model_serializer

from qualitycheck.core._errors import StoreError, first_problem
from qualitycheck.serving._errors import ErrorKind
from qualitycheck.verdict._gate import GuardrailResult

__all__ = [
    "JSON_SCHEMA_DIALECT",
    "Acceptance",
    "AcceptanceFigures",
    "CaseDrop",
    "CategoryNoiseFloor",
    "CategorySummary",
    "CheckNoiseFloor",
    "CheckSummary",
    "ErrorCounts",
    "Fallback",
    "FormatDrift",
    "GpuFacts",
    "HumanAgreement",
    "HumanCategory",
    "HumanReview",
    "HumanShare",
    "JudgePositionBias",
    "Latency",
    "LatencySide",
    "NoiseFloorSummary",
    "NonInferiority",
    "Percentiles",
    "Preflight",
    "PreflightCheck",
    "RouteFloor",
    "SampledCheck",
    "SamplingRound",
    "SamplingSummary",
    "Slice",
    "SliceCheck",
    "StoredRunSide",
    "StoredSummary",
    "Summary",
    "TargetInfo",
    "read_summary",
    "summary_json_schema",
]

JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"

Verdict = Literal["pass", "fail", "inconclusive"]
MeasuredBy = Literal["control", "repeats", "baseline_again", "attention_checks"]


class _Closed(BaseModel):
    """A section written by the verdict stage: every key is declared."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    WRITTEN_WHEN_SET: ClassVar[frozenset[str]] = frozenset()
    """Fields left out of the file unless the writer set them (they apply to some runs only)."""

    @model_serializer(mode="wrap")
    def _leave_out_unset(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        out: dict[str, Any] = handler(self)
        for name in self.WRITTEN_WHEN_SET - self.model_fields_set:
            out.pop(name, None)
        return out


class _Open(BaseModel):
    """A section another stage hands over: its extra keys pass through, keys it did not write stay out."""

    model_config = ConfigDict(extra="allow", use_attribute_docstrings=True)

    @model_serializer(mode="wrap")
    def _leave_out_unset(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        out: dict[str, Any] = handler(self)
        for name in type(self).model_fields.keys() - self.model_fields_set:
            out.pop(name, None)
        return out


# ------------------------------------------------------------------ per check
class CheckNoiseFloor(_Closed):
    """How often the baseline disagrees with itself on this check (the A/A noise floor)."""

    measured_by: MeasuredBy | None = None
    """'control' (baseline vs control at the same repeat), 'repeats' (baseline repeats), 'baseline_again' (the
    baseline asked again where the candidate's text diverged), 'attention_checks' (the `human` check: reviewers
    picking a side between identical answers), or null: not measured."""
    pairs: int = 0
    """A/A pairs compared."""
    flip_rate: float | None = None
    """Share of A/A pairs that decided differently."""


class NonInferiority(_Closed):
    """The check's CI against the configured margin."""

    margin: float
    verdict: Literal["non_inferior", "inferior", "inconclusive"] | None
    """non_inferior: the whole CI lies above −margin; inferior: below it; inconclusive: it straddles it."""


class CaseDrop(_Closed):
    """One sampled case whose pass rate fell: the evidence a release manager opens first."""

    case_id: str
    baseline_pass_rate: float
    candidate_pass_rate: float


class SampledCheck(_Closed):
    """The check's sampled cases (temperature > 0), compared as pass-rate distributions over several samples per side.

    One pair of texts says nothing about a sampled case, so its cases are
    judged together: a test stratified by case (Cochran–Mantel–Haenszel,
    McNemar's test when each side has one sample) of the drop in pass rate,
    looked at after each sampling round with group-sequential bounds, so
    its error rates hold however many rounds were taken.
    """

    WRITTEN_WHEN_SET: ClassVar[frozenset[str]] = frozenset({"margin"})

    cases: int
    """Sampled cases decided on both sides."""
    samples_per_case: float
    """Mean decided samples per side per case."""
    baseline_pass_rate: float
    candidate_pass_rate: float
    """Means of the per-case pass rates over every sample taken."""
    delta: float | None
    """The Mantel–Haenszel difference in pass rate (candidate − baseline), stratified by case, at the look that decided."""
    bounds: tuple[float, float] | None
    """Repeated confidence bounds of delta at that look (each one-sided at level 1 − alpha, valid over the looks)."""
    p_value: float
    """One-sided p-value of 'no drop' (with a margin: 'drop ≤ margin'), stage-wise over the looks taken."""
    p_value_holm: float | None = None
    """Holm-adjusted across the run's sampled (category, check) cells: a drop fails only below alpha."""
    decision: Literal["drop", "no_drop", "undecided"]
    """drop: the candidate passes significantly less; no_drop: a drop of `detectable_drop` is ruled out (with
    a margin: the drop is shown below it); undecided: neither within the budget (the category is inconclusive)."""
    looks: int
    """Looks taken until the decision (one per sampling round)."""
    samples_at_decision: int
    """Samples per side at the look that decided."""
    detectable_drop: float
    """The drop the run had to be able to detect, or the non-inferiority margin."""
    mde: float | None
    """The smallest drop the test detects with 80% power: `detectable_drop` when it decided no drop (its futility
    bound guarantees that power wherever it stopped), else the fixed-sample figure at the samples taken."""
    margin: float | None = None
    """Written when non_inferiority_margin names this check."""
    largest_drops: list[CaseDrop] = Field(default_factory=list)
    """The cases whose pass rate fell most (at most five)."""


class CheckSummary(_Closed):
    """One check in one category: pass rates, the paired statistics, and which cases hold which status.

    Open to extra keys because the judge stage merges its figures into the
    `judge` check; the figures it writes today are declared below.
    """

    model_config = ConfigDict(extra="allow")

    WRITTEN_WHEN_SET: ClassVar[frozenset[str]] = frozenset(
        {
            "control_pass_rate",
            "wins",
            "losses",
            "ties",
            "judge_errors",
            "judged",
            "skipped_identical",
            "no_answer",
            "flagged_injection",
            "lost_cases",
            "won_cases",
            "position_consistency_rate",
            "rubric_delta_mean",
            "rubric_delta_ci",
            "aa_pairs",
            "aa_judged",
            "aa_losses",
            "aa_errors",
            "aa_loss_rate",
            "sampled",
            "skipped_as_sampled",
        }
    )

    n: int = 0
    """Cases decided (pass or fail) on both the baseline and the candidate."""
    baseline_pass_rate: float | None
    """Mean of the per-case pass rates over repeats; null when n is 0."""
    candidate_pass_rate: float | None
    control_pass_rate: float | None = None
    """Written only when the run has a control target that decided this check."""
    delta: float | None
    """candidate − baseline pass rate."""
    ci: tuple[float, float] | None
    """95% paired bootstrap CI of delta."""
    p_value: float | None
    """Exact McNemar (one repeat) or exact sign test (repeats) on the discordant cases."""
    p_value_holm: float | None = None
    """Holm-adjusted across every (category, check)."""
    regressions: list[str]
    """Non-flaky cases whose pass rate dropped by more than half (one repeat: pass → fail), counted or tolerated."""
    tolerated: list[str] = Field(default_factory=list)
    """The regressions that do not count against max_quality_regression_cases: the measured noise floor or the
    route's allowance explains them. The others (regressions minus tolerated) are counted."""
    improvements: list[str]
    """Non-flaky cases whose pass rate rose by more than half."""
    flaky: list[str] = Field(default_factory=list)
    """Cases on which the baseline disagrees with itself (control or repeats): never regressions."""
    flaky_regressions: list[str] = Field(default_factory=list)
    """Flaky cases whose pass rate dropped on the candidate (listed, not counted)."""
    noise_floor: CheckNoiseFloor = Field(default_factory=CheckNoiseFloor)
    regression_allowance: int = 0
    """How many regressions the measured noise alone explains at alpha 0.05 (0 without a measured floor)."""
    regressions_beyond_floor: int = 0
    """max(0, regressions − regression_allowance)."""
    mde: float | None = None
    """Smallest pass-rate drop this N detects with 80% power at alpha 0.05."""
    non_inferiority: NonInferiority | None = None
    """Set when non_inferiority_margin names this check."""
    sampled: SampledCheck | None = None
    """Written when the check has sampled cases: their distribution test (the one that gates them)."""
    skipped_as_sampled: int = 0
    """Written when set: sampled cases this check does not apply to (a check against the baseline's answer:
    identity, as `exact: true`, or the judge's comparison; two samples differ by design) and that are not counted."""
    wins: int = 0
    """judge: pairs the candidate won (judge check only, like the fields below)."""
    losses: int = 0
    ties: int = 0
    judge_errors: int = 0
    judged: int = 0
    """judge: pairs that needed the judge (wins + losses + ties + judge_errors)."""
    skipped_identical: int = 0
    """judge: byte-identical pairs, ties without a call."""
    no_answer: int = 0
    flagged_injection: int = 0
    lost_cases: list[str] = Field(default_factory=list)
    won_cases: list[str] = Field(default_factory=list)
    position_consistency_rate: float | None = None
    rubric_delta_mean: float | None = None
    rubric_delta_ci: tuple[float, float] | None = None
    aa_pairs: int = 0
    """judge, with a control: A/A pairs (baseline against control) of this category; identical ones need no call."""
    aa_judged: int = 0
    """judge: divergent A/A pairs the judge decided."""
    aa_losses: int = 0
    """judge: A/A pairs the control lost, with no change behind the loss (the judge's noise)."""
    aa_errors: int = 0
    aa_loss_rate: float | None = None
    """judge: aa_losses / aa_pairs, the judge's noise floor; the statistics count only losses beyond it."""

    @property
    def counted(self) -> list[str]:
        """The regressions that count against the quality guardrail (not tolerated)."""
        tolerated = set(self.tolerated)
        return [i for i in self.regressions if i not in tolerated]


# ------------------------------------------------------------------ per category
class CategoryNoiseFloor(_Closed):
    """The category's A/A self-disagreement: text divergence and per-check flip rates."""

    WRITTEN_WHEN_SET: ClassVar[frozenset[str]] = frozenset({"candidate_divergence_rate", "divergence_p_value"})

    measured_by: MeasuredBy | None = None
    text_divergence_rate: float | None = None
    """Share of A/A pairs whose texts differ."""
    check_flip_rates: dict[str, float | None] = Field(default_factory=dict)
    candidate_divergence_rate: float | None = None
    """With a control: share of pairs where the candidate's text differs from the baseline's."""
    divergence_p_value: float | None = None
    """With a control: McNemar exact, does the candidate diverge more often than the control does?"""


class FormatDrift(_Closed):
    """One format feature in one category: rates (booleans) or means (numbers) per side."""

    WRITTEN_WHEN_SET: ClassVar[frozenset[str]] = frozenset({"control"})

    baseline: float
    candidate: float
    delta: float = 0.0
    kind: Literal["rate", "mean"] = "rate"
    p_value: float | None = None
    """McNemar exact (booleans) or Wilcoxon signed-rank (numbers), paired per case."""
    noise: float | None = None
    """The control's own change; null without a control."""
    flag: bool = False
    """p < 0.05 and |delta| beyond the noise."""
    control: float | None = None
    """Written only with a control."""


class HumanShare(_Closed):
    """How often the reviewed pairs' outcome was one choice."""

    count: int
    rate: float | None
    ci: tuple[float, float] | None
    """95% Wilson score interval of the rate."""


class HumanAgreement(_Closed):
    """Agreement between two raters over the pairs both labelled."""

    pairs: int
    rate: float | None
    """Share of those pairs with the same outcome."""
    kappa: float | None
    """Cohen's kappa (for several reviewers: the mean over reviewer pairs); null when undefined."""


class HumanCategory(_Closed):
    """Human spot-checks of one category (`qualitycheck review DIR --import`): un-blinded preferences."""

    pairs: int
    """Divergent pairs with at least one label (attention checks apart); a pair's outcome is its reviewers' majority."""
    labels: int
    reviewers: int
    preference: dict[str, HumanShare]
    """baseline | candidate | tie | both_wrong → share of the pairs."""
    sign_test_p: float | None
    """Exact two-sided sign test, candidate-preferred against baseline-preferred pairs (ties left out)."""
    reviewer_agreement: HumanAgreement | None = None
    """With several reviewers: how often they agree on the pairs they both labelled."""
    judge_agreement: HumanAgreement | None = None
    """The judge's verdict against the humans' outcome on the pairs both decided (both wrong reads as a tie)."""
    lost_cases: list[str] = Field(default_factory=list)
    """Cases whose reviewers preferred the baseline (the `human` check's regressions, before the noise floor)."""


class ShiftCaseSummary(_Closed):
    """A case whose candidate samples moved most under the baseline model, with its least likely candidate sample."""

    case_id: str
    shift: float
    """Mean log-likelihood per token of its candidate samples minus its baseline samples', nats."""
    least_likely: str = ""
    """The least likely tokens of the candidate's least likely sample, with the probability the baseline model gives each."""


class LikelihoodCell(_Closed):
    """The category's sampled answers under the baseline model: are the candidate's samples distributed like its own?

    Every sample's mean log-probability per token under the baseline model,
    compared within each case (its baseline and candidate samples are
    exchangeable when nothing changed) and summed over cases; looked at
    after each sampling round with the pass-rate test's group-sequential
    bounds, two-sided. No check is needed: it judges open-ended answers.
    """

    cases: int
    """Sampled cases with scored samples on both sides."""
    baseline_mean_logprob: float | None
    candidate_mean_logprob: float | None
    """Mean log-probability per token under the baseline model of each side's samples, nats (0: certain; lower: less likely)."""
    shift: float | None
    """Candidate minus baseline per case, averaged over cases, nats per token, at the look that decided."""
    bounds: tuple[float, float] | None
    """Repeated confidence bounds of the shift at that look."""
    p_value: float
    """Two-sided stage-wise p-value of 'no shift'."""
    p_value_holm: float | None = None
    """Holm-adjusted across the run's sampled cells (pass-rate and likelihood cells): a shift fails only below alpha."""
    decision: Literal["shift", "no_shift", "undecided"]
    """After Holm. shift: the candidate's samples are distributed differently; no_shift: a shift of `detectable_shift` is ruled out."""
    direction: Literal["lower", "higher"] | None = None
    """lower: the candidate writes text the baseline model would rarely write; higher: its samples are less varied."""
    meaning: str = ""
    """The finding in words a release manager follows."""
    looks: int
    samples_at_decision: int
    detectable_shift: float
    """The shift the run had to be able to detect before passing (`likelihood.detectable_shift`), nats per token."""
    mde: float | None
    """The smallest shift the test detects with 80% power at the samples taken, nats per token."""
    largest_shifts: list[ShiftCaseSummary] = Field(default_factory=list)


class DivergenceSummary(_Closed):
    """A greedy answer that left the baseline's, at its first differing token, under the baseline model."""

    case_id: str
    repeat: int = 0
    position: int
    """Index of the first differing token of the answer."""
    kind: Literal["near_tie", "decisive", "unclear"]
    """near_tie: within `likelihood.near_tie_nats` of the baseline model's first choice (numerics); decisive: a token the
    baseline would not write (`likelihood.decisive_nats` below its first choice, or below the top-k it listed)."""
    candidate_token: str | None
    candidate_probability: float | None
    """The probability the baseline model gives the candidate's token there (null: the candidate's answer ended)."""
    candidate_rank: int | None = None
    baseline_token: str | None
    baseline_probability: float | None
    margin: float | None
    """The baseline model's first choice minus the candidate's token, nats."""
    runner_up_margin: float | None = None
    """The baseline model's first choice minus its own runner-up there, nats: how close it was to a tie itself."""


class LikelihoodSummary(_Closed):
    """The likelihood stage: who scored the answers, what it could score, and what it cost."""

    evaluated: bool
    """False: the evidence is missing (the server cannot score a given continuation, or the stage was off): never a pass."""
    reason: str = ""
    scorer: str = ""
    model: str = ""
    answers: int = 0
    scored: int = 0
    too_long: int = 0
    """Answers whose prompt and text no longer fit the scorer's context: named in the store, never left out silently."""
    errors: int = 0
    prefilled_tokens: int = 0
    wall_s: float = 0.0
    """Time the stage's passes took, all told."""


class CategorySummary(_Closed):
    """One category: text agreement, the checks, format drift and the category's verdict."""

    WRITTEN_WHEN_SET: ClassVar[frozenset[str]] = frozenset({"human_review", "sampled_cases", "would_decide", "likelihood", "divergences"})

    cases: int
    routes: list[str] = Field(default_factory=list)
    identical_rate: float | None
    """Share of (case, repeat) pairs whose texts are equal; null when no pair has both answers."""
    pairs: int = 0
    similarity_mean: float | None = None
    first_divergence_char_median: int | None = None
    control_identical_rate: float | None = None
    noise_floor: CategoryNoiseFloor = Field(default_factory=CategoryNoiseFloor)
    checks: dict[str, CheckSummary]
    format_drift: dict[str, FormatDrift]
    verdict: Verdict
    verdict_reason: str = ""
    mde: float | None = None
    """What the run can promise: the smallest pass-rate drop its verdict on this category detects with 80% power
    (the largest over its checks; for sampled checks at the samples taken)."""
    divergence_upper: float | None = None
    """95% upper bound of the share of greedy requests whose answer differs from the baseline's (30 of 30
    identical: 0.095); null without greedy pairs."""
    power: str = ""
    """Both in a sentence, as the report and sign-off show them."""
    sampled_cases: int = 0
    """Written when the category has sampled cases (temperature > 0)."""
    would_decide: str = ""
    """Written for an inconclusive category: what would decide it (more cases, samples per case, --control)."""
    human_review: HumanCategory | None = None
    """Written only after human labels were imported."""
    likelihood: LikelihoodCell | None = None
    """Written when the likelihood stage scored the category's sampled answers."""
    divergences: list[DivergenceSummary] = Field(default_factory=list)
    """Written when greedy answers of the category left the baseline's and the likelihood stage explained where."""


# ------------------------------------------------------------------ run-wide
class TargetInfo(_Closed):
    WRITTEN_WHEN_SET: ClassVar[frozenset[str]] = frozenset({"label"})

    url: str
    """Public URL (credentials removed)."""
    model: str
    label: str | None = None
    """Written only when the target has one, e.g. 'ngram k=3'."""


class ErrorCounts(_Closed):
    """Failed requests of one target over the whole run."""

    count: int
    requests: int = 0
    rate: float
    kinds: list[ErrorKind] = Field(default_factory=list)
    """Why they failed: one entry per kind (`http_404`, `timeout`, `stream_cut`, ...) with its count and the
    first message seen, most frequent first; empty when nothing failed (and in files written before it existed)."""


class Fallback(_Closed):
    """What to do when the verdict is not pass, and where."""

    action: str
    """The configured action, or 'none' when the verdict is pass."""
    configured_action: str = ""
    routes: list[str]
    """Routes the action applies to: on fail the failed ones, on inconclusive every route, on pass none."""
    reason: str = ""


class Percentiles(_Open):
    p50: float | None = None
    p95: float | None = None
    p99: float | None = None


class LatencySide(_Open):
    """One target's latency (serving stage), in ms per metric."""

    ttft_ms: Percentiles = Field(default_factory=Percentiles)
    tpot_ms: Percentiles = Field(default_factory=Percentiles)
    itl_ms: Percentiles = Field(default_factory=Percentiles)
    e2e_ms: Percentiles = Field(default_factory=Percentiles)
    output_tokens_per_s: float | None = None
    requests_per_s: float | None = None
    error_rate: float | None = None
    requests: int = 0
    output_tokens: int = 0
    wall_s: float | None = None
    cost_per_1k_output_tokens_usd: float | None = None
    """With run.gpu_hour_usd configured."""
    percentiles: str | None = None
    """Set when the percentiles are bucketed (very large runs): how approximate they are."""


class Latency(_Open):
    """Per target, and per category and target (serving stage); empty when it did not run."""

    baseline: LatencySide | None = None
    candidate: LatencySide | None = None
    control: LatencySide | None = None
    per_category: dict[str, dict[str, LatencySide]] = Field(default_factory=dict)
    alongside: dict[str, LatencySide] = Field(default_factory=dict)
    """Written when a live baseline answered alongside a stored one (`run --baseline-run DIR --baseline URL`): the live
    baseline's TPOT (`baseline`) and the candidate's over the requests both answered, which the TPOT guardrail compares."""


class AcceptanceFigures(_Open):
    """Draft acceptance from the candidate's /metrics counters; null when none were scraped."""

    rate: float | None
    mean_accepted_length: float | None
    draft_tokens: int | None
    accepted_tokens: int | None
    drafts: int | None = None
    by_position: list[float | None] = Field(default_factory=list)
    """Acceptance rate per draft position."""


class Acceptance(AcceptanceFigures):
    by_category: dict[str, AcceptanceFigures] = Field(default_factory=dict)
    warnings: list[str] = Field(default_factory=list)
    speculating: bool | None = None
    baseline_speculating: bool | None = None


class GpuFacts(_Closed):
    """What the GPU was doing while the side answered: recorded beside the guardrails, never gated.

    KV-cache usage from the engine's own gauge (vLLM `vllm:kv_cache_usage_perc`, SGLang
    `sglang:token_usage`); GPU utilisation and memory from a DCGM exporter when one is configured
    (`canary.dcgm_metrics`: the candidate's node). Sampled during generation (a run) or over the
    window (the canary), never only at the idle moments before and after.
    """

    kv_cache_usage: float | None = None
    """Mean over the samples, 0..1."""
    kv_cache_usage_max: float | None = None
    gpu_utilization: float | None = None
    """Percent, mean over GPUs and samples (DCGM_FI_DEV_GPU_UTIL)."""
    gpu_memory_used_mib: float | None = None
    """Largest sample, summed over GPUs (DCGM_FI_DEV_FB_USED)."""
    gpu_memory_free_mib: float | None = None
    """Smallest sample, summed over GPUs (DCGM_FI_DEV_FB_FREE)."""
    samples: int = 0


class PreflightCheck(_Open):
    name: str
    passed: bool | None = None
    """null: the servers do not expose what this check compares."""
    detail: str = ""
    baseline: Any = None
    candidate: Any = None


class Preflight(_Open):
    """The preflight record (served model, /tokenize, defaults, engine version), when preflight ran."""

    ok: bool | None = None
    baseline: str = ""
    candidate: str = ""
    model: str = ""
    checks: list[PreflightCheck] = Field(default_factory=list)
    mismatches: list[str] = Field(default_factory=list)


class SliceCheck(_Open):
    baseline_pass_rate: float | None = None
    candidate_pass_rate: float | None = None
    control_pass_rate: float | None = None
    n: int = 0


class Slice(_Open):
    """One bucket of one slicing dimension (prompt length, output length, temperature, tags...)."""

    cases: int = 0
    identical_rate: float | None = None
    checks: dict[str, SliceCheck] = Field(default_factory=dict)


class RouteFloor(_Closed):
    """One route's greedy regressions against the deployment's pooled floor."""

    regressions: int
    eligible: int
    """Greedy cases that could regress (passing on the baseline; re-asked ones with the default floor)."""
    allowance: int
    """The most regressions the pooled floor explains at alpha 0.05."""
    supported: int
    """The most its measured rate itself explains: tolerating more than this rests on too few pairs (undecided)."""


class NoiseFloorSummary(_Closed):
    """How the run measured how often the baseline disagrees with itself (the A/A noise floor)."""

    WRITTEN_WHEN_SET: ClassVar[frozenset[str]] = frozenset({"routes"})

    source: Literal["control", "repeats", "baseline_again", "none"]
    """control: a control target; repeats: the baseline's repeats; baseline_again (the default): the baseline
    asked again for every case whose candidate text differed; none: not measured."""
    cases: int = 0
    """Cases with an A/A comparison (for baseline_again: the cases asked again)."""
    disagreement_rate: float | None = None
    """Share of A/A pairs whose texts differ; for baseline_again, among the cases asked again only."""
    requests: int = 0
    """Requests the floor cost beyond the baseline and candidate answers."""
    note: str = ""
    pairs: int = 0
    """Greedy A/A pairs of the pooled floor every route is gated against: cases asked twice (or pairs of repeats)."""
    disagreements: int = 0
    """Of those, pairs whose check outcomes differed."""
    routes: dict[str, RouteFloor] = Field(default_factory=dict)
    """Written when a route has greedy regressions: how they stand against the pooled floor."""


class SamplingRound(_Closed):
    """One round of sampling: which cases were asked, and what it cost."""

    round: int
    samples_per_case: int
    """Samples per side the round's cases have once it is done."""
    cases: int
    """Sampled cases asked in this round."""
    categories: list[str]
    """The categories still undecided when it started."""
    requests: int
    """Requests it sent (both sides)."""


class SamplingSummary(_Closed):
    """How the sampled cases (temperature > 0) were sampled: the rounds and their cost."""

    mode: Literal["adaptive", "fixed"]
    """adaptive: rounds until each category decides or the budget is spent; fixed: `--repeats` samples each."""
    max_samples_per_case: int
    sample_round: int
    detectable_drop: float
    sampled_cases: int
    mean_samples_per_case: float
    """Mean samples per side over the sampled cases (what the run spent)."""
    rounds: list[SamplingRound] = Field(default_factory=list)


class StoredRunSide(_Closed):
    """A side whose answers were copied from a stored run."""

    folder: str
    side: Literal["baseline", "candidate"]
    """The stored run's side that was taken."""
    url: str
    model: str


class StoredSummary(_Closed):
    """Where the answers of a side not asked in this run came from, and what that leaves unmeasured (never guessed)."""

    WRITTEN_WHEN_SET: ClassVar[frozenset[str]] = frozenset({"candidate", "live_baseline", "short"})

    baseline: StoredRunSide
    candidate: StoredRunSide | None = None
    """`compare`: the stored run whose candidate is this run's candidate."""
    live_baseline: str | None = None
    """A live baseline asked alongside the candidate (stored as `control`): the floor's pairs and the latency compared."""
    floor: str
    """How the A/A noise floor was measured, or why it could not be (a route that needs it is then undecided)."""
    latency: str
    """What the latency guardrail compared, or why it was not evaluated."""
    short: dict[str, int] = Field(default_factory=dict)
    """Sampled category → samples per case the stored baseline holds, where a round needed more: its test stopped there."""


class HumanReview(_Closed):
    """The run's human spot-checks: who labelled, how much, and how noisy the reviewers are."""

    reviewers: list[str]
    labels: int
    """Every imported label, attention checks included."""
    pairs_on_page: int = 0
    """Pairs review.html offered (its sample)."""
    attention_labels: int = 0
    """Labels of attention checks (pairs whose answers are identical)."""
    attention_side_rate: float | None = None
    """Share of attention labels that picked a side: the reviewers' noise floor, used by the `human` check."""
    note: str = ""


class JudgePositionBias(_Closed):
    """One pairwise judge's verdicts by position, over the both-order calls of every pair it judged."""

    pairs: int
    first_position_wins: int
    second_position_wins: int
    ties: int
    first_position_rate: float | None
    """Share of decisive verdicts that chose the reply shown first; 0.5 is unbiased."""
    same_position_pairs: int
    """Pairs where both orders chose the same position: decided by position, read as ties."""
    same_position_rate: float | None


class Summary(_Closed):
    """summary.json: the whole verdict of one run."""

    model_config = ConfigDict(title="qualitycheck summary.json")

    WRITTEN_WHEN_SET: ClassVar[frozenset[str]] = frozenset(
        {"human_review", "judge_position_bias", "gpu", "sampling", "likelihood", "stored"}
    )

    format_version: int
    verdict: Verdict
    """pass: every evaluated guardrail and category passed; fail: one failed; inconclusive: something could not be decided."""
    cases: int
    targets: dict[str, TargetInfo]
    repeats: int = 1
    categories: dict[str, CategorySummary]
    errors: dict[str, ErrorCounts]
    latency: Latency
    acceptance: Acceptance
    preflight: Preflight | None = None
    """null when preflight did not run."""
    slices: dict[str, dict[str, Slice]] = Field(default_factory=dict)
    """dimension → bucket → pass rates and identity."""
    guardrails: list[GuardrailResult]
    allow_not_evaluated: bool = False
    fallback: Fallback
    not_evaluated: list[str] = Field(default_factory=list)
    """Everything that was not evaluated, one sentence each (never counted as passed)."""
    noise_floor: NoiseFloorSummary | None = None
    """null in summaries written before the floor was reported."""
    seed: int = 0
    """Seed of the statistics (bootstrap)."""
    signoff: str = ""
    """signoff.md's Markdown text."""
    judge_position_bias: dict[str, JudgePositionBias] = Field(default_factory=dict)
    """Per pairwise judge; written only when a judge decided pairs in both orders."""
    human_review: HumanReview | None = None
    """Written only after human labels were imported (`qualitycheck review DIR --import LABELS.json`)."""
    gpu: dict[str, GpuFacts] = Field(default_factory=dict)
    """Per side, sampled during generation; written only when some side exposed KV-cache usage or a DCGM exporter answered."""
    sampling: SamplingSummary | None = None
    """Written when the run has sampled cases: the sampling rounds and their cost."""
    likelihood: LikelihoodSummary | None = None
    """Written when the likelihood stage ran (or was asked to and could not): the baseline model as referee."""
    stored: StoredSummary | None = None
    """Written when a side's answers came from a stored run (`run --baseline-run`, `compare`)."""

    def to_json_text(self) -> str:
        """The file's text: indented JSON of what was written, keys in the contract's order."""
        return json.dumps(self.model_dump(mode="json"), indent=2) + "\n"


def read_summary(path: Path) -> Summary:
    """Load a summary.json; one that is missing or not a summary is a StoreError naming the file and field."""
    try:
        return Summary.model_validate_json(path.read_bytes())
    except OSError as exc:
        raise StoreError(f"{path}: cannot read summary.json: {exc.strerror or exc}") from None
    except ValidationError as exc:
        raise StoreError(f"{path}: not a qualitycheck summary.json: {first_problem(exc)}") from None


def summary_json_schema() -> dict[str, Any]:
    """The JSON Schema (Draft 2020-12) every summary.json the tool writes validates against."""
    return {"$schema": JSON_SCHEMA_DIALECT, **Summary.model_json_schema()}
