"""One window's numbers from a source's recent snapshots: counter increases, histogram deltas, gauge means.

Counters are cumulative since the server started, so a window is the sum of
the increases between consecutive good scrapes inside it, as Prometheus's
`increase()` reads them: a counter that went down was reset (the server
restarted), and its value after the reset is what it gained since. A
restart therefore loses at most the traffic between the last scrape before
it and the restart, never turns into a negative rate, and is reported.

TPOT p95 comes from the histogram's bucket deltas, interpolated inside the
bucket the way `histogram_quantile()` does, so a scraped window and a
PromQL one agree.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from qualitycheck.canary._sources import Histogram, Snapshot

__all__ = ["History", "WindowDelta", "histogram_quantile", "window_delta"]


@dataclass
class History:
    """The snapshots of one source, pruned to what the window needs (plus the one just before it)."""

    snapshots: list[Snapshot] = field(default_factory=list)

    def add(self, snap: Snapshot, window_s: float) -> None:
        self.snapshots.append(snap)
        start = snap.t - window_s
        keep = [i for i, s in enumerate(self.snapshots) if s.t >= start]
        first = keep[0] if keep else len(self.snapshots) - 1
        self.snapshots = self.snapshots[max(0, first - 1) :]  # one before the window: its values are the window's start

    @property
    def latest(self) -> Snapshot | None:
        return self.snapshots[-1] if self.snapshots else None


@dataclass(frozen=True)
class WindowDelta:
    """What one source gained over the window, or why nothing can be said."""

    ok: bool
    error: str | None = None
    engine: str | None = None
    span_s: float = 0.0
    """Time between the first and last good scrape used."""
    counters: dict[str, float] = field(default_factory=dict)
    per_position: dict[str, float] = field(default_factory=dict)
    histograms: dict[str, Histogram] = field(default_factory=dict)
    gauges: dict[str, float] = field(default_factory=dict)
    """Means over the window's scrapes; the SGLang speculation gauges only over scrapes where tokens were generated."""
    resets: int = 0
    """Counter resets seen in the window (a server restart)."""


def _increase(values: Sequence[float]) -> tuple[float, int]:
    total, resets = 0.0, 0
    for before, after in itertools.pairwise(values):
        if after < before:
            total += after
            resets += 1
        else:
            total += after - before
    return total, resets


def _hist_increase(hs: Sequence[Histogram]) -> tuple[Histogram, int]:
    buckets: dict[float, float] = {}
    resets = 0
    for before, after in itertools.pairwise(hs):
        reset = after.count < before.count or any(v < before.buckets.get(le, 0.0) for le, v in after.buckets.items())
        resets += reset
        for le, v in after.buckets.items():
            buckets[le] = buckets.get(le, 0.0) + (v if reset else v - before.buckets.get(le, 0.0))
    count = buckets.get(math.inf, max(buckets.values(), default=0.0))
    return Histogram(dict(sorted(buckets.items())), count), resets


_ACTIVE_GAUGES = ("spec_accept_rate", "spec_accept_length")


def window_delta(history: History, now: float, window_s: float) -> WindowDelta:
    """The source's window ending `now`: not ok when its latest scrape failed or fewer than two good scrapes span it."""
    latest = history.latest
    if latest is None:
        return WindowDelta(False, "not scraped yet")
    if not latest.ok:
        return WindowDelta(False, f"metrics endpoint down: {latest.error}")
    start = now - window_s
    good = [s for s in history.snapshots if s.ok]
    first = max((i for i, s in enumerate(good) if s.t <= start), default=0)
    used = good[first:]
    if len(used) < 2:
        return WindowDelta(False, "one good scrape so far: a window needs two", engine=latest.engine)
    counters: dict[str, float] = {}
    resets = 0
    for key in sorted({k for s in used for k in s.counters}):
        series = [s.counters[key] for s in used if key in s.counters]
        if len(series) >= 2:
            counters[key], r = _increase(series)
            resets = max(resets, r)
    per_position: dict[str, float] = {}
    for pos in sorted({p for s in used for p in s.per_position}):
        per_position[pos], _ = _increase([s.per_position[pos] for s in used if pos in s.per_position])
    histograms: dict[str, Histogram] = {}
    for key in sorted({k for s in used for k in s.histograms}):
        hs = [s.histograms[key] for s in used if key in s.histograms]
        if len(hs) >= 2:
            histograms[key], r = _hist_increase(hs)
            resets = max(resets, r)
    gauges: dict[str, float] = {}
    inside = used[1:]  # the scrape before the window describes the time before it
    for key in sorted({k for s in inside for k in s.gauges}):
        if key in _ACTIVE_GAUGES:  # a speculation gauge keeps its last value while the server idles
            values = [b.gauges[key] for a, b in itertools.pairwise(used) if key in b.gauges and _generated(a, b)]
        else:
            values = [s.gauges[key] for s in inside if key in s.gauges]
        if values:
            gauges[key] = sum(values) / len(values)
    return WindowDelta(True, None, latest.engine, used[-1].t - used[0].t, counters, per_position, histograms, gauges, resets)


def _generated(a: Snapshot, b: Snapshot) -> bool:
    ga, gb = a.counters.get("generation_tokens"), b.counters.get("generation_tokens")
    return ga is None or gb is None or gb != ga


def histogram_quantile(q: float, h: Histogram) -> float | None:
    """The q-quantile of a (delta) histogram, linearly interpolated inside its bucket; None when it is empty."""
    total = h.buckets.get(math.inf, h.count)
    if total <= 0:
        return None
    rank = q * total
    lower, below = 0.0, 0.0
    for le, cum in h.buckets.items():
        if cum >= rank:
            if math.isinf(le):
                return lower  # above the highest finite bound: the bound is the best that can be said
            inside = cum - below
            return lower + (le - lower) * ((rank - below) / inside if inside > 0 else 1.0)
        lower, below = le, cum
    return lower
