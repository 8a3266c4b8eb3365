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
(or every token, for ITL); none when a side has no such samples.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..records import Response
from ..store import RunStore

__all__ = ["LatencySamples", "cost_per_1k", "itl_per_token", "latency_summary", "side_latency", "tpot_s"]

PERCENTILES = (50, 95, 99)


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


@dataclass
class LatencySamples:
    """What one side's responses contribute, accumulated so a big run is read once."""

    ttft: list[float] = field(default_factory=list)
    tpot: list[float] = field(default_factory=list)
    itl: list[float] = field(default_factory=list)
    e2e: list[float] = field(default_factory=list)
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
    def wall_s(self) -> float | None:
        if self.first_start is None or self.last_end is None or self.last_end <= self.first_start:
            return None
        return self.last_end - self.first_start

    def summary(self, gpu_hour_usd: float | None = None) -> dict[str, Any]:
        wall = self.wall_s
        ok = self.requests - self.errors
        out: dict[str, Any] = {
            "ttft_ms": _pct_ms(self.ttft),
            "tpot_ms": _pct_ms(self.tpot),
            "itl_ms": _pct_ms(self.itl),
            "e2e_ms": _pct_ms(self.e2e),
            "output_tokens_per_s": self.output_tokens / wall if wall and ok else None,
            "requests_per_s": ok / wall if wall and ok else None,
            "error_rate": self.errors / self.requests if self.requests else None,
            "requests": self.requests,
            "output_tokens": self.output_tokens,
            "wall_s": wall,
        }
        if gpu_hour_usd is not None:
            out["cost_per_1k_output_tokens_usd"] = cost_per_1k(gpu_hour_usd, wall, self.output_tokens)
        return out


def cost_per_1k(gpu_hour_usd: float, wall_s: float | None, output_tokens: int) -> float | None:
    """GPU time paid for the run's wall clock, per thousand output tokens produced in it."""
    if not wall_s or not output_tokens:
        return None
    return gpu_hour_usd * wall_s / 3600.0 / (output_tokens / 1000.0)


def _pct_ms(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {f"p{p}": None for p in PERCENTILES}
    arr = np.percentile(np.asarray(values, dtype=float) * 1000.0, PERCENTILES)
    return {f"p{p}": round(float(v), 3) for p, v in zip(PERCENTILES, arr)}


def side_latency(responses: Iterable[Response], gpu_hour_usd: float | None = None) -> dict[str, dict[str, Any]]:
    """Latency summary per target of any responses (used by the sweep on its own stores)."""
    samples: dict[str, LatencySamples] = {}
    for r in responses:
        samples.setdefault(r.target, LatencySamples()).add(r)
    return {t: s.summary(gpu_hour_usd) for t, s in samples.items()}


def _gpu_hour_usd(store: RunStore) -> float | None:
    cfg = store.artifact("config") or {}
    value = (cfg.get("run") or {}).get("gpu_hour_usd")
    return float(value) if value is not None else None


def latency_summary(store: RunStore) -> dict[str, Any]:
    """summary.json `latency`: {baseline: {...}, candidate: {...}, [control], per_category: {cat: {side: {...}}}}."""
    cat_of = {c.id: c.category for c in store.cases()}
    overall: dict[str, LatencySamples] = {}
    per_cat: dict[str, dict[str, LatencySamples]] = {}
    for r in store.responses():
        overall.setdefault(r.target, LatencySamples()).add(r)
        per_cat.setdefault(cat_of.get(r.case_id, "?"), {}).setdefault(r.target, LatencySamples()).add(r)
    price = _gpu_hour_usd(store)
    out: dict[str, Any] = {t: s.summary(price) for t, s in sorted(overall.items())}
    for side in ("baseline", "candidate"):
        out.setdefault(side, LatencySamples().summary(price))
    out["per_category"] = {
        cat: {t: s.summary(price) for t, s in sorted(sides.items())} for cat, sides in sorted(per_cat.items())
    }
    return out
