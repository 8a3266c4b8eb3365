"""Prometheus /metrics around generation: scrape every target, record windows in the store.

vLLM's `vllm:spec_decode_*` counters (llama-server's `llamacpp:spec_decode_*`
with `--metrics`: the same names and meanings under its own prefix) are
global to the server, so the run
attributes them by deltas: a scrape of every target before and after
generation (a "window"; one per category when acceptance is wanted per
category), with what we sent in it (`SentTally`), so that counters moved by
someone else's traffic can be caught. `serving._acceptance` reads the
windows back; this module is the only one that talks to /metrics, through
the one HTTP layer (`core._http`): the same auth, retries, redaction and
error messages as generation. A scrape never raises: a failure is recorded
in the snapshot and acceptance is then reported as not measured.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from qualitycheck.core._config import HttpPolicy, RunOptions, Target
from qualitycheck.core._http import HttpClient, shared_session
from qualitycheck.core._records import MetricsSnapshot, MetricsWindow, Response, SentCounts

__all__ = [
    "SCRAPE_HTTP",
    "SentTally",
    "parse_dcgm",
    "parse_metrics",
    "scrape",
    "scrape_all",
    "scrape_dcgm",
    "window",
]


SCRAPE_HTTP = HttpPolicy(timeout_s=10.0, retries=RunOptions().retries, backoff_s=RunOptions().backoff_s)
"""A /metrics scrape's calls unless its caller says otherwise: a page either answers within seconds or is down."""
_DCGM_HTTP = HttpPolicy(timeout_s=SCRAPE_HTTP.timeout_s, retries=0, backoff_s=0.0)
"""A DCGM exporter is sampled every few seconds: a sample it misses is not asked again."""

_ENGINES = ("vllm", "llamacpp")
"""Prefixes of the engines whose spec-decode counters are read. llama-server (tools/server/server-task.cpp)
counts verification steps as `spec_decode_num_drafts_total`, as vLLM counts drafts: one per step."""
_SPEC = {
    f"{e}:{name}": key
    for e in _ENGINES
    for name, key in (
        ("spec_decode_num_drafts_total", "drafts"),
        ("spec_decode_num_draft_tokens_total", "draft_tokens"),
        ("spec_decode_num_accepted_tokens_total", "accepted_tokens"),
    )
}
_PER_POS = {f"{e}:spec_decode_num_accepted_tokens_per_pos_total" for e in _ENGINES}
_TRAFFIC = {
    "vllm:generation_tokens_total": "generation_tokens",
    "vllm:request_success_total": "requests_finished",
    # llama-server adds each finished request's generated tokens; it counts no finished requests
    "llamacpp:tokens_predicted_total": "generation_tokens",
}
_KV_USAGE = "vllm:kv_cache_usage_perc"
"""A gauge (0..1, per engine): its mean over engines is recorded as `kv_cache_usage`."""
_DCGM = {
    "DCGM_FI_DEV_GPU_UTIL": ("gpu_utilization", "mean"),
    "DCGM_FI_DEV_FB_USED": ("gpu_memory_used_mib", "sum"),
    "DCGM_FI_DEV_FB_FREE": ("gpu_memory_free_mib", "sum"),
}
"""NVIDIA dcgm-exporter's names (etc/default-counters.csv): utilisation in %, framebuffer memory in MiB."""


def parse_metrics(text: str, model: str | None = None) -> dict[str, Any]:
    """The counters we use from one /metrics page, summed over engines.

    When samples carry a `model_name` label and one of them is `model`, only
    that model's samples count (a server may host several).
    """
    samples = []
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name in _SPEC or s.name in _PER_POS or s.name in _TRAFFIC or s.name == _KV_USAGE:
                samples.append(s)
    if model and any(s.labels.get("model_name") == model for s in samples):
        samples = [s for s in samples if s.labels.get("model_name") in (model, None)]
    spec: dict[str, Any] = {}
    per_pos: dict[str, float] = {}
    traffic: dict[str, float] = {}
    kv = [s.value for s in samples if s.name == _KV_USAGE]
    if kv:
        traffic["kv_cache_usage"] = sum(kv) / len(kv)
    for s in samples:
        if s.name == _KV_USAGE:
            continue
        if s.name in _SPEC:
            spec[_SPEC[s.name]] = spec.get(_SPEC[s.name], 0.0) + s.value
        elif s.name in _PER_POS:
            pos = s.labels.get("position", "0")
            per_pos[pos] = per_pos.get(pos, 0.0) + s.value
        else:
            traffic[_TRAFFIC[s.name]] = traffic.get(_TRAFFIC[s.name], 0.0) + s.value
    if spec or per_pos:
        spec["per_position"] = per_pos
    return {"spec": spec or None, **traffic}


def parse_dcgm(text: str) -> dict[str, float]:
    """A DCGM exporter page → gpu_utilization (mean %), gpu_memory_used_mib and gpu_memory_free_mib (summed over GPUs)."""
    values: dict[str, list[float]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name in _DCGM:
                values.setdefault(s.name, []).append(s.value)
    out = {}
    for name, vs in values.items():
        key, how = _DCGM[name]
        out[key] = sum(vs) / len(vs) if how == "mean" else sum(vs)
    return out


async def scrape(target: Target, *, http: HttpPolicy = SCRAPE_HTTP, session: aiohttp.ClientSession | None = None) -> MetricsSnapshot:
    """One snapshot of a target's counters, with the target's own auth; never raises."""
    url = target.server_url + "/metrics"
    t = time.time()
    client = HttpClient(target, http, session=session)
    try:
        out = await client.get_text(url)
    finally:
        await client.aclose()
    if out.error is not None:
        return MetricsSnapshot(url=url, t=t, ok=False, error=out.error.message)
    try:
        counters = parse_metrics(out.value or "", target.model)
    except ValueError as exc:  # the page is not Prometheus text
        return MetricsSnapshot(url=url, t=t, ok=False, error=f"not Prometheus text: {exc}")
    return MetricsSnapshot(url=url, t=t, ok=True, **counters)


async def scrape_dcgm(url: str, *, http: HttpPolicy = _DCGM_HTTP) -> dict[str, float] | None:
    """A DCGM exporter's GPU figures (`parse_dcgm`), or None when it did not answer with them; never raises."""
    client = HttpClient(Target(url=url, model="dcgm"), http)
    try:
        out = await client.get_text(url)
    finally:
        await client.aclose()
    if out.error is not None:
        return None
    try:
        return parse_dcgm(out.value or "") or None
    except ValueError:
        return None


async def scrape_all(
    targets: Mapping[str, Target], *, http: HttpPolicy = SCRAPE_HTTP, session: aiohttp.ClientSession | None = None
) -> dict[str, MetricsSnapshot]:
    """Snapshot every target (keyed by side) at the same time."""
    async with shared_session(session, len(targets), http.timeout_s) as shared:
        snaps = await asyncio.gather(*(scrape(t, http=http, session=shared) for t in targets.values()))
    return dict(zip(targets, snaps, strict=True))


@dataclass
class SentTally:
    """What we sent to each target during one window (fed by the runner's on_response)."""

    requests: dict[str, int] = field(default_factory=dict)
    attempts: dict[str, int] = field(default_factory=dict)
    ok: dict[str, int] = field(default_factory=dict)
    output_tokens: dict[str, int] = field(default_factory=dict)

    def __call__(self, r: Response) -> None:
        t = r.target
        self.requests[t] = self.requests.get(t, 0) + 1
        self.attempts[t] = self.attempts.get(t, 0) + r.attempts
        if r.ok:
            self.ok[t] = self.ok.get(t, 0) + 1
            self.output_tokens[t] = self.output_tokens.get(t, 0) + (r.usage.completion_tokens or 0)

    def for_target(self, t: str) -> SentCounts:
        return SentCounts(
            requests=self.requests.get(t, 0),
            attempts=self.attempts.get(t, 0),
            ok=self.ok.get(t, 0),
            output_tokens=self.output_tokens.get(t, 0),
        )


def window(
    before: dict[str, MetricsSnapshot], after: dict[str, MetricsSnapshot], sent: SentTally, category: str | None = None
) -> MetricsWindow:
    """One attributable stretch of generation: scrapes around it and what we sent."""
    return MetricsWindow(
        category=category, before=before, after=after, sent={t: sent.for_target(t) for t in sorted(set(before) | set(after))}
    )
