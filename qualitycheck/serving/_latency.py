"""Latency per side and per category from the stored responses' own timings.

Definitions (all client-side, monotonic clock, from the moment the request
was sent; named so they can be compared with other tools):

- TTFT: arrival of the first chunk that carries content or token ids.
- TPOT: (e2e − TTFT) / (output tokens − 1), output tokens from the server's
  `usage.completion_tokens`; the first token is excluded, as in vLLM's
  `bench serve` (GuideLLM's "time per output token" includes it: not the same
  number). Requests with fewer than two output tokens have no TPOT.
- ITL: the gap between two content chunks divided by the tokens the later
  chunk carried, counted once per token. Speculative servers stream several
  tokens per chunk (vLLM #27485), so raw per-chunk gaps would make the
  candidate look slower per token than it is. Tokens per chunk come from the
  chunk's `token_ids` when the server returned them, else the usage count
  spread evenly over the chunks.
- e2e: until the stream ended ([DONE]) or the whole answer was read.
- output_tokens_per_s / requests_per_s: totals of the side's successful
  requests over its wall clock, first request start to last request end
  (from `started_at` + `e2e_s`); a resumed run's pause counts in it.
- error_rate: requests with no usable answer after retries / all requests.

Percentiles are numpy's default (linear interpolation) over every request
(or every token, for ITL); none when a side has no such samples. Samples are
kept as packed doubles (8 bytes each, not a Python float in a list). A side
with more than `EXACT_RESPONSES` responses whose samples outgrow
`EXACT_SAMPLES` switches to a log-bucket histogram with relative error at
most `RELATIVE_ERROR`, so memory stays bounded however long the run; its
latency block then carries a `percentiles` note saying so. Runs up to
`EXACT_RESPONSES` responses per side are always exact.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from qualitycheck.core._records import Response
from qualitycheck.core._store import CaseRecords, RunStore

__all__ = [
    "EXACT_RESPONSES",
    "EXACT_SAMPLES",
    "RELATIVE_ERROR",
    "LatencySamples",
    "LatencyTally",
    "Samples",
    "cost_per_1k",
    "itl_per_token",
    "latency_summary",
    "side_latency",
    "tpot_s",
]

PERCENTILES = (50, 95, 99)

EXACT_RESPONSES = 10_000
"""A side with at most this many responses always gets exact percentiles."""

EXACT_SAMPLES = 2_000_000
"""Above `EXACT_RESPONSES`, samples (all metrics, all categories) a side may hold exactly: 16 MB of doubles."""

RELATIVE_ERROR = 0.001
"""Bound on the relative error of a percentile once a side's samples are bucketed."""

_GAMMA = (1 + RELATIVE_ERROR) / (1 - RELATIVE_ERROR)
_LOG_GAMMA = math.log(_GAMMA)
_TINY = 1e-9
"""Seconds at or below which a sample falls in the zero bucket (below any clock's resolution)."""


def tpot_s(r: Response) -> float | None:
    """Time per output token after the first, or None when it is undefined."""
    n = _output_tokens(r)
    if r.ttft_s is None or r.e2e_s is None or n is None or n < 2:
        return None
    return max(0.0, r.e2e_s - r.ttft_s) / (n - 1)


def _output_tokens(r: Response) -> int | None:
    if r.usage.completion_tokens is not None:
        return r.usage.completion_tokens
    if r.chunk_tokens and sum(r.chunk_tokens) > 0:
        return sum(r.chunk_tokens)
    if r.token_ids is not None:
        return len(r.token_ids)
    return None


def itl_per_token(r: Response) -> list[float]:
    """Inter-token latencies normalised by tokens per chunk, one value per token after the first chunk."""
    times = r.chunk_times
    if len(times) < 2:
        return []
    if r.chunk_tokens and len(r.chunk_tokens) == len(times) and sum(r.chunk_tokens) > 0:
        counts = [float(c) for c in r.chunk_tokens]
    else:
        total = _output_tokens(r)
        per_chunk = total / len(times) if total else 1.0
        if per_chunk > 0 and round(per_chunk) <= 1:  # every chunk one gap of (t - previous t) / per_chunk: the loop below, in one pass
            return [(t - last) / per_chunk for last, t in pairwise(times)]
        counts = [per_chunk] * len(times)
    out: list[float] = []
    last_t = times[0] if counts[0] > 0 else None
    # a chunk without tokens (a role-only delta) passes its gap on to the next chunk that has some
    for t, c in zip(times[1:], counts[1:]):
        if c <= 0:
            continue
        if last_t is None:
            last_t = t
            continue
        gap = (t - last_t) / c
        n = max(1, round(c))
        out.extend([gap] * n)
        last_t = t
    return out


class Samples:
    """One metric's samples: packed doubles, or once `bucket()` is called, a log-bucket histogram.

    The packed form gives numpy's exact percentiles at 8 bytes a sample. The
    histogram keeps a count per bucket [γ^(i-1), γ^i) with γ = (1+α)/(1−α),
    so any percentile read from it is within α (`RELATIVE_ERROR`) of the
    true one, in memory that depends on the spread of the values, not on
    how many there are (DDSketch's scheme, Masson et al. 2019).
    """

    __slots__ = ("_buckets", "_exact", "_zeros", "n")

    def __init__(self) -> None:
        self._exact: array[float] | None = array("d")
        self._buckets: dict[int, int] = {}
        self._zeros = 0
        self.n = 0

    @property
    def exact(self) -> bool:
        return self._exact is not None

    def append(self, x: float) -> None:
        self.n += 1
        if self._exact is not None:
            self._exact.append(x)
        else:
            self._count(x, 1)

    def extend(self, xs: list[float]) -> None:
        self.n += len(xs)
        if self._exact is not None:
            self._exact.extend(xs)
        else:
            for x in xs:
                self._count(x, 1)

    def _count(self, x: float, k: int) -> None:
        if x <= _TINY:
            self._zeros += k
        else:
            i = math.ceil(math.log(x) / _LOG_GAMMA)
            self._buckets[i] = self._buckets.get(i, 0) + k

    def bucket(self) -> None:
        """Trade exactness for bounded memory: fold the packed samples into the histogram."""
        if self._exact is None:
            return
        values, self._exact = self._exact, None
        for x in values:
            self._count(x, 1)

    @classmethod
    def merged(cls, parts: Iterable[Samples]) -> Samples:
        """All of `parts` as one (exact only if every part still is)."""
        parts = list(parts)
        out = cls()
        if any(not p.exact for p in parts):
            out.bucket()
        for p in parts:
            out.n += p.n
            if out._exact is not None:
                out._exact.extend(p._exact)  # type: ignore[arg-type]
            elif p._exact is not None:
                for x in p._exact:
                    out._count(x, 1)
            else:
                out._zeros += p._zeros
                for i, k in p._buckets.items():
                    out._buckets[i] = out._buckets.get(i, 0) + k
        return out

    def percentiles_ms(self) -> dict[str, float | None]:
        if not self.n:
            return {f"p{p}": None for p in PERCENTILES}
        if self._exact is not None:
            import numpy as np  # here, not at import: `qualitycheck run` reaches this module before its first request

            ms = np.frombuffer(self._exact, dtype=float) * 1000.0  # a copy, so numpy may partition it in place
            arr: Sequence[float] = list(np.percentile(ms, PERCENTILES, overwrite_input=True))
        else:
            arr = [self._bucketed(p) * 1000.0 for p in PERCENTILES]
        return {f"p{p}": round(float(v), 3) for p, v in zip(PERCENTILES, arr)}

    def _bucketed(self, p: float) -> float:
        """numpy's linear interpolation between the two order statistics around rank (n − 1)·p/100,
        each read as its bucket's representative 2γ^i/(γ+1)."""
        h = (self.n - 1) * p / 100.0
        lo = math.floor(h)
        a, b = self._order_statistic(lo), self._order_statistic(min(lo + 1, self.n - 1))
        return a + (b - a) * (h - lo)

    def _order_statistic(self, k: int) -> float:
        if k < self._zeros:
            return 0.0
        seen = self._zeros
        for i in sorted(self._buckets):
            seen += self._buckets[i]
            if k < seen:
                return 2.0 * _GAMMA**i / (_GAMMA + 1.0)
        raise AssertionError("rank beyond the sample count")  # n is the sum of the counts


@dataclass
class LatencySamples:
    """What one side's responses contribute, accumulated so a big run is read once."""

    ttft: Samples = field(default_factory=Samples)
    tpot: Samples = field(default_factory=Samples)
    itl: Samples = field(default_factory=Samples)
    e2e: Samples = field(default_factory=Samples)
    requests: int = 0
    errors: int = 0
    output_tokens: int = 0
    first_start: float | None = None
    last_end: float | None = None

    def add(self, r: Response) -> None:
        self.requests += 1
        start = r.started_at
        end = start + (r.e2e_s or 0.0)
        self.first_start = start if self.first_start is None else min(self.first_start, start)
        self.last_end = end if self.last_end is None else max(self.last_end, end)
        if not r.ok:
            self.errors += 1
            return
        if r.ttft_s is not None:
            self.ttft.append(r.ttft_s)
        if (t := tpot_s(r)) is not None:
            self.tpot.append(t)
        self.itl.extend(itl_per_token(r))
        if r.e2e_s is not None:
            self.e2e.append(r.e2e_s)
        self.output_tokens += _output_tokens(r) or 0

    @property
    def samples(self) -> int:
        return self.ttft.n + self.tpot.n + self.itl.n + self.e2e.n

    @property
    def exact(self) -> bool:
        return self.ttft.exact and self.tpot.exact and self.itl.exact and self.e2e.exact

    def bucket(self) -> None:
        for s in (self.ttft, self.tpot, self.itl, self.e2e):
            s.bucket()

    @classmethod
    def merged(cls, parts: Iterable[LatencySamples]) -> LatencySamples:
        """One side's totals from its parts (its categories): the run-wide figures without a second copy."""
        parts = list(parts)
        starts = [p.first_start for p in parts if p.first_start is not None]
        ends = [p.last_end for p in parts if p.last_end is not None]
        return cls(
            ttft=Samples.merged(p.ttft for p in parts),
            tpot=Samples.merged(p.tpot for p in parts),
            itl=Samples.merged(p.itl for p in parts),
            e2e=Samples.merged(p.e2e for p in parts),
            requests=sum(p.requests for p in parts),
            errors=sum(p.errors for p in parts),
            output_tokens=sum(p.output_tokens for p in parts),
            first_start=min(starts) if starts else None,
            last_end=max(ends) if ends else None,
        )

    @property
    def wall_s(self) -> float | None:
        if self.first_start is None or self.last_end is None or self.last_end <= self.first_start:
            return None
        return self.last_end - self.first_start

    def summary(self, gpu_hour_usd: float | None = None) -> dict[str, Any]:
        wall = self.wall_s
        ok = self.requests - self.errors
        out: dict[str, Any] = {
            "ttft_ms": self.ttft.percentiles_ms(),
            "tpot_ms": self.tpot.percentiles_ms(),
            "itl_ms": self.itl.percentiles_ms(),
            "e2e_ms": self.e2e.percentiles_ms(),
            "output_tokens_per_s": self.output_tokens / wall if wall and ok else None,
            "requests_per_s": ok / wall if wall and ok else None,
            "error_rate": self.errors / self.requests if self.requests else None,
            "requests": self.requests,
            "output_tokens": self.output_tokens,
            "wall_s": wall,
        }
        if gpu_hour_usd is not None:
            out["cost_per_1k_output_tokens_usd"] = cost_per_1k(gpu_hour_usd, wall, self.output_tokens)
        if not self.exact:
            out["percentiles"] = (
                f"approximate: log buckets, relative error <= {RELATIVE_ERROR:g} "
                f"(more than {EXACT_RESPONSES} responses and {EXACT_SAMPLES} samples on this side)"
            )
        return out


def cost_per_1k(gpu_hour_usd: float, wall_s: float | None, output_tokens: int) -> float | None:
    """GPU time paid for the run's wall clock, per thousand output tokens produced in it."""
    if not wall_s or not output_tokens:
        return None
    return gpu_hour_usd * wall_s / 3600.0 / (output_tokens / 1000.0)


def side_latency(responses: Iterable[Response], gpu_hour_usd: float | None = None) -> dict[str, dict[str, Any]]:
    """Latency summary per target of any responses (used by the sweep on its own stores)."""
    samples: dict[str, LatencySamples] = {}
    for r in responses:
        samples.setdefault(r.target, LatencySamples()).add(r)
    return {t: s.summary(gpu_hour_usd) for t, s in samples.items()}


def _gpu_hour_usd(store: RunStore) -> float | None:
    return store.config().run.gpu_hour_usd


class LatencyTally:
    """summary.json `latency`, folded one case at a time: what a walk of the store hands each case to.

    Samples are kept per (category, side) only and the side's run-wide
    figures are merged from them at the end. A side with more than
    `EXACT_RESPONSES` responses (`sizes`, counted by the store up front) is
    bucketed once it holds more than `EXACT_SAMPLES` samples, which bounds
    this stage's memory.
    """

    def __init__(self, sizes: dict[str, int], gpu_hour_usd: float | None = None, *, alongside: str | None = None):
        self._sizes = sizes
        self._price = gpu_hour_usd
        self._per_cat: dict[str, dict[str, LatencySamples]] = {}
        self._held: dict[str, int] = {}
        self._alongside = alongside
        """A side measured alongside the candidate in place of a baseline measured elsewhere (a stored one's `control`)."""
        self._paired: dict[str, Samples] = {}
        """TPOT of that side and of the candidate, on the (case, repeat)s both answered (`paired_tpot`)."""

    @classmethod
    def for_store(cls, store: RunStore, *, alongside: str | None = None) -> LatencyTally:
        return cls({t: c["requests"] for t, c in store.count_responses().items()}, _gpu_hour_usd(store), alongside=alongside)

    def add(self, rec: CaseRecords) -> None:
        if self._alongside is not None:
            self._add_paired(rec, self._alongside)
        per_cat, held = self._per_cat, self._held
        sides = per_cat.setdefault(rec.case.category, {})
        for r in rec.responses:
            s = sides.get(r.target)
            if s is None:
                s = sides[r.target] = LatencySamples()
            big = self._sizes.get(r.target, 0) > EXACT_RESPONSES  # only a side this large is ever bucketed
            before = s.samples if big else 0
            s.add(r)
            if big and s.exact:
                held[r.target] = held.get(r.target, 0) + s.samples - before
                if held[r.target] > EXACT_SAMPLES:
                    for cat_sides in per_cat.values():
                        if r.target in cat_sides:
                            cat_sides[r.target].bucket()

    def _add_paired(self, rec: CaseRecords, side: str) -> None:
        """The TPOT of `side` and of the candidate at the repeats both answered: one request set, one period and load.

        A live baseline asked alongside a stored one answers the greedy cases
        (as the control does), the candidate every case: comparing all of
        each side's requests would weigh different answers. Only TPOT is
        kept (8 bytes a request): it is what the latency guardrail reads.
        """
        theirs = {r.repeat: r for r in rec.responses if r.target == side and r.ok}
        if not theirs:
            return
        for r in rec.responses:
            if r.target == "candidate" and r.ok and r.repeat in theirs:
                a, c = tpot_s(theirs[r.repeat]), tpot_s(r)
                if a is not None and c is not None:
                    self._paired.setdefault("baseline", Samples()).append(a)
                    self._paired.setdefault("candidate", Samples()).append(c)

    def paired_tpot(self) -> dict[str, dict[str, Any]]:
        """{baseline: {tpot_ms, requests}, candidate: {...}} over the requests both the `alongside` side and the candidate answered."""
        return {
            side: {"tpot_ms": self._paired.get(side, Samples()).percentiles_ms(), "requests": self._paired.get(side, Samples()).n}
            for side in ("baseline", "candidate")
        }

    def merge(self, later: LatencyTally) -> None:
        """Fold in the tally of the cases after this one's: samples pooled per (category, side).

        A side is bucketed, in every category, when either tally bucketed it
        or their held samples together pass `EXACT_SAMPLES`: where one walk
        of all the cases would have bucketed it. Percentiles do not depend
        on the order of the samples, and bucket counts add up.
        """
        for side, samples in later._paired.items():
            held = self._paired.get(side)
            self._paired[side] = samples if held is None else Samples.merged([held, samples])
        per_cat = self._per_cat
        for cat, sides in later._per_cat.items():
            mine = per_cat.setdefault(cat, {})
            for target, s in sides.items():
                got = mine.get(target)
                mine[target] = s if got is None else LatencySamples.merged([got, s])
        for target, n in later._held.items():
            self._held[target] = self._held.get(target, 0) + n
        for target, n in self._held.items():
            cells = [sides[target] for sides in per_cat.values() if target in sides]
            if n > EXACT_SAMPLES or not all(s.exact for s in cells):
                for s in cells:
                    s.bucket()

    def summary(self) -> dict[str, Any]:
        """{baseline: {...}, candidate: {...}, [control], per_category: {cat: {side: {...}}}}."""
        per_cat, price = self._per_cat, self._price
        targets = sorted({t for sides in per_cat.values() for t in sides})
        out: dict[str, Any] = {
            t: LatencySamples.merged(sides[t] for sides in per_cat.values() if t in sides).summary(price) for t in targets
        }
        for side in ("baseline", "candidate"):
            out.setdefault(side, LatencySamples().summary(price))
        out["per_category"] = {
            cat: {t: s.summary(price) for t, s in sorted(sides.items())} for cat, sides in sorted(per_cat.items()) if sides
        }
        return out


def latency_summary(store: RunStore) -> dict[str, Any]:
    """summary.json `latency` of a run folder on its own (`LatencyTally` over one walk of the store)."""
    tally = LatencyTally.for_store(store)
    for rec in store.by_case(scores=False):
        tally.add(rec)
    return tally.summary()
