"""The likelihood stage: every stored answer scored under the baseline model, once.

Speculative decoding promises the baseline's distribution; the baseline
server itself can say how likely it finds each answer. This stage asks it
(or a `--scorer` serving the same weights without speculation) for the
log-probability of every token of every stored answer given its prompt, on
both sides, greedy and sampled, and stores per answer what a test and a
report need (`core.LikelihoodRecord`): the sum, the token count, the mean
per token, each token's log-probability and rank, the least likely tokens;
and for a greedy answer that differs from the baseline's, the first
differing token under the baseline (`core.GreedyDivergence`). The
statistics and the verdict read these records; this stage decides nothing.

- Both sides are scored the same way: a case's answers are scored from the
  token ids the server returned when all of them carry ids, else from
  their text tokenized again by the scorer (shadow pairs are stored without
  ids), so tokenization cannot tilt the comparison.
- One prefill per distinct (prompt, answer): identical answers, in this pass
  or stored from an earlier one, are copied, not scored again.
- A record is current while the response's fingerprint, the answer and the
  scorer match it, so a resumed run never scores an answer twice. An answer
  too long for the scorer's context is stored as `too_long`, a failed
  request as `error` (asked again next pass): named and counted, never left
  out silently. A server that cannot score at all leaves the evidence not
  evaluated, with the reason (`LikelihoodStage`).
- Each pass is costed (requests, prefilled tokens, seconds) on the terminal
  and in the stage's record.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys
import time
from collections.abc import Coroutine, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from qualitycheck.core._config import HttpPolicy, Target
from qualitycheck.core._http import HttpClient
from qualitycheck.core._progress import Progress
from qualitycheck.core._records import (
    GreedyDivergence,
    LikelihoodPass,
    LikelihoodRecord,
    LikelihoodStage,
    Response,
)
from qualitycheck.core._store import CaseRecords, LikelihoodKey, RunStore
from qualitycheck.likelihood._engines import CannotScore, Scored, ScoreFailed, Scorer, TooLong, detect_scorer

if TYPE_CHECKING:
    from qualitycheck.core._cases import Case

__all__ = ["LikelihoodSettings", "Progress", "score_likelihoods"]

BASELINE = "baseline"


@dataclass(frozen=True)
class LikelihoodSettings:
    """What the stage needs to know, and nothing else of the run's config."""

    scorer: Target
    """The server that scores: the baseline target, or a `--scorer` with its weights and no speculation."""
    template_extra: dict[str, Any] = field(default_factory=dict)
    """The baseline's `extra_body`: the chat-template inputs (`tools`, `chat_template_kwargs`) the prompt was rendered with."""
    enabled: bool = True
    top_k: int = 20
    least_likely: int = 5
    http: HttpPolicy = field(default_factory=lambda: HttpPolicy(timeout_s=120.0, retries=3, backoff_s=0.5, concurrency=8))
    """How the scorer is called: the run's timeout, retries and backoff, and the stage's own concurrency."""

    @property
    def identity(self) -> str:
        """The key records carry (`LikelihoodRecord.scorer`): another scorer's records are not current."""
        return f"{self.scorer.public_url} {self.scorer.model}"


def score_likelihoods(
    store: RunStore, settings: LikelihoodSettings, *, case_ids: Iterable[str] | None = None, progress: Progress | None = None
) -> LikelihoodStage:
    """Score every stored answer (of `case_ids`, or of the run) that has no current record; returns the stage's record.

    Writes the records as each case is done and the stage's record
    (artifact `likelihood`) at the end, also when interrupted; prints the
    pass's cost. Switched off, it records the evidence as not evaluated.
    """
    if not settings.enabled:
        stage = _stage(store, settings, None, evaluated=False, reason="switched off (--no-likelihood)")
        store.put_record(stage)
        return stage
    return asyncio.run(_Pass(store, settings, progress or Progress()).run(None if case_ids is None else frozenset(case_ids)))


def _stage(store: RunStore, settings: LikelihoodSettings, scorer: Scorer | None, *, evaluated: bool, reason: str = "") -> LikelihoodStage:
    """The stage's record as it stands: the scorer, the counts of the store, every pass so far (this scorer's or not)."""
    before = store.record(LikelihoodStage)
    counts = store.likelihood_counts(settings.identity)
    return LikelihoodStage(
        scorer=settings.scorer.public_url,
        model=settings.scorer.model,
        engine=scorer.engine if scorer is not None and evaluated else None,
        evaluated=evaluated,
        reason=reason,
        top_k=scorer.top_k if scorer is not None else settings.top_k,
        least_likely=settings.least_likely,
        answers=store.ok_response_count(),
        scored=counts.get("scored", 0),
        too_long=counts.get("too_long", 0),
        errors=counts.get("error", 0),
        passes=before.passes if before is not None else (),
    )


def _digest(*parts: str) -> str:
    h = hashlib.blake2b(digest_size=12)
    for p in parts:
        h.update(p.encode())
        h.update(b"\x00")
    return h.hexdigest()


@dataclass
class _Answer:
    """One response of a case, and what scoring it takes."""

    response: Response
    tokens_from: str
    """`token_ids` or `text` (`LikelihoodRecord.tokens_from`): the same for every answer of a case."""
    answer: str
    """Digest of what is scored (`LikelihoodRecord.answer`)."""
    content: str
    """Digest of prompt and answer: identical ones are scored once."""
    stored: LikelihoodRecord | None = None
    """Its current stored record, if any."""
    tokens: list[int] | None = None
    scored: Scored | None = None
    """Scored in this pass: every position's top tokens are at hand (a divergence needs them)."""
    record: LikelihoodRecord | None = None
    """The record this pass writes for it."""


@dataclass
class _Tally:
    answers: int = 0
    scored: int = 0
    reused: int = 0
    too_long: int = 0
    errors: int = 0
    requests: int = 0
    prefilled: int = 0
    too_long_names: list[str] = field(default_factory=list)
    first_error: str | None = None


class _Pass:
    """One pass over the store: the answers without a current record, scored with bounded concurrency."""

    def __init__(self, store: RunStore, settings: LikelihoodSettings, progress: Progress):
        self.store = store
        self.settings = settings
        self.progress = progress
        self.identity = settings.identity
        self.tally = _Tally()
        self.scorer: Scorer | None = None
        self._requests: asyncio.Semaphore
        self._inflight: dict[tuple[str, bool], asyncio.Task[Scored]] = {}
        """(content digest, with top tokens) → its scoring in this pass: identical answers wait for the one prefill."""

    # ------------------------------------------------------------ the pass
    async def run(self, case_ids: frozenset[str] | None) -> LikelihoodStage:
        t0, started = time.perf_counter(), time.time()
        s = self.settings
        http = HttpClient(s.scorer, s.http)
        self._requests = asyncio.Semaphore(s.http.concurrency)
        reason = ""
        try:
            try:
                self.scorer = await detect_scorer(http, s.scorer.model, s.top_k)
                work = self._plan(case_ids)
                await self._score_all(work)
            except CannotScore as exc:
                reason = str(exc)
            except ScoreFailed as exc:
                reason = f"the scorer could not be asked: {exc.info.message}"
        finally:
            self.progress.stop()
            await http.aclose()
            stage = self._finish(started, time.perf_counter() - t0, reason)
        return stage

    def _finish(self, started: float, seconds: float, reason: str) -> LikelihoodStage:
        t = self.tally
        tokenized = self.scorer.tokenize_requests if self.scorer is not None else 0
        this = LikelihoodPass(
            started_at=started,
            answers=t.answers,
            scored=t.scored,
            reused=t.reused,
            too_long=t.too_long,
            errors=t.errors,
            requests=t.requests,
            prefilled_tokens=t.prefilled,
            tokenize_requests=tokenized,
            seconds=round(seconds, 3),
        )
        stage = _stage(self.store, self.settings, self.scorer, evaluated=not reason, reason=reason)
        stage = stage.model_copy(update={"passes": (*stage.passes, this)})
        self.store.put_record(stage)
        print(_pass_line(stage, this, t), file=sys.stderr)
        return stage

    # ------------------------------------------------------------ planning
    def _plan(self, case_ids: frozenset[str] | None) -> list[tuple[Case, list[_Answer], list[tuple[_Answer, _Answer]]]]:
        """Per case: its answers needing a record (new, changed, or a divergence to add), and its greedy pairs to explain.

        Holds only the cases with work (in a resumed or finished run, few).
        """
        work = []
        totals: dict[str, int] = {}
        for rec in self.store.by_case(scores=False):
            if case_ids is not None and rec.case.id not in case_ids:
                continue
            planned = self._plan_case(rec)
            if planned is None:
                continue
            answers, pairs = planned
            for a in answers:
                if a.record is None:
                    totals[a.response.target] = totals.get(a.response.target, 0) + 1
            work.append((rec.case, answers, pairs))
        self.tally.answers = sum(totals.values())
        if totals:
            who = self.settings.scorer.public_url
            print(f"qualitycheck: likelihood: scoring {self.tally.answers} answers under the baseline model at {who}", file=sys.stderr)
            self.progress.start(totals)
        return work

    def _plan_case(self, rec: CaseRecords) -> tuple[list[_Answer], list[tuple[_Answer, _Answer]]] | None:
        oks = [r for r in rec.responses if r.ok]
        if not oks:
            return None
        by_ids = all(r.token_ids is not None for r in oks)
        prompt = _digest(json.dumps(rec.case.tokenize_body("", self.settings.template_extra), sort_keys=True, default=str))
        keys = self.store.likelihood_keys(rec.case.id)
        stored: dict[tuple[str, int], LikelihoodRecord] | None = None
        answers: dict[tuple[str, int], _Answer] = {}
        for r in oks:
            source = "token_ids" if by_ids else "text"
            answer = _digest(source, json.dumps(r.token_ids) if by_ids else r.text)
            a = _Answer(
                r, source, answer, _digest(prompt, answer), tokens=list(r.token_ids) if by_ids and r.token_ids is not None else None
            )
            key = keys.get((r.target, r.repeat))
            if _current(key, r, answer, self.identity):
                if stored is None:
                    stored = {(x.target, x.repeat): x for x in self.store.likelihoods(rec.case.id)}
                a.stored = stored.get((r.target, r.repeat))
                a.record = a.stored
            answers[(r.target, r.repeat)] = a
        pairs = []
        if not rec.case.sampled:
            for (target, rep), other in answers.items():
                base = answers.get((BASELINE, rep))
                if target == BASELINE or base is None or _same_answer(base.response, other.response, by_ids):
                    continue
                if any(a.record is not None and a.record.status != "scored" for a in (base, other)):
                    continue  # one answer cannot be scored (too long): there is no distribution to explain the divergence with
                have = other.record.divergence if other.record is not None else None
                if other.record is None or have is None or have.baseline_answer != base.answer:
                    pairs.append((base, other))
        for base, other in pairs:  # a divergence needs both answers' top tokens: both are scored in this pass
            base.record = other.record = None
        needed = [a for a in answers.values() if a.record is None]
        if not needed:
            return None
        return needed, pairs

    # ------------------------------------------------------------ scoring
    async def _score_all(self, work: list[tuple[Case, list[_Answer], list[tuple[_Answer, _Answer]]]]) -> None:
        window = asyncio.Semaphore(self.settings.http.concurrency)

        async def one(case: Case, answers: list[_Answer], pairs: list[tuple[_Answer, _Answer]]) -> None:
            try:
                await self._score_case(case, answers, pairs)
            finally:
                window.release()

        tasks: set[asyncio.Task[None]] = set()
        started: list[asyncio.Task[None]] = []
        try:
            for case, answers, pairs in work:
                await window.acquire()
                task = asyncio.create_task(one(case, answers, pairs))
                tasks.add(task)
                started.append(task)
                task.add_done_callback(tasks.discard)
            while tasks:
                done, _ = await asyncio.wait(set(tasks), return_when=asyncio.FIRST_COMPLETED)
                for d in done:
                    if (exc := d.exception()) is not None:
                        raise exc
        finally:
            for t in tasks:
                t.cancel()
            # every task's outcome is taken, those that ended before the first failure included, and every shared
            # prefill's: an exception left in a finished task is logged at garbage collection, anywhere
            await asyncio.gather(*started, *self._inflight.values(), return_exceptions=True)

    async def _score_case(self, case: Case, answers: list[_Answer], pairs: list[tuple[_Answer, _Answer]]) -> None:
        assert self.scorer is not None
        scorer = self.scorer
        in_pair = {id(x) for p in pairs for x in p}
        for a in answers:  # an identical answer scored before (any case, any pass): copied, no request, not even a tokenization
            if id(a) not in in_pair and (copy := self.store.likelihood_by_content(a.content, self.identity)) is not None:
                a.tokens = a.tokens if a.tokens is not None else copy.token_ids
                a.record = self._record(case, a, copy=copy)
                self.tally.scored += 1
                self.tally.reused += 1
                self.progress.advance(a.response.target, True)
        if all(a.record is not None for a in answers):
            self._write(answers)
            return
        prompt = await self._tokens(scorer.prompt_ids(case.tokenize_body(scorer.model, self.settings.template_extra)))
        if isinstance(prompt, _Failed):
            for a in answers:
                if a.record is None:
                    self._store_failure(case, a, prompt)
            self._write(answers)
            return
        for a in answers:
            if a.tokens is None and a.record is None:
                ids = await self._tokens(scorer.text_ids(a.response.text))
                if isinstance(ids, _Failed):
                    self._store_failure(case, a, ids)
                    continue
                a.tokens = ids
        await asyncio.gather(
            *(self._score_answer(case, a, prompt, top=id(a) in in_pair) for a in answers if a.record is None and a.tokens is not None)
        )
        for base, other in pairs:
            if base.scored is not None and other.scored is not None and other.record is not None and other.record.status == "scored":
                other.record = other.record.model_copy(update={"divergence": _divergence(base, other)})
        self._write(answers)

    async def _tokens(self, call: Coroutine[Any, Any, list[int]]) -> list[int] | _Failed:
        try:
            async with self._requests:
                ids: list[int] = await call
                return ids
        except ScoreFailed as exc:
            return _Failed("error", exc.info.message)
        except TooLong as exc:
            return _Failed("too_long", f"the scorer refused it as too long: {exc}")
        finally:
            call.close()  # cancelled while waiting for a request slot: the call never started, and is closed unstarted

    async def _score_answer(self, case: Case, a: _Answer, prompt: list[int], *, top: bool) -> None:
        """Score one answer, or wait for the prefill of an identical one in this pass; `top`: a divergence needs its top tokens."""
        assert self.scorer is not None and a.tokens is not None
        tokens = a.tokens
        if not self.scorer.fits(len(prompt), len(tokens)):
            limit = self.scorer.max_model_len
            why = f"prompt {len(prompt)} + answer {len(tokens)} tokens do not fit the scorer's context of {limit}"
            self._store_failure(case, a, _Failed("too_long", why))
            return
        task = self._inflight.get((a.content, True)) or (None if top else self._inflight.get((a.content, False)))
        reused = task is not None
        if task is None:
            task = asyncio.ensure_future(self._prefill(prompt, tokens, top=top))
            self._inflight[(a.content, top)] = task
        try:
            a.scored = await asyncio.shield(task)
        except TooLong as exc:
            self._store_failure(case, a, _Failed("too_long", f"the scorer refused it as too long: {exc}"))
            return
        except ScoreFailed as exc:
            self._store_failure(case, a, _Failed("error", exc.info.message))
            return
        a.record = self._record(case, a, prompt_tokens=len(prompt), scored=a.scored)
        self.tally.scored += 1
        self.tally.reused += reused
        self.progress.advance(a.response.target, True)

    async def _prefill(self, prompt: list[int], tokens: list[int], *, top: bool) -> Scored:
        assert self.scorer is not None
        async with self._requests:
            self.tally.requests += 1
            scored = await self.scorer.score(prompt, tokens, top=top)
        self.tally.prefilled += scored.prefilled
        return scored

    # ------------------------------------------------------------ records
    def _base(self, case: Case, a: _Answer) -> dict[str, Any]:
        r = a.response
        return {
            "case_id": case.id,
            "target": r.target,
            "repeat": r.repeat,
            "fingerprint": r.fingerprint,
            "answer": a.answer,
            "scorer": self.identity,
            "tokens_from": a.tokens_from,
            "token_ids": a.tokens if a.tokens_from == "text" else None,
        }

    def _record(
        self, case: Case, a: _Answer, *, copy: LikelihoodRecord | None = None, prompt_tokens: int = 0, scored: Scored | None = None
    ) -> LikelihoodRecord:
        base = self._base(case, a)
        if copy is not None:
            return copy.model_copy(update={**base, "divergence": None})
        assert scored is not None and a.tokens is not None
        n = len(a.tokens)
        total = sum(scored.logprobs)
        order = sorted(range(n), key=lambda i: scored.logprobs[i])[: self.settings.least_likely]
        return LikelihoodRecord(
            **base,
            status="scored",
            prompt_tokens=prompt_tokens,
            tokens=n,
            sum_logprob=total,
            mean_logprob=total / n if n else None,
            rank1=sum(1 for r in scored.ranks if r == 1),
            beyond_top_k=sum(1 for r in scored.ranks if r is None or r > self.scorer_top_k),
            token_logprobs=[round(x, 5) for x in scored.logprobs],
            token_ranks=list(scored.ranks),
            least_likely=[scored.token(i, a.tokens[i]) for i in order],
        )

    @property
    def scorer_top_k(self) -> int:
        return self.scorer.top_k if self.scorer is not None else self.settings.top_k

    def _store_failure(self, case: Case, a: _Answer, failed: _Failed) -> None:
        a.record = LikelihoodRecord(**self._base(case, a), status=failed.status, reason=failed.reason)
        if failed.status == "too_long":
            self.tally.too_long += 1
            self.tally.too_long_names.append(f"{case.id}/{a.response.target}/{a.response.repeat}")
        else:
            self.tally.errors += 1
            self.tally.first_error = self.tally.first_error or failed.reason
        self.progress.advance(a.response.target, False)

    def _write(self, answers: list[_Answer]) -> None:
        rows = [(a.record, a.content) for a in answers if a.record is not None and a.record is not a.stored]
        if rows:
            self.store.put_likelihoods(rows)


@dataclass(frozen=True)
class _Failed:
    status: Literal["too_long", "error"]
    reason: str


def _current(key: LikelihoodKey | None, r: Response, answer: str, scorer: str) -> bool:
    """A stored record still describes this response: same request, same answer, same scorer, and not a failure to retry."""
    return key is not None and key.fingerprint == r.fingerprint and key.answer == answer and key.scorer == scorer and key.status != "error"


def _same_answer(a: Response, b: Response, by_ids: bool) -> bool:
    return a.token_ids == b.token_ids if by_ids else a.text == b.text


def _first_difference(a: list[int], b: list[int]) -> int | None:
    """First index where two token lists differ (a prefix differs at its end); None when equal.

    The definition of `verdict._compare.first_divergence`, which the compare
    stage stores as `divergence_token`; this stage is below the verdict and
    cannot import it.
    """
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return None if len(a) == len(b) else n


def _divergence(base: _Answer, other: _Answer) -> GreedyDivergence | None:
    """Where `other` leaves the baseline's answer, read from both answers' scorings (the same distribution up to there)."""
    assert base.tokens is not None and other.tokens is not None and base.scored is not None and other.scored is not None
    k = _first_difference(base.tokens, other.tokens)
    if k is None:
        return None
    b_tok = base.scored.token(k, base.tokens[k]) if k < len(base.tokens) else None
    o_tok = other.scored.token(k, other.tokens[k]) if k < len(other.tokens) else None
    top = (base.scored if b_tok is not None else other.scored).top[k]
    first = top[0] if top else None
    return GreedyDivergence(
        position=k,
        baseline_answer=base.answer,
        baseline_token=b_tok,
        answer_token=o_tok,
        top=top,
        margin=first.logprob - o_tok.logprob if first is not None and o_tok is not None else None,
        runner_up_margin=first.logprob - top[1].logprob if first is not None and len(top) > 1 else None,
    )


def _pass_line(stage: LikelihoodStage, this: LikelihoodPass, t: _Tally) -> str:
    """The terminal's account of a pass: what it scored, what it cost, what it could not score."""
    if not stage.evaluated:
        return f"qualitycheck: likelihood: not evaluated: {stage.reason}"
    if not this.answers:
        held = f"{stage.scored} scored" + (f", {stage.too_long} too long" if stage.too_long else "")
        return f"qualitycheck: likelihood: every answer already has a record ({held}, of {stage.answers} answers)"
    parts = [
        f"qualitycheck: likelihood: scored {this.scored} of {this.answers} answers"
        + (f" ({this.reused} identical to one already scored)" if this.reused else "")
        + f" with {this.requests} prefills of {this.prefilled_tokens:,} tokens in {this.seconds:.1f} s"
    ]
    if t.too_long:
        shown = ", ".join(t.too_long_names[:5]) + (f" and {t.too_long - 5} more" if t.too_long > 5 else "")
        parts.append(f"{t.too_long} too long for the scorer's context ({shown})")
    if t.errors:
        parts.append(f"{t.errors} failed, asked again next time ({t.first_error})")
    return "; ".join(parts)
