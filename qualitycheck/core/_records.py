"""The records each stage writes and the next stage reads.

They are pydantic models because every one of them is persisted (in the run
store or in summary.json) and read back by a later stage; each carries the
`format_version` of the store it lives in. Records are frozen: a stage that
wants to change a result writes a new record instead of editing one.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any, ClassVar, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "ARTIFACT_RECORDS",
    "FORMAT_VERSION",
    "ArtifactRecord",
    "ErrorInfo",
    "GpuSample",
    "GpuSamples",
    "GreedyDivergence",
    "LikelihoodPass",
    "LikelihoodRecord",
    "LikelihoodStage",
    "MetricsSnapshot",
    "MetricsWindow",
    "MetricsWindows",
    "NoiseFloorRecord",
    "PreflightCheckRecord",
    "PreflightRecord",
    "Response",
    "SamplingRecord",
    "SamplingRoundRecord",
    "Score",
    "ScoreStatus",
    "SentCounts",
    "ShadowDrain",
    "ShadowPeriod",
    "ShadowPeriods",
    "SpecCounters",
    "TokenLogprob",
    "ToolCall",
    "Usage",
    "artifacts_json_schema",
    "likelihoods_json_schema",
    "render_tool_calls",
]

FORMAT_VERSION = 1
"""Bumped when a persisted record changes shape; readers refuse newer versions."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Usage(_Frozen):
    """Token counts as the server reported them (None when it did not)."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None


class ErrorInfo(_Frozen):
    """Why a request has no usable answer after all retries."""

    kind: str
    """One of: http_status, timeout, connection, stream_cut, malformed, bad_response."""
    message: str
    status: int | None = None


class ToolCall(_Frozen):
    """One function call in an answer, as the server sent it.

    `arguments` is the exact text the model produced, not a parsed value:
    a change of key order or spacing is a change of output, and checks that
    want JSON values parse it themselves.
    """

    name: str
    arguments: str = ""
    id: str | None = None


def render_tool_calls(calls: list[ToolCall]) -> str:
    """One line per call, `name(arguments)` with the arguments as sent; the text form of an answer's calls."""
    return "\n".join(f"{c.name}({c.arguments})" for c in calls)


class Response(_Frozen):
    """One answer of one target to one case (one repeat), with its timings.

    Times are seconds relative to the moment the request was sent, measured
    with a monotonic clock on the client; `chunk_times[i]` is when the i-th
    content-bearing chunk arrived and `chunk_tokens[i]` how many tokens it
    carried when the server said so (speculative servers send several).
    """

    case_id: str
    target: str
    repeat: int = 0
    fingerprint: str
    """Hash of the exact request (endpoint, model, body); resume compares it."""
    text: str = ""
    tool_calls: list[ToolCall] | None = None
    """The answer's tool calls in order; None when it made none (and in records stored before tool calls were kept)."""
    token_ids: list[int] | None = None
    finish_reason: str | None = None
    usage: Usage = Usage()
    ttft_s: float | None = None
    chunk_times: list[float] = Field(default_factory=list)
    chunk_tokens: list[int] | None = None
    e2e_s: float | None = None
    started_at: float = 0.0
    """Wall-clock (epoch seconds) when the first attempt was sent."""
    attempts: int = 1
    error: ErrorInfo | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def answer(self) -> str:
        """The whole answer as one string: the text, then its tool calls (`render_tool_calls`).

        Everything that asks "did the answer change" (identity, divergence,
        similarity, the noise floor, the report's diff) compares this, so a
        changed tool call is a changed answer even when both texts are empty.
        Without tool calls it is the text itself.
        """
        if not self.tool_calls:
            return self.text
        calls = render_tool_calls(self.tool_calls)
        return f"{self.text}\n{calls}" if self.text else calls


ScoreStatus = Literal["pass", "fail", "error", "skipped"]


class Score(_Frozen):
    """One check's outcome on one response.

    `error` means the check itself could not decide (e.g. no response, a judge
    that never answered); it is never counted as a pass or a fail.
    """

    case_id: str
    target: str
    repeat: int = 0
    check: str
    status: ScoreStatus
    value: Any = None
    detail: dict[str, Any] = Field(default_factory=dict)


ARTIFACT_RECORDS: dict[str, type[ArtifactRecord]] = {}
"""Every typed artifact by its name in the store: what `merge` asks how a kind of artifact combines."""


class ArtifactRecord(_Frozen):
    """A record a stage stores once per run (the store's `artifacts` table), under its class's `ARTIFACT` name.

    `RunStore.put_record` writes one and `RunStore.record` reads it back
    validated. Each kind says how the records of several folders combine
    (`merged`), which is all `merge` needs to know about it.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)
    ARTIFACT: ClassVar[str]
    format_version: int = FORMAT_VERSION
    """The store's format when it was written; a reader refuses a newer one."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "ARTIFACT" in cls.__dict__:
            if (taken := ARTIFACT_RECORDS.get(cls.ARTIFACT)) is not None:
                raise TypeError(f"artifact name {cls.ARTIFACT!r} is already {taken.__qualname__}'s")
            if inspect.getattr_static(cls, "merged") is inspect.getattr_static(ArtifactRecord, "merged"):  # its own, or a base's
                raise TypeError(f"{cls.__qualname__} must say how the records of merged folders combine (`merged`)")
            ARTIFACT_RECORDS[cls.ARTIFACT] = cls

    @classmethod
    def merged(cls, parts: Sequence[Self]) -> Self:
        """One record for folders merged into one run (`parts`: at least one); every kind defines it."""
        raise NotImplementedError


class NoiseFloorRecord(ArtifactRecord):
    """What the default noise floor asked: the baseline once more, for the cases whose candidate answer differed.

    Written by generation before it asks (`generation._noise`) and kept
    current by the shadow proxy as it stores pairs; the summary's
    `noise_floor` is built from it and the `control` answers. Without it a
    run measured its floor with a control target or repeats, or not at all.
    """

    ARTIFACT: ClassVar[str] = "noise_floor"
    source: Literal["baseline_again"] = "baseline_again"
    cases: int = Field(ge=0)
    """Cases the baseline was asked again for."""
    requests: int = Field(ge=0)
    """Requests that cost (one per case asked again)."""
    of_cases: int = Field(ge=0)
    """Cases both sides answered, among which those that differed were found."""

    @classmethod
    def merged(cls, parts: Sequence[Self]) -> Self:
        """Each folder asked the baseline again for its own cases: the counts add up."""
        return cls(cases=sum(p.cases for p in parts), requests=sum(p.requests for p in parts), of_cases=sum(p.of_cases for p in parts))


class SamplingRoundRecord(_Frozen):
    """One round of sampling: the sampled cases of the categories still undecided, asked for more samples."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)
    round: int = Field(ge=1)
    samples_per_case: int = Field(ge=1)
    """Samples per side the round's cases have once it is done."""
    cases: int = Field(ge=0)
    categories: tuple[str, ...] = ()
    """The categories still undecided when the round started (every sampled one for the first)."""
    requests: int = Field(ge=0)
    """Requests the round needed (both sides; what it sent when none were stored yet)."""


class SamplingRecord(ArtifactRecord):
    """How a run sampled its sampled cases (temperature > 0): the budget and the rounds taken.

    Written by the pipeline after every round (`pipeline._sampling`), so an
    interrupted run's folder says how far it got; the summary's `sampling`
    is built from it.
    """

    ARTIFACT: ClassVar[str] = "sampling"
    mode: Literal["adaptive", "fixed"]
    max_samples_per_case: int = Field(ge=1)
    sample_round: int = Field(ge=1)
    detectable_drop: float = Field(gt=0, lt=1)
    sampled_cases: int = Field(ge=0)
    rounds: tuple[SamplingRoundRecord, ...] = ()

    @classmethod
    def merged(cls, parts: Sequence[Self]) -> Self:
        """Shards sampled their own cases in rounds of the same design: each round's cases and requests add up."""
        rounds = []
        for i in range(max(len(p.rounds) for p in parts)):
            these = [p.rounds[i] for p in parts if len(p.rounds) > i]
            rounds.append(
                SamplingRoundRecord(
                    round=i + 1,
                    samples_per_case=max(r.samples_per_case for r in these),
                    cases=sum(r.cases for r in these),
                    categories=tuple(sorted({c for r in these for c in r.categories})),
                    requests=sum(r.requests for r in these),
                )
            )
        first = parts[0]
        return cls(
            mode=first.mode,
            max_samples_per_case=first.max_samples_per_case,
            sample_round=first.sample_round,
            detectable_drop=first.detectable_drop,
            sampled_cases=sum(p.sampled_cases for p in parts),
            rounds=tuple(rounds),
        )


class PreflightCheckRecord(_Frozen):
    """One preflight comparison: both servers asked the same question (generation/_preflight.py)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)
    name: str
    passed: bool | None
    """None: a server did not expose or did not answer what this check compares; never counted as a match."""
    detail: str = ""
    baseline: Any = None
    """What the baseline answered (a digest, a version, the served models), as the check compared it."""
    candidate: Any = None


class PreflightRecord(ArtifactRecord):
    """What the preflight found before generation: same model, chat template, stop tokens, defaults, engine?

    Written by generation when preflight runs; the gate's `preflight_consistent`
    and the summary's `preflight` read it. Without it preflight was switched off
    (or one side was missing), which the gate reports as not run.
    """

    ARTIFACT: ClassVar[str] = "preflight"
    ok: bool
    """No check failed (checks that could not be made do not fail it)."""
    baseline: str
    """The baseline's URL."""
    candidate: str
    model: str
    checks: list[PreflightCheckRecord] = Field(default_factory=list)
    mismatches: list[str] = Field(default_factory=list)
    """The names of the checks that failed."""

    @classmethod
    def merged(cls, parts: Sequence[Self]) -> Self:
        """Every folder ran the same preflight against the same servers: keep the first failing one if any, else the first."""
        return next((p for p in parts if not p.ok), parts[0])


class SpecCounters(_Frozen):
    """A server's speculative-decoding counters at one scrape (vLLM's `vllm:spec_decode_*`, summed over engines).

    Cumulative since the server started: only the difference between two
    scrapes means anything (`serving._acceptance`).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)
    drafts: float = 0.0
    """Verification steps that had a draft."""
    draft_tokens: float = 0.0
    accepted_tokens: float = 0.0
    per_position: dict[str, float] = Field(default_factory=dict)
    """Tokens accepted at each draft position ("0", "1", ...)."""


class MetricsSnapshot(_Frozen):
    """One scrape of one target's /metrics (`generation._metrics.scrape`); `ok` false with `error` when there was none."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)
    url: str
    t: float
    """Wall-clock (epoch seconds) when it was taken."""
    ok: bool
    error: str | None = None
    spec: SpecCounters | None = None
    """None: the server exposes no spec-decode counters (it is not speculating)."""
    generation_tokens: float | None = None
    """`vllm:generation_tokens_total`: with `requests_finished`, how other traffic is told apart from ours."""
    requests_finished: float | None = None
    kv_cache_usage: float | None = None
    """Mean over engines of the KV-cache usage gauge (0..1)."""


class SentCounts(_Frozen):
    """What we sent one target during one window, to tell its counters' movement from other callers' traffic."""

    requests: int = 0
    attempts: int = 0
    ok: int = 0
    output_tokens: int = 0


class MetricsWindow(_Frozen):
    """One attributable stretch of generation: every target scraped before and after it, and what we sent."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)
    category: str | None = None
    """The category generated in it, when acceptance is attributed per category."""
    before: dict[str, MetricsSnapshot]
    """By side (baseline, candidate, ...)."""
    after: dict[str, MetricsSnapshot]
    sent: dict[str, SentCounts]


class _Readings(ArtifactRecord):
    """A record that is a list of readings in the order they were taken, under the field `ITEMS` names.

    Folders written before these records were typed hold the bare list,
    which still reads. Each folder's readings are its own (its requests, its
    generation), so merged folders keep all of them, folder after folder.
    """

    ITEMS: ClassVar[str]

    @model_validator(mode="before")
    @classmethod
    def _bare_list(cls, data: Any) -> Any:
        return {cls.ITEMS: data} if isinstance(data, list) else data

    @classmethod
    def merged(cls, parts: Sequence[Self]) -> Self:
        return cls.model_validate({cls.ITEMS: [x for p in parts for x in getattr(p, cls.ITEMS)]})


class MetricsWindows(_Readings):
    """The run's /metrics windows, in the order they were taken (a resumed run, a shadow period adds its own)."""

    ARTIFACT: ClassVar[str] = "metrics_windows"
    ITEMS: ClassVar[str] = "windows"
    windows: list[MetricsWindow] = Field(default_factory=list)


class GpuSample(_Frozen):
    """One reading taken while generation ran: a target's KV-cache gauge, or a DCGM exporter's GPU figures."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)
    t: float
    """Wall-clock (epoch seconds) when it was taken."""
    side: str
    """The target it describes (baseline, candidate, ...); DCGM figures are the candidate's GPUs."""
    kv_cache_usage: float | None = None
    """The server's KV-cache usage gauge (0..1), mean over its engines."""
    gpu_utilization: float | None = None
    """DCGM: GPU utilisation in percent, mean over GPUs."""
    gpu_memory_used_mib: float | None = None
    """DCGM: framebuffer memory used, summed over GPUs."""
    gpu_memory_free_mib: float | None = None
    """DCGM: framebuffer memory free, summed over GPUs."""


class GpuSamples(_Readings):
    """The GPU readings of a run (`generation._measure`), in the order they were taken; `serving._gpu` summarises them."""

    ARTIFACT: ClassVar[str] = "gpu_samples"
    ITEMS: ClassVar[str] = "samples"
    samples: list[GpuSample] = Field(default_factory=list)


class ShadowDrain(BaseModel):
    """What a shadow process's stop did: how much was in flight, how much finished within the timeout."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)
    timeout_s: float
    in_flight: int
    """Pairs pending when the stop began."""
    finished: int
    """Of those, stored or accounted for before the timeout."""
    cancelled: int
    """Cancelled at the timeout (counted under dropped `stopped`)."""
    seconds: float


class ShadowPeriod(BaseModel):
    """One run folder's stretch of shadowing: what the proxy or sink received, mirrored, dropped and stored in it.

    Not frozen, unlike the other records: the serving loop counts into the
    open period as requests arrive, and the writer stores a copy of it,
    completed, when the folder closes.
    """

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)
    format_version: int = 1
    """Kept for periods stored before the record was typed (each carried its own)."""
    mode: Literal["proxy", "sink"] = "proxy"
    """`proxy`: callers' requests were forwarded to the baseline; `sink`: a gateway mirrored them and both targets were asked."""
    replica: str
    """A random id per process: case ids start with it, so folders of several replicas merge without clashes."""
    listen: str
    sample: float
    max_inflight: int
    started_at: float
    """Epoch seconds when the folder was opened."""
    closed_at: float | None = None
    closed_because: Literal["rotation", "stopped"] | None = None
    requests: int = 0
    """Requests received (every path): forwarded to the baseline by a proxy, answered at once by a sink."""
    mirrored: int = 0
    """Requests sent to the candidate as well."""
    dropped: dict[str, int] = Field(default_factory=dict)
    """Sampled requests not stored as pairs, by reason (`shadow.DROP_REASONS`)."""
    stored: int = 0
    """Pairs stored in this folder (cases)."""
    baseline_errors: dict[str, int] = Field(default_factory=dict)
    """Stored baseline answers that are errors, by kind."""
    candidate_errors: dict[str, int] = Field(default_factory=dict)
    """Stored candidate answers that are errors, by kind."""
    compared: int = 0
    """Stored pairs where both sides answered."""
    identical: int = 0
    """Of those, pairs whose answers (text and tool calls) are the same."""
    asked_again: int = 0
    """Pairs whose baseline was asked again (the noise floor: the answers differed)."""
    redactions: dict[str, int] = Field(default_factory=dict)
    """Values replaced by kind (prompts and answers); empty with `keep_pii`."""
    drain: ShadowDrain | None = None


class ShadowPeriods(_Readings):
    """A shadow folder's periods, in the order they closed (`qualitycheck shadow`, proxy or sink).

    A folder a restarted process appended to holds one period per process
    lifetime; merged folders keep every folder's periods, folder after
    folder, so the merged run still says what each replica received,
    mirrored and dropped. Folders written before the record was typed hold
    the bare list of periods, which still reads.
    """

    ARTIFACT: ClassVar[str] = "shadow"
    ITEMS: ClassVar[str] = "periods"
    periods: list[ShadowPeriod] = Field(default_factory=list)


class TokenLogprob(_Frozen):
    """One token of an answer under the scorer (the baseline model): how likely it found the token, and its rank."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)
    position: int = Field(ge=0)
    """Index among the answer's scored tokens (0: the first token after the prompt)."""
    token_id: int
    text: str | None = None
    """The token as the scorer decoded it."""
    logprob: float
    """Natural log of the probability the baseline model gives this token after the prompt and the tokens before it."""
    rank: int | None = Field(default=None, ge=1)
    """1: the baseline model's own first choice. None: below the top-k the scorer listed, and it does not say where (SGLang)."""


class GreedyDivergence(_Frozen):
    """The first token where a greedy answer leaves the baseline's answer at the same repeat, under the baseline model.

    Both answers share every token before `position`, so the scorer's
    distribution there is one: what it gives each side's token, and its own
    first choices, say whether the answer left at a near-tie (numerics) or
    took a token the baseline would not choose.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)
    position: int = Field(ge=0)
    """Index of the first differing token (the compare stage's `divergence_token` when both sides returned token ids)."""
    baseline_answer: str
    """Digest (`LikelihoodRecord.answer`) of the baseline answer compared with: the divergence is current while it matches."""
    baseline_token: TokenLogprob | None
    """The baseline answer's token there; None when the baseline's answer ended there."""
    answer_token: TokenLogprob | None
    """This record's answer's token there; None when this answer ended there."""
    top: tuple[TokenLogprob, ...] = ()
    """The scorer's most likely tokens there, most likely first (at most five)."""
    margin: float | None = None
    """`top[0].logprob - answer_token.logprob` in nats: 0 when this answer took the baseline model's first choice."""
    runner_up_margin: float | None = None
    """`top[0].logprob - top[1].logprob` in nats: how close the baseline model itself was to a tie there."""


LikelihoodStatus = Literal["scored", "too_long", "error"]


class LikelihoodRecord(_Frozen):
    """One stored answer scored under the baseline model: its log-likelihood given the prompt, token by token.

    A row of the run store's `likelihoods` table (`RunStore.put_likelihoods`),
    written by the likelihood stage (`qualitycheck.likelihood`). It is
    current for a response while `fingerprint`, `answer` and `scorer` match
    it: a resumed run never scores an answer twice, and a changed answer or
    scorer is scored again. `too_long` and `error` records name the answers
    that could not be scored, so none is left out silently.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)
    format_version: int = FORMAT_VERSION
    case_id: str
    target: str
    repeat: int = 0
    fingerprint: str
    """The scored response's request fingerprint (`Response.fingerprint`)."""
    answer: str
    """Digest of the tokens scored and how they were obtained (`tokens_from`)."""
    scorer: str
    """Who scored it: the scorer's URL and model (`LikelihoodStage.scorer`, `LikelihoodStage.model`) as one key."""
    status: LikelihoodStatus
    """`scored`; `too_long`: prompt and answer do not fit the scorer's context; `error`: the scorer failed (asked again on the next pass)."""
    reason: str | None = None
    """Why it is not scored."""
    tokens_from: Literal["token_ids", "text"]
    """`token_ids`: the tokens the server returned with the answer; `text`: the answer's text tokenized again by the scorer.
    Every answer of a case is scored the same way: token ids when all of them carry ids, else text."""
    token_ids: list[int] | None = None
    """The tokens scored, when they came from the text (with `token_ids` they are the response's own)."""
    prompt_tokens: int = Field(default=0, ge=0)
    """Tokens of the prompt the answer was scored after (the chat template applied, generation prompt included)."""
    tokens: int = Field(default=0, ge=0)
    """Tokens of the answer scored (its end-of-text token included when the server returned it)."""
    sum_logprob: float = 0.0
    """Log-likelihood of the whole answer given the prompt, in nats."""
    mean_logprob: float | None = None
    """`sum_logprob / tokens`: nats per token; None for an empty answer."""
    rank1: int = Field(default=0, ge=0)
    """Tokens that were the baseline model's own first choice."""
    beyond_top_k: int = Field(default=0, ge=0)
    """Tokens the baseline model ranks below the scorer's top-k (`LikelihoodStage.top_k`)."""
    token_logprobs: list[float] = Field(default_factory=list)
    """Each token's log-probability, in order (rounded to 1e-5 nats)."""
    token_ranks: list[int | None] = Field(default_factory=list)
    """Each token's rank (None: below the top-k, the scorer did not say)."""
    least_likely: list[TokenLogprob] = Field(default_factory=list)
    """The answer's least likely tokens, least likely first (at most `LikelihoodStage.least_likely`)."""
    divergence: GreedyDivergence | None = None
    """A greedy answer that differs from the baseline's answer at the same repeat: where it left it, under the baseline model."""


class LikelihoodPass(_Frozen):
    """What one pass of the likelihood stage did and cost (after a sampling round, or `qualitycheck likelihood DIR`)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)
    started_at: float
    """Wall-clock (epoch seconds) when it began."""
    answers: int = Field(ge=0)
    """Answers it found without a current record."""
    scored: int = Field(ge=0)
    reused: int = Field(ge=0)
    """Of the scored, answers identical (same prompt, same tokens) to one already scored: copied, no request."""
    too_long: int = Field(ge=0)
    errors: int = Field(ge=0)
    requests: int = Field(ge=0)
    """Scoring requests sent: one prefill each."""
    prefilled_tokens: int = Field(ge=0)
    """Tokens those requests prefilled (prompt and answer)."""
    tokenize_requests: int = Field(ge=0)
    """Requests for token ids (prompts; answers without ids)."""
    seconds: float = Field(ge=0)


class LikelihoodStage(ArtifactRecord):
    """The likelihood stage of a run: which scorer, whether it could score at all (and why not), and every pass's cost.

    Written by `qualitycheck.likelihood` after each pass; the per-answer
    figures are in the `likelihoods` table (`LikelihoodRecord`). A run
    without it did not ask for the stage (a folder from before it, or the
    pipeline never reached it); `evaluated` false with `reason` says the
    evidence is missing and why: switched off, or a scorer that cannot
    score a given answer (llama-server, hosted APIs).
    """

    ARTIFACT: ClassVar[str] = "likelihood"
    scorer: str
    """The scorer's URL (the baseline's unless `--scorer` named another server with the same weights)."""
    model: str
    engine: Literal["vllm", "sglang"] | None = None
    """How it was asked: vLLM's `prompt_logprobs`, SGLang's `/generate` input logprobs; None when not evaluated."""
    evaluated: bool
    reason: str = ""
    """Why the evidence is missing when not evaluated."""
    top_k: int = Field(ge=1)
    """Most likely tokens asked for at each position (ranks beyond it are counted, not listed)."""
    least_likely: int = Field(ge=0)
    """Least likely tokens kept per answer."""
    answers: int = Field(default=0, ge=0)
    """Successful answers in the run when the last pass ended."""
    scored: int = Field(default=0, ge=0)
    """Of those, scored by this scorer."""
    too_long: int = Field(default=0, ge=0)
    errors: int = Field(default=0, ge=0)
    passes: tuple[LikelihoodPass, ...] = ()

    @property
    def prefilled_tokens(self) -> int:
        return sum(p.prefilled_tokens for p in self.passes)

    @property
    def seconds(self) -> float:
        return sum(p.seconds for p in self.passes)

    @classmethod
    def merged(cls, parts: Sequence[Self]) -> Self:
        """Shards scored their own answers with the same scorer: counts add up, passes follow folder after folder.

        A shard that could not score makes the merged evidence not evaluated, with its reason.
        """
        first = next((p for p in parts if not p.evaluated), parts[0])
        return cls(
            scorer=first.scorer,
            model=first.model,
            engine=first.engine,
            evaluated=all(p.evaluated for p in parts),
            reason=first.reason,
            top_k=first.top_k,
            least_likely=first.least_likely,
            answers=sum(p.answers for p in parts),
            scored=sum(p.scored for p in parts),
            too_long=sum(p.too_long for p in parts),
            errors=sum(p.errors for p in parts),
            passes=tuple(x for p in parts for x in p.passes),
        )


def likelihoods_json_schema() -> dict[str, Any]:
    """The JSON Schema (Draft 2020-12) of a row of the run store's `likelihoods` table (its `body`)."""
    schema = LikelihoodRecord.model_json_schema(ref_template="#/$defs/{model}")
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        **schema,
        "title": "qualitycheck likelihood record",
        "description": "The `body` of a row of run.sqlite's `likelihoods` table: one stored answer scored under the baseline model.",
    }


def artifacts_json_schema() -> dict[str, Any]:
    """The JSON Schema (Draft 2020-12) of a run store's typed artifacts: one property per artifact name."""
    from pydantic.json_schema import models_json_schema

    kinds = sorted(ARTIFACT_RECORDS.items())
    refs, top = models_json_schema([(k, "validation") for _, k in kinds], ref_template="#/$defs/{model}")
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "qualitycheck run store artifacts",
        "description": "The `body` of a row of run.sqlite's `artifacts` table, by its `name`.",
        "type": "object",
        "properties": {name: refs[(kind, "validation")] for name, kind in kinds},
        **top,
    }
