"""Generation wrapped in the serving measurements: preflight first, /metrics around it.

The pipeline calls `measured_generate` instead of the bare runner so that a
run's store always holds what the latency, acceptance and preflight sections
need: the preflight record (artifact "preflight"), one /metrics window per
stretch of generation (artifact "metrics_windows"), and GPU samples taken
while it runs (artifact "gpu_samples": KV-cache usage of every target, and a
DCGM exporter's utilisation and memory when the caller names one: the
config's `canary.dcgm_metrics`, which the pipeline passes as `dcgm_url`).
The scrapes around a window see idle servers; load shows only during it. With
`acceptance_by_category` the categories are generated one after another with
a scrape between them, so acceptance can be attributed per category; the
pairs inside a category are still sent together.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import replace
from typing import Any

from qualitycheck.core._cases import Case
from qualitycheck.core._config import RunOptions, Target
from qualitycheck.core._records import GpuSample, GpuSamples, MetricsWindows, PreflightRecord
from qualitycheck.core._store import RunStore
from qualitycheck.generation._metrics import SCRAPE_HTTP, SentTally, scrape_all, scrape_dcgm, window
from qualitycheck.generation._preflight import format_preflight, preflight_http, run_preflight
from qualitycheck.generation._runner import Progress, RunStats, Samples, generate

__all__ = ["measured_generate", "preflight_into_store"]

GPU_SAMPLE_S = 5.0
"""Seconds between two GPU samples during generation."""
GPU_FIRST_SAMPLE_S = 1.0
"""Seconds before the first: a run shorter than this has no load worth sampling."""
_GPU_SCRAPES = replace(SCRAPE_HTTP, retries=0, backoff_s=0.0)
"""A GPU sample missed is not asked again: the next one comes in `GPU_SAMPLE_S`."""


async def _sample_gpu(targets: Mapping[str, Target], dcgm_url: str | None, samples: list[GpuSample]) -> None:
    """Append a sample of every target's KV-cache usage (and the DCGM figures) every `GPU_SAMPLE_S`, until cancelled."""
    await asyncio.sleep(GPU_FIRST_SAMPLE_S)
    while True:
        t = time.time()
        snaps = await scrape_all(targets, http=_GPU_SCRAPES)
        for side, snap in snaps.items():
            if snap.ok and snap.kv_cache_usage is not None:
                samples.append(GpuSample(t=t, side=side, kv_cache_usage=snap.kv_cache_usage))
        if dcgm_url:
            facts = await scrape_dcgm(dcgm_url)
            if facts:
                samples.append(GpuSample(t=t, side="candidate", **facts))
        await asyncio.sleep(GPU_SAMPLE_S)


def preflight_into_store(store: RunStore, cases: Iterable[Case], targets: Mapping[str, Target], opts: RunOptions) -> PreflightRecord | None:
    """Run the preflight when `opts.preflight` asks and both sides are among `targets`; a mismatch is recorded, not fatal."""
    baseline, candidate = targets.get("baseline"), targets.get("candidate")
    if not opts.preflight or baseline is None or candidate is None:
        return None
    result = run_preflight(baseline, candidate, cases, http=preflight_http(opts))
    record = result.to_record()
    store.put_record(record)
    if not result.ok:
        print(
            "qualitycheck: preflight found mismatches (the run continues; the gate will report them):\n" + format_preflight(result),
            file=sys.stderr,
        )
    return record


class _OneCategory:
    """The cases of one category, filtered on every iteration from a re-iterable (never listed)."""

    def __init__(self, cases: Iterable[Case], category: str):
        self._cases = cases
        self._category = category

    def __iter__(self) -> Iterator[Case]:
        return (c for c in self._cases if c.category == self._category)


def _groups(cases: Iterable[Case], by_category: bool) -> list[tuple[str | None, Iterable[Case]]]:
    """One window for the run, or one per category in order of first appearance.

    Per category, each window walks the whole suite again and keeps its own
    cases: passes over the suite cost CPU, holding the suite would cost
    memory proportional to it.
    """
    if not by_category:
        return [(None, cases)]
    return [(cat, _OneCategory(cases, cat)) for cat in dict.fromkeys(c.category for c in cases)]


def measured_generate(
    store: RunStore,
    cases: Iterable[Case],
    targets: Mapping[str, Target],
    opts: RunOptions,
    *,
    dcgm_url: str | None = None,
    progress: Progress | None = None,
    http_clients: dict[str, Any] | None = None,
    samples: Samples | None = None,
    preflight: bool = True,
) -> RunStats:
    """Preflight (unless `preflight=False`: a later sampling round), then generation in windows bracketed by
    /metrics scrapes of every target.

    `cases` is walked several times (preflight, then counting and sending per
    window): a list, or a re-iterable such as `cases.SuiteCases`. `targets`
    and `opts` are the runner's (`generate`). `dcgm_url` is a DCGM exporter's
    /metrics, sampled with the targets' KV-cache usage while they generate.
    `samples` gives each case its number of repeats (the sampling rounds' plan).
    """
    # read before anything is sent, and kept here as windows are added (a resumed run's earlier windows are kept):
    # a damaged record (a StoreError) must not cost the preflight's and a window's requests first
    windows = list(store.record_or_empty(MetricsWindows).windows)
    gpu = list(store.record_or_empty(GpuSamples).samples)
    if preflight:
        preflight_into_store(store, cases, targets, opts)
    scrapes = replace(SCRAPE_HTTP, retries=opts.retries, backoff_s=opts.backoff_s)
    total = RunStats()

    async def go() -> None:
        done = store.stored_outcomes()  # one for every window: their cases are disjoint
        try:
            for category, group in _groups(cases, opts.acceptance_by_category):
                before = await scrape_all(targets, http=scrapes)
                tally = SentTally()
                readings: list[GpuSample] = []
                sampler = asyncio.create_task(_sample_gpu(targets, dcgm_url, readings))
                try:
                    stats = await generate(
                        store,
                        group,
                        targets,
                        opts,
                        progress=progress,
                        http_clients=http_clients,
                        on_response=tally,
                        done=done,
                        samples=samples,
                    )
                finally:
                    sampler.cancel()
                    # the sampler's cancellation is its result; a Ctrl-C landing here must still stop the run (suppressing CancelledError would swallow it)
                    await asyncio.gather(sampler, return_exceptions=True)
                    if readings:
                        gpu.extend(readings)
                        store.put_record(GpuSamples(samples=gpu))
                after = await scrape_all(targets, http=scrapes)
                windows.append(window(before, after, tally, category))
                store.put_record(MetricsWindows(windows=windows))
                total.add(stats)
                if stats.interrupted:
                    return
        finally:
            done.close()

    asyncio.run(go())
    return total
