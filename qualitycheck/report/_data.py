"""What the reports show, gathered once from summary.json and the run store.

The HTML and terminal renderers only format what this module hands them, so
the two never disagree about which case is a regression. A case's status
(regression, tolerated, error, improved, flaky, divergent, identical) is the
one `verdict._status` decides, read from the summary and the compare stage's
records: nothing here decides it again. Per-case data is kept compact
(status letters, short keys), and a run of any size is read in one streaming
pass: every case is given its status and counted, but full rows (answers,
score details, comparison records) are kept only for the `max_cases` that
matter most, so a 100,000-case run costs what 5,000 cases cost.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import pickle
import shutil
import time
import weakref
from array import array
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from pydantic_core import to_jsonable_python

from qualitycheck.core._records import LikelihoodRecord, LikelihoodStage, Response, TokenLogprob
from qualitycheck.core._store import CaseRecords, GroupsById, RunStore
from qualitycheck.verdict._compare import CaseComparison
from qualitycheck.verdict._likelihood import LikelihoodTally, current_likelihoods
from qualitycheck.verdict._model import DivergenceSummary, Summary
from qualitycheck.verdict._status import STATUS_ORDER, CaseStatus, Status, StatusBook

__all__ = [
    "ITL_SAMPLE",
    "MAX_CASES",
    "CaseRow",
    "ReportData",
    "RowCollector",
    "collect",
    "divergence_view",
    "percentiles",
    "run_date",
    "sample_view",
]

MAX_CASES = 5_000
"""Cases whose detail (answers, score details, comparison records) report.html embeds.

A case costs the page 1-3 kB of JSON with short answers and far more with long
ones; 5,000 keeps the file near 10-25 MB, which Chromium parses in about a
second and searches interactively, and it holds every regression, error,
improvement and flaky case of any run a person would read case by case (a
run with more regressions than that needs aggregate numbers, not a list).
The rest stay in the store: `load_run(DIR)` reads all of them into pandas."""

ITL_SAMPLE = 250_000
"""Per side, how many per-token gaps the ITL chart keeps: a seeded uniform sample
(reservoir) past that, since a 100,000-pair run has ~10^7 gaps and a 32-bin
histogram or a p99 needs a small fraction of them."""

_STATUS_LETTER = {"pass": "p", "fail": "f", "error": "e", "skipped": "s"}
_SIDES = ("baseline", "candidate")
_CHART_SIDES = frozenset((*_SIDES, "control"))


@dataclass
class CaseRow:
    """One case as the report's case list and detail view need it."""

    id: str
    category: str
    route: str
    prompt: str
    texts: dict[str, list[str | None]] = field(default_factory=dict)
    """target → answer text per repeat (None where no answer is stored)."""
    errors: dict[str, list[str | None]] = field(default_factory=dict)
    meta: dict[str, list[dict[str, Any] | None]] = field(default_factory=dict)
    """target → per repeat: finish reason, tokens, e2e seconds."""
    statuses: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    """check → target → status letter per repeat (p/f/e/s, '-' when not scored)."""
    details: dict[str, dict[str, list[Any]]] = field(default_factory=dict)
    regressed: list[str] = field(default_factory=list)
    """Checks this case is a counted regression on; `tolerated`, `improved`, `flaky` likewise."""
    tolerated: list[str] = field(default_factory=list)
    improved: list[str] = field(default_factory=list)
    flaky: list[str] = field(default_factory=list)
    flags: list[Status] = field(default_factory=list)
    """Every status of the case (verdict._status), in STATUS_ORDER: the first is its primary status."""
    comparison: list[dict[str, Any] | None] = field(default_factory=list)
    """The compare stage's record per repeat (divergence, similarity, format features)."""
    likelihood: dict[str, list[Any]] = field(default_factory=dict)
    """side → per repeat: the answer under the baseline model (`sample_view`), or why it is not scored (a string), or None;
    a candidate answer identical to the baseline's at that repeat is `SAME_AS_BASELINE`."""
    divergences: list[dict[str, Any]] = field(default_factory=list)
    """The greedy pair's first differing token under the baseline model, per divergent repeat (`divergence_view`), from the summary."""

    def compact(self) -> dict[str, Any]:
        """The JSON shape the page's script reads (short keys: it is repeated per case)."""
        d: dict[str, Any] = {"i": self.id, "k": self.category, "f": self.flags, "p": self.prompt, "t": self.texts, "s": self.statuses}
        if self.route != self.category:
            d["r"] = self.route
        for key, value in (
            ("e", self.errors),
            ("m", self.meta),
            ("d", self.details),
            ("rc", self.regressed),
            ("tc", self.tolerated),
            ("ic", self.improved),
            ("fc", self.flaky),
            ("x", self.comparison),
            ("l", self.likelihood),
            ("v", self.divergences),
        ):
            if value:
                d[key] = value
        return d


@dataclass
class ReportData:
    """Everything one report shows; `summary` is summary.json as written."""

    summary: Summary
    manifest: dict[str, Any]
    created_at: float | None
    rows: list[CaseRow]
    """The embedded cases (at most `max_cases`), most important first, suite order within a flag."""
    checks: list[str]
    categories: list[str]
    latency_samples: dict[str, dict[str, np.ndarray]]
    """metric → target → values in ms, per response (per token gap for ITL): for the charts."""
    total_cases: int = 0
    """Every case in the store, embedded or not."""
    flag_counts: dict[str, int] = field(default_factory=dict)
    """status → cases carrying it, over all cases (a case may carry several statuses)."""
    category_flags: dict[str, dict[str, int]] = field(default_factory=dict)
    """category → status → cases, over all cases."""
    omitted: dict[str, int] = field(default_factory=dict)
    """Cases not embedded, by their primary status ("" for a case without any)."""
    max_cases: int = MAX_CASES
    folder: Path | None = None
    """The run folder, named on the page as where the cases it does not embed are."""
    latency_sampled: dict[str, dict[str, int]] = field(default_factory=dict)
    """metric → side → how many values there were, where the chart shows only a sample of them."""

    @property
    def omitted_total(self) -> int:
        return sum(self.omitted.values())

    @property
    def regressions_omitted(self) -> int:
        """Regressions that did not fit: only when they alone outnumber `max_cases`."""
        return self.omitted.get("regression", 0)

    def top_regressions(self, n: int = 10) -> list[CaseRow]:
        """The first embedded cases that regressed, counted ones first, then tolerated ones."""
        return [r for r in self.rows if r.flags and r.flags[0] in ("regression", "tolerated")][:n]


PROMPT_HEAD, PROMPT_TAIL = 1_000, 3_000
"""Characters of a prompt the report keeps: long-context prompts would otherwise dominate
the file (10,000 cases × 30 kB), and the question usually sits at the end."""


def _clip(text: str) -> str:
    if len(text) <= PROMPT_HEAD + PROMPT_TAIL + 100:
        return text
    omitted = len(text) - PROMPT_HEAD - PROMPT_TAIL
    return f"{text[:PROMPT_HEAD]}\n… [{omitted:,} characters omitted in this report] …\n{text[-PROMPT_TAIL:]}"


def _prompt_text(body: dict[str, Any] | None) -> str:
    if not body:
        return ""
    if body.get("prompt") is not None:
        return str(body["prompt"])
    parts = []
    for m in body.get("messages") or []:
        content = m.get("content")
        if isinstance(content, list):  # multi-part content: keep the text parts
            content = "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        parts.append(f"[{m.get('role', '?')}] {content if content is not None else ''}")
    return "\n".join(parts)


_COMPARISON_SKIP = {"case_id", "category", "route", "repeat", "format_version", "checks", "format"}
"""Fields of a comparison record the report shows elsewhere already (statuses come from the scores), or
shows trimmed (`format`: `_changed_format`)."""


def _changed_format(fmt: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """The format features (side → feature → value) whose value is not the same on every side that has them.

    What a reader of one case looks for is what changed in the answer's
    shape; a feature equal on every side is read off the answer text shown
    beside it. Listing all of them, for every side of every case, was three
    quarters of a 10,000-pair page. Empty when nothing differs (always, for
    identical answers).
    """
    sides = list(fmt.values())
    first = sides[0] if sides else {}
    if len(sides) < 2 or all(f == first for f in sides[1:]):  # the usual case, decided by one dict comparison per side
        return {}
    names = dict.fromkeys(n for f in sides for n in f)
    missing = object()
    changed = [n for n in names if any(f.get(n, missing) != first.get(n, missing) for f in sides[1:])]
    return {side: {n: f[n] for n in changed if n in f} for side, f in fmt.items()} if changed else {}


_SHOWN_FIELDS = tuple(name for name in CaseComparison.model_fields if name not in _COMPARISON_SKIP)
_JSON_SCALARS = (bool, int, float, str)


def _shown(rec: CaseComparison) -> dict[str, Any]:
    """The record as the detail view lists it: fields without a value left out, `format` trimmed.

    Read off the record's attributes, which are JSON values already (the
    answers' finish reasons a dict of them); a field of any other type is
    converted by pydantic, as the whole record once was.
    """
    out: dict[str, Any] = {}
    for name in _SHOWN_FIELDS:
        v = getattr(rec, name)
        if v is None or v == {} or v == []:
            continue
        if type(v) in _JSON_SCALARS or (type(v) is dict and all(x is None or type(x) in _JSON_SCALARS for x in v.values())):
            out[name] = dict(v) if type(v) is dict else v
        else:
            out[name] = rec.model_dump(mode="json", include={name})[name]
    changed = _changed_format(rec.format)
    if changed:
        out["format"] = to_jsonable_python(changed)
    return out


def _comparison_slots(records: Iterable[CaseComparison], repeats: int) -> list[dict[str, Any] | None]:
    """One case's compare records → the record per repeat as the detail view shows it."""
    slot: list[dict[str, Any] | None] = []
    for rec in records:
        if not 0 <= rec.repeat < repeats:
            continue
        slot = slot or [None] * repeats
        slot[rec.repeat] = _shown(rec)
    return slot


LOGPROB_DIGITS = 2
"""Decimals of nats the page keeps per token and per sample: 0.005 nats is 0.5% of a probability, finer than anyone reads it."""


def _locate(text: str, tokens: list[TokenLogprob], n_tokens: int) -> list[tuple[int, int] | None]:
    """Where each of an answer's least likely tokens sits in its text: (start, end) characters, None where it cannot be found.

    A record gives token positions, not characters, and the decoded text of
    these tokens only (not of the tokens between them), so each is looked
    for by its text: at its only occurrence, or at the occurrence nearest to
    where its position falls in proportion to the answer's length, after the
    tokens before it (`tokens` in position order). A token whose decoded text
    is not in the answer (a byte of a split character, `\ufffd`) is None and
    is listed beside the text instead of marked in it.
    """
    spans: list[tuple[int, int] | None] = []
    low = 0
    for t in tokens:
        piece = t.text
        if not piece or not piece.strip():
            spans.append(None)  # whitespace alone: nothing a reader could see marked
            continue
        at, best = text.find(piece, low), None
        expected = len(text) * t.position / max(n_tokens, 1)
        while at >= 0:
            if best is None or abs(at - expected) < abs(best - expected):
                best = at
            elif at > expected:
                break  # occurrences only move further away from here on
            at = text.find(piece, at + 1)
        if best is None:
            spans.append(None)
            continue
        spans.append((best, best + len(piece)))
        low = best + len(piece)
    return spans


def sample_view(record: LikelihoodRecord | None, text: str | None) -> list[Any] | str | None:
    """One answer under the baseline model, as the case view shows it: `[mean, tokens, least likely]`, or why it is not scored.

    `mean` is the record's mean log-probability per token (nats), `tokens`
    how many were scored, and each least likely token `[position, logprob,
    rank, start, end]` with its characters in `text` (`_locate`), or
    `[position, logprob, rank, text]` when it cannot be placed. Only these and
    the mean are kept, not every token's log-probability: the page holds
    thousands of answers. None when there is no answer to score.
    """
    if text is None:
        return None
    if record is None:
        return "not scored"
    if record.status == "too_long":
        return "not scored: prompt and answer do not fit the scorer's context"
    if record.status == "error":
        return f"not scored: the scorer failed ({(record.reason or 'no reason given')[:200]})"
    if record.mean_logprob is None:
        return "not scored: empty answer"
    least = sorted(record.least_likely, key=lambda t: t.position)
    marks: list[list[Any]] = []
    for t, span in zip(least, _locate(text, least, record.tokens), strict=True):
        head = [t.position, round(t.logprob, LOGPROB_DIGITS), t.rank]
        marks.append([*head, *span] if span is not None else [*head, t.text])
    return [round(record.mean_logprob, LOGPROB_DIGITS), record.tokens, marks]


def divergence_view(d: DivergenceSummary) -> dict[str, Any]:
    """A greedy pair's first differing token as the case view shows it (summary.json's `divergences`, short keys)."""
    return {
        "r": d.repeat,
        "k": d.kind,
        "at": d.position,
        "ct": d.candidate_token,
        "cp": d.candidate_probability,
        "cr": d.candidate_rank,
        "bt": d.baseline_token,
        "bp": d.baseline_probability,
        "m": None if d.margin is None else round(d.margin, 3),
        "rm": None if d.runner_up_margin is None else round(d.runner_up_margin, 3),
    }


SAME_AS_BASELINE = True
"""A candidate answer's slot when it and its view are the baseline's at the same repeat: an identical greedy pair, most
of a greedy run, is embedded once."""


def _likelihood_slots(rec: CaseRecords, scorer: str, repeats: int) -> dict[str, list[Any]]:
    """Both sides' answers of one case under the baseline model, per repeat (`sample_view`, or `SAME_AS_BASELINE`);
    empty when none was scored."""
    current = current_likelihoods(rec, scorer)
    if not current:
        return {}
    out: dict[str, list[Any]] = {}
    texts: dict[tuple[str, int], str] = {}
    for r in rec.responses:
        if r.target in _SIDES and r.repeat < repeats:
            out.setdefault(r.target, [None] * repeats)[r.repeat] = sample_view(current.get((r.target, r.repeat)), r.text if r.ok else None)
            texts[r.target, r.repeat] = r.text
    base, cand = out.get("baseline"), out.get("candidate")
    if base is not None and cand is not None:
        for rep, view in enumerate(cand):
            if isinstance(view, list) and view == base[rep] and texts.get(("candidate", rep)) == texts.get(("baseline", rep)):
                cand[rep] = SAME_AS_BASELINE
    return out


class _Reservoir:
    """A uniform sample of at most `size` values from a stream of arrays, whatever order they come in or however the stream is cut.

    Each value comes with a key, a hash of where it comes from (`_Latency`:
    its response and its place in it), and the sample is the `size` values
    with the smallest keys (a bottom-k sample): a uniform random sample
    that depends on the set of values only, so the samples of two walks of
    halves of a run merge (`merge`) into the sample of one walk of all of
    it. While at most `size` values have come, every one is kept in arrival
    order, so a small run's chart holds every gap.
    """

    def __init__(self, size: int):
        self.size, self.seen = size, 0
        self._values: list[np.ndarray] = []
        self._keys: list[np.ndarray] = []
        self._held = 0
        self._bound: np.uint64 | None = None
        """Once more than `size` values were held: the largest key kept. A value with a larger key is never sampled."""

    def add(self, values: np.ndarray, keys: np.ndarray) -> None:
        self.seen += len(values)
        if self.size <= 0:  # a chart without gaps
            return
        if self._bound is not None:
            low = keys <= self._bound
            values, keys = values[low], keys[low]
        self._values.append(values)
        self._keys.append(keys)
        self._held += len(values)
        if self._held > 2 * self.size:  # pruned now and then, not on every batch
            self._prune()

    def _prune(self) -> None:
        values, keys = np.concatenate(self._values), np.concatenate(self._keys)
        if len(keys) > self.size:
            best = np.argpartition(keys, self.size - 1)[: self.size]
            values, keys = values[best], keys[best]
            self._bound = keys.max()
        self._values, self._keys, self._held = [values], [keys], len(values)

    def merge(self, later: _Reservoir) -> None:
        """Fold in the sample of the values that came after this one's."""
        seen = self.seen + later.seen
        for values, keys in zip(later._values, later._keys, strict=True):
            self.add(values, keys)
        self.seen = seen

    def values(self) -> np.ndarray:
        """Every value in arrival order while there are at most `size`; else the sample, by key."""
        if not self._values:
            return np.empty(0)
        if self.seen <= self.size:
            return np.concatenate(self._values)
        self._prune()
        return self._values[0][np.argsort(self._keys[0], kind="stable")]


def _mixed(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on uint64 values: nearby inputs give unrelated, evenly spread outputs."""
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(0x94D049BB133111EB)
    out: np.ndarray = x ^ (x >> np.uint64(31))
    return out


def _response_seed(case_id: str, target: str, repeat: int) -> int:
    """A response's identity, 64 bits, combined with each gap's place into the gap's sampling key: the same in every process and walk.

    64 bits so that two gaps practically never share a key: with equal keys
    at the sample's edge, which one is kept would depend on the order the
    walk met them in, and the split walk's sample would differ from one walk's.
    """
    return int.from_bytes(hashlib.blake2b(f"{case_id}\0{target}\0{repeat}".encode(), digest_size=8).digest(), "little")


class _Latency:
    """The chart samples: per-response metrics as packed doubles, per-token gaps through a reservoir.

    Chunk times are appended to a flat buffer per side and turned into gaps
    a batch at a time (numpy per response cost more than parsing it). Each
    gap's sampling key hashes its response's identity and its place in the
    response (`_Reservoir`).
    """

    BATCH = 1 << 16

    def __init__(self, itl_sample: int):
        self.per_response: dict[str, dict[str, array[float]]] = {m: {} for m in ("ttft_ms", "tpot_ms", "e2e_ms")}
        self.itl: dict[str, _Reservoir] = {}
        """side → its gaps' sample, in the order the sides first streamed more than one chunk."""
        self.itl_sample = itl_sample
        self._times: dict[str, array[float]] = {}
        self._tokens: dict[str, list[tuple[int, list[int]]]] = {}
        """side → (offset in the buffer, tokens per chunk) of the responses that report them; 1 elsewhere."""
        self._starts: dict[str, list[int]] = {}
        self._seeds: dict[str, list[int]] = {}
        """side → `_response_seed` of each buffered response."""

    def _samples(self, metric: str, side: str) -> array[float]:
        per_side = self.per_response[metric]
        values = per_side.get(side)
        if values is None:
            values = per_side[side] = array("d")
        return values

    def add(self, r: Any) -> None:
        side, ttft, e2e = r.target, r.ttft_s, r.e2e_s
        if ttft is not None:
            self._samples("ttft_ms", side).append(ttft * 1000)
        if e2e is not None:
            self._samples("e2e_ms", side).append(e2e * 1000)
            n = r.usage.completion_tokens
            if ttft is not None and n and n > 1:
                self._samples("tpot_ms", side).append((e2e - ttft) * 1000 / (n - 1))
        times = r.chunk_times
        if len(times) > 1:
            buf = self._times.get(side)
            if buf is None:
                buf = self._times[side] = array("d")
                self._starts[side], self._seeds[side] = [], []
                if side not in self.itl:
                    self.itl[side] = _Reservoir(self.itl_sample)
            self._starts[side].append(len(buf))
            self._seeds[side].append(_response_seed(r.case_id, side, r.repeat))
            buf.extend(times)
            toks = r.chunk_tokens
            if toks and len(toks) == len(times):
                self._tokens.setdefault(side, []).append((len(buf) - len(times), toks))
            if len(buf) >= self.BATCH:
                self._flush(side)

    def _flush(self, side: str) -> None:
        """Per-token gaps of the buffered responses: a chunk carrying k tokens (speculation) counts k gaps of gap/k."""
        times = np.frombuffer(self._times[side], dtype=np.float64)
        if len(times) < 2:
            return
        gaps = np.diff(times) * 1000
        spans = self._tokens.get(side)
        if spans:
            tokens = np.ones(len(times))
            for at, toks in spans:
                tokens[at : at + len(toks)] = toks
            gaps = gaps / np.maximum(1, tokens[1:])
        starts = np.asarray(self._starts[side], dtype=np.int64)
        owner = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, len(times))))  # the response of each chunk time
        place = (np.arange(len(times)) - starts[owner]).astype(np.uint64)
        keys = _mixed(np.asarray(self._seeds[side], dtype=np.uint64)[owner] ^ place)
        within = np.ones(len(gaps), dtype=bool)
        within[starts[1:] - 1] = False  # the step from one response's last chunk to the next one's first is no gap
        self.itl[side].add(gaps[within], keys[:-1][within])
        self._times[side], self._tokens[side], self._starts[side], self._seeds[side] = array("d"), [], [], []

    def flush(self) -> None:
        """Every buffered response's gaps into its side's sample."""
        for side in list(self._times):
            self._flush(side)

    def merge(self, later: _Latency) -> None:
        """Fold in the samples of the responses after this one's (per-response values in order, gap samples merged)."""
        self.flush()
        later.flush()
        for metric, sides in later.per_response.items():
            for side, values in sides.items():
                self._samples(metric, side).extend(values)
        for side, sample in later.itl.items():
            mine = self.itl.get(side)
            if mine is None:
                self.itl[side] = sample
            else:
                mine.merge(sample)

    def arrays(self) -> tuple[dict[str, dict[str, np.ndarray]], dict[str, dict[str, int]]]:
        self.flush()
        out: dict[str, dict[str, np.ndarray]] = {}
        sampled: dict[str, dict[str, int]] = {}
        for metric in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
            if metric == "itl_ms":
                sides = {s: res.values() for s, res in self.itl.items()}
                for s, res in self.itl.items():
                    if res.seen > res.size:
                        sampled.setdefault(metric, {})[s] = res.seen
            else:
                sides = {s: np.frombuffer(v, dtype=np.float64) for s, v in self.per_response[metric].items()}
            for side, arr in sides.items():
                if arr.size:
                    out.setdefault(metric, {})[side] = arr
        return out, sampled


def shown_answer(r: Response) -> str:
    """The answer as the report shows it: the text, then each tool call with its arguments pretty-printed.

    Arguments that parse as JSON are indented (key order kept), so the
    side-by-side diff lines up argument by argument and highlights the
    values that changed; arguments that are not JSON are shown as sent.
    """
    if not r.tool_calls:
        return r.text
    blocks = [r.text] if r.text else []
    for c in r.tool_calls:
        try:
            args = json.dumps(json.loads(c.arguments), indent=2, ensure_ascii=False) if c.arguments.strip() else "{}"
        except ValueError:
            args = c.arguments
        blocks.append(f"tool call: {c.name}\n{args}")
    return "\n\n".join(blocks)


def _case_row(rec: CaseRecords, repeats: int) -> CaseRow:
    """One case's row without its status, prompt and comparison (added only if the case may be embedded)."""
    c = rec.case
    row = CaseRow(c.id, c.category, c.route, "")
    for r in rec.responses:
        if r.repeat >= repeats:
            continue
        if r.target in _SIDES:
            row.texts.setdefault(r.target, [None] * repeats)[r.repeat] = shown_answer(r) if r.ok else None
            row.meta.setdefault(r.target, [None] * repeats)[r.repeat] = {
                "finish": r.finish_reason,
                "tokens": r.usage.completion_tokens,
                "e2e_s": None if r.e2e_s is None else round(r.e2e_s, 4),
            }
        if r.error is not None:
            row.errors.setdefault(r.target, [None] * repeats)[r.repeat] = f"{r.error.kind}: {r.error.message}"
    letters: dict[str, dict[str, list[str]]] = {}
    for s in rec.scores:
        if s.repeat >= repeats:
            continue
        letters.setdefault(s.check, {}).setdefault(s.target, ["-"] * repeats)[s.repeat] = _STATUS_LETTER.get(s.status, "-")
        detail = s.detail
        if s.value is not None and not isinstance(s.value, bool):
            detail = {"value": s.value, **detail}
        if detail:
            row.details.setdefault(s.check, {}).setdefault(s.target, [None] * repeats)[s.repeat] = dict(detail)
    row.statuses = {check: {t: "".join(v) for t, v in per.items()} for check, per in letters.items()}  # type: ignore[misc]
    return row


def _set_status(row: CaseRow, status: CaseStatus) -> None:
    row.regressed, row.tolerated = status.checks_with("regression"), status.checks_with("tolerated")
    row.improved, row.flaky = status.checks_with("improved"), status.checks_with("flaky")
    row.flags = list(status.statuses)


_RANK: dict[str, int] = {**{f: i for i, f in enumerate(STATUS_ORDER)}, "": len(STATUS_ORDER)}


def _first_flag(flags: list[Status] | tuple[Status, ...]) -> str:
    """The status a case is listed (and kept) under: its primary one, "" when it has none."""
    return flags[0] if flags else ""


_DECIDED = ("pass", "fail")


def _may_hold_check_status(comps: Iterable[CaseComparison]) -> bool:
    """Whether the statistics may list this case (regression, tolerated, improved, flaky on some check).

    Each of those needs a check that both passed and failed on the case:
    the candidate against the baseline (a flip), or the baseline against
    itself (the control, a baseline asked again, or its repeats). A case
    where every check decided alike everywhere is listed by none of them,
    so its status is known before the statistics are.
    """
    seen: dict[str, set[str]] = {}
    for c in comps:
        for name, o in c.checks.items():
            got = seen.setdefault(name, set())
            got.update(x for x in (o.baseline, o.candidate, o.control) if x in _DECIDED)
            if len(got) == 2:
                return True
    return False


def _diverged_under_the_baseline(rec: CaseRecords) -> bool:
    """Whether the decision may list this case on `decisive_divergence`: a greedy answer the likelihood stage explained.

    That check is no score of the case's: the decision makes it from the
    divergence (`verdict._decision`), so no comparison shows it passing and
    failing; such a case waits for the statistics like one that flipped.
    """
    return any(lr.divergence is not None for lr in rec.likelihoods)


class _Spill:
    """Rows held aside until the statistics rank them: in memory up to `limit`, past that in a temporary file.

    Rows of cases whose status the statistics decide cannot be ranked while
    the store is walked; they are kept whole (so the walk never comes back
    for them), and a run where more of them exist than the page embeds keeps
    them on disk, not in memory.
    """

    def __init__(self, limit: int):
        self._limit = limit
        self._rows: dict[str, CaseRow] = {}
        self._db: Any = None
        self._dir: str | None = None
        self._cleanup: Any = None
        """Deletes the folder if this spill is dropped without `close` (a summary that failed half-way)."""

    def put(self, row: CaseRow) -> None:
        if self._db is None and len(self._rows) < self._limit:
            self._rows[row.id] = row
            return
        if self._db is None:
            import sqlite3
            import tempfile

            self._dir = tempfile.mkdtemp(prefix="qc-report-")
            self._cleanup = weakref.finalize(self, shutil.rmtree, self._dir, True)
            self._db = sqlite3.connect(Path(self._dir) / "rows.sqlite")
            self._db.execute("CREATE TABLE rows (id TEXT PRIMARY KEY, body BLOB NOT NULL)")
        self._db.execute("INSERT OR REPLACE INTO rows VALUES (?,?)", (row.id, pickle.dumps(row, pickle.HIGHEST_PROTOCOL)))

    def take(self, case_id: str) -> CaseRow:
        row = self._rows.pop(case_id, None)
        if row is not None:
            return row
        (body,) = self._db.execute("SELECT body FROM rows WHERE id=?", (case_id,)).fetchone()
        return pickle.loads(body)  # type: ignore[no-any-return]

    def hand_over(self) -> tuple[dict[str, CaseRow], str | None]:
        """The rows held, for another process's spill (`take_over`): those in memory, and the folder of the file holding the rest.

        The file is left in place, closed and complete, for the receiver to read and delete.
        """
        rows, folder = self._rows, None
        if self._db is not None:
            self._db.commit()
            self._db.close()
            self._cleanup.detach()  # the receiver deletes it
            folder, self._db, self._dir = self._dir, None, None
        self._rows = {}
        return rows, folder

    def take_over(self, rows: dict[str, CaseRow], folder: str | None) -> None:
        """Hold the rows another process's spill handed over (`hand_over`), and delete its file."""
        for row in rows.values():
            self.put(row)
        if folder is not None:
            import sqlite3

            db = sqlite3.connect(Path(folder) / "rows.sqlite")
            try:
                for (body,) in db.execute("SELECT body FROM rows"):
                    self.put(pickle.loads(body))
            finally:
                db.close()
                shutil.rmtree(folder, ignore_errors=True)

    def close(self) -> None:
        self._rows.clear()
        if self._db is not None:
            self._db.close()
            self._cleanup()
            self._db = self._dir = None


@dataclass
class _RowsPart:
    """A `RowCollector`'s gatherings, sent from the process that walked the second half of a run (`RowCollector.part`)."""

    latency: _Latency
    flag_counts: dict[str, int]
    primary: dict[str, int]
    category_flags: dict[str, dict[str, int]]
    checks: set[str]
    heap: list[tuple[int, int, CaseRow]]
    pending: list[tuple[str, str, int, CaseStatus]]
    rows: dict[str, CaseRow]
    """The pending cases' rows held in memory; the rest are in `spilled`, a folder with their file."""
    spilled: str | None


class RowCollector:
    """The report's share of the one walk of the store: every case counted, full rows kept for the most important.

    `add` takes each case with its comparison records as the walk reaches
    it; `result` ranks them once the summary (and with it every case's
    status) is known. A case's error, divergent and identical statuses are
    known during the walk, so cases that the statistics cannot list are
    ranked at once, in a heap bounded by `max_cases`. Cases the statistics
    may list (a check that both passed and failed on them) wait, as a small
    record each plus their row (`_Spill`), until `result` gives them their
    status: the selection is exactly the one a second walk with the
    summary in hand would make, and memory stays bounded by `max_cases`
    rows however large the run. Given the `summary` up front (a report of
    a run whose summary is already written), every status is known during
    the walk and nothing waits.
    """

    def __init__(self, store: RunStore, *, max_cases: int = MAX_CASES, itl_sample: int = ITL_SAMPLE, summary: Summary | None = None):
        if max_cases < 0:
            raise ValueError(f"max_cases must be >= 0, got {max_cases}")
        self.store, self.max_cases = store, max_cases
        self.repeats = max(1, int(store.manifest.get("repeats") or 1))
        self._most_samples = max(self.repeats, int((store.manifest.get("sampling") or {}).get("max_samples_per_case") or 0))
        """The most samples per side a sampled case may have (the sampling rounds' budget): its slots in the page."""
        self.suite_index = {cid: i for i, cid in enumerate(store.case_labels())}  # the walk is by id; the page lists in suite order
        self._known = StatusBook(summary) if summary is not None else StatusBook.without_checks(self.repeats)
        tally = LikelihoodTally.for_stage(store.record(LikelihoodStage))
        self._scorer = tally.scorer if tally is not None else None
        """The likelihood stage's scorer as its records name it: only its records describe the answers (None: no evidence)."""
        self._decided = summary is not None
        self.latency = _Latency(itl_sample)
        self.flag_counts: dict[str, int] = {f: 0 for f in STATUS_ORDER}
        self.primary: dict[str, int] = {}
        self.category_flags: dict[str, dict[str, int]] = {}
        self.checks: set[str] = set()
        self._heap: list[tuple[int, int, CaseRow]] = []  # (-rank, -suite index, row): the root is the least important kept case
        self._pending: list[tuple[str, str, int, CaseStatus]] = []  # (id, category, suite index, status known so far)
        self._spill = _Spill(max_cases)

    def _per_category(self, category: str) -> dict[str, int]:
        per_cat = self.category_flags.get(category)
        if per_cat is None:
            per_cat = self.category_flags[category] = dict.fromkeys(STATUS_ORDER, 0)
        return per_cat

    def _count(self, category: str, flags: tuple[Status, ...]) -> str:
        per_cat, counts = self._per_category(category), self.flag_counts
        for f in flags:
            counts[f] += 1
            per_cat[f] += 1
        first = _first_flag(flags)
        self.primary[first] = self.primary.get(first, 0) + 1
        return first

    def _repeats_of(self, rec: CaseRecords) -> int:
        """The answers per side the page holds for a case: the run's repeats, or every sample a sampled case was given.

        A sampled case is asked again round after round (`pipeline._sampling`),
        beyond the run's repeats; its samples are what its category was
        decided on, so the case view lists them all.
        """
        if not rec.case.sampled:
            return self.repeats
        most = max((r.repeat for r in rec.responses if r.target in _SIDES), default=0) + 1
        return max(self.repeats, min(most, self._most_samples))

    def _build(self, rec: CaseRecords, comps: list[CaseComparison]) -> CaseRow:
        """A case's full row, all but its status."""
        repeats = self._repeats_of(rec)
        row = _case_row(rec, repeats)
        row.prompt = _clip(_prompt_text({"messages": rec.case.messages, "prompt": rec.case.prompt}))
        row.comparison = _comparison_slots(comps, repeats)
        if self._scorer is not None and rec.likelihoods:
            row.likelihood = _likelihood_slots(rec, self._scorer, repeats)
        return row

    def add(self, rec: CaseRecords, comps: list[CaseComparison]) -> None:
        repeats, case = self.repeats, rec.case
        latency = self.latency
        for r in rec.responses:  # every answer feeds the charts, embedded or not
            if r.repeat < repeats and r.error is None and r.target in _CHART_SIDES:
                latency.add(r)
        checks = self.checks
        for s in rec.scores:
            if s.repeat < repeats:
                checks.add(s.check)
        known = self._known.case(case.id, comps)
        index = self.suite_index.get(case.id, len(self.suite_index))
        if not self._decided and (_may_hold_check_status(comps) or _diverged_under_the_baseline(rec)):
            self._per_category(case.category)
            self._pending.append((case.id, case.category, index, known))
            if self.max_cases:
                self._spill.put(self._build(rec, comps))
            return
        key = (-_RANK[self._count(case.category, known.statuses)], -index)
        if not self._earns_place(key):
            return  # less important than every kept case: its row is never built
        row = self._build(rec, comps)
        _set_status(row, known)
        self._keep((*key, row))

    @property
    def wants_likelihoods(self) -> bool:
        """Whether the walk should bring each case's likelihood records: only when the stage scored (they are parsed per case)."""
        return self._scorer is not None

    def _earns_place(self, key: tuple[int, int]) -> bool:
        """Whether a case of this rank is among the `max_cases` most important so far."""
        heap = self._heap
        return self.max_cases > 0 and (len(heap) < self.max_cases or key > heap[0][:2])

    def _keep(self, entry: tuple[int, int, CaseRow]) -> None:
        """Keep a row that earned its place, dropping the least important kept one when the page is full."""
        if len(self._heap) < self.max_cases:
            heapq.heappush(self._heap, entry)
        else:
            heapq.heapreplace(self._heap, entry)

    def part(self) -> _RowsPart:
        """What this collector gathered, for the collector that walked the cases before these (`merge`)."""
        self.latency.flush()
        rows, spilled = self._spill.hand_over()
        return _RowsPart(
            self.latency, self.flag_counts, self.primary, self.category_flags, self.checks, self._heap, self._pending, rows, spilled
        )

    def merge(self, part: _RowsPart) -> None:
        """Fold in the part of a collector that walked the cases after this one's, as if `add` had gone on with them.

        Counts add up (categories and statuses first seen there after this
        one's), the kept rows are the `max_cases` most important of both
        (every key is distinct: a case's suite index), and the cases that
        wait for the statistics wait here, after this collector's own.
        """
        self.latency.merge(part.latency)
        for f, n in part.flag_counts.items():
            self.flag_counts[f] += n
        for f, n in part.primary.items():
            self.primary[f] = self.primary.get(f, 0) + n
        for category, counts in part.category_flags.items():
            per_cat = self._per_category(category)
            for f, n in counts.items():
                per_cat[f] += n
        self.checks |= part.checks
        for entry in part.heap:
            if self._earns_place((entry[0], entry[1])):
                self._keep(entry)
        self._pending.extend(part.pending)
        self._spill.take_over(part.rows, part.spilled)

    def result(self, summary: Summary) -> ReportData:
        """The report of the walked run, with every case's status from `summary`."""
        book = StatusBook(summary)
        ranked: list[tuple[int, int, CaseRow | str]] = [(-neg_rank, -neg_index, row) for neg_rank, neg_index, row in self._heap]
        final: dict[str, CaseStatus] = {}
        for case_id, category, index, known in self._pending:
            listed = book.case(case_id, ())
            status = CaseStatus(tuple(s for s in STATUS_ORDER if s in {*known.statuses, *listed.statuses}), listed.checks)
            final[case_id] = status
            ranked.append((_RANK[self._count(category, status.statuses)], index, case_id))
        ranked.sort(key=lambda e: (e[0], e[1]))
        kept: list[CaseRow] = []
        try:
            for _, _, item in ranked[: self.max_cases]:
                if isinstance(item, str):
                    row = self._spill.take(item)
                    _set_status(row, final[item])
                    item = row
                kept.append(item)
        finally:
            self._spill.close()
        divergences: dict[str, list[DivergenceSummary]] = {}
        for cat in summary.categories.values():
            for d in cat.divergences:
                divergences.setdefault(d.case_id, []).append(d)
        omitted = dict(self.primary)
        for row in kept:
            omitted[_first_flag(row.flags)] -= 1
            row.divergences = [divergence_view(d) for d in divergences.get(row.id, ())]
        samples, sampled = self.latency.arrays()
        store = self.store
        created = store.meta("created_at")
        return ReportData(
            summary=summary,
            manifest=store.manifest,
            created_at=float(created) if created else None,
            rows=kept,
            checks=sorted(self.checks),
            categories=sorted(self.category_flags),
            latency_samples=samples,
            total_cases=len(self.suite_index),
            flag_counts=self.flag_counts,
            category_flags=self.category_flags,
            omitted={k: v for k, v in omitted.items() if v},
            max_cases=self.max_cases,
            latency_sampled=sampled,
            folder=store.folder,
        )


def collect(
    store: RunStore, summary: Summary | Mapping[str, Any], *, max_cases: int = MAX_CASES, itl_sample: int = ITL_SAMPLE
) -> ReportData:
    """The report of a run folder whose summary is already built: one walk of the store with its stored comparisons.

    Which cases are embedded: by their primary status in STATUS_ORDER (every
    counted regression, then tolerated ones, errors, improvements, flaky,
    divergent, identical), suite order within a status, at most `max_cases`
    (`RowCollector`); regressions are dropped only when they alone outnumber
    `max_cases` (`ReportData.regressions_omitted`). `finish` feeds the same
    collector from the summary's own walk instead. `summary` may also be
    summary.json as parsed JSON: it is validated into the model here.
    """
    if not isinstance(summary, Summary):
        summary = Summary.model_validate(summary)
    rows = RowCollector(store, max_cases=max_cases, itl_sample=itl_sample, summary=summary)
    comps = GroupsById(store.comparisons_by_case())
    for rec in store.by_case(likelihoods=rows.wants_likelihoods):
        rows.add(rec, [CaseComparison.model_validate_json(b) for b in comps.take(rec.case.id)])
    return rows.result(summary)


def percentiles(values: np.ndarray, qs: Iterable[int] = (50, 95, 99)) -> dict[str, float]:
    """Linear-interpolated percentiles, used only when the summary holds no latency of its own."""
    if not len(values):
        return {}
    return {f"p{q}": float(np.percentile(values, q)) for q in qs}


def run_date(created_at: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(created_at)) if created_at else "unknown"
