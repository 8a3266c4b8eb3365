"""Where a canary's numbers come from: Prometheus text pages scraped directly, or a Prometheus server's HTTP API.

A scrape becomes a `Snapshot`: the counters, gauges and histograms the
guardrails read, under engine-neutral keys (a view of the run's record of
a scrape, `MetricsSnapshot`, plus what only the canary reads), so one window computation
serves vLLM, SGLang, the shadow proxy and a DCGM exporter alike. The names
each key comes from (docs/stages/canary.md has the table):

- vLLM (as the installed vLLM exposes them): the spec-decode counters
  through `generation._metrics.parse_metrics` (the offline run's reader),
  `vllm:request_success_total` by `finished_reason` (`error` counts as a
  failure), `vllm:kv_cache_usage_perc`, and the TPOT histogram
  `vllm:request_time_per_output_token_seconds` (else
  `vllm:inter_token_latency_seconds`);
- SGLang (`python/sglang/srt/metrics/collector.py`): the gauges
  `sglang:spec_accept_rate` and `sglang:spec_accept_length` (it exposes no
  draft counters), `sglang:num_requests_total`,
  `sglang:num_aborted_requests_total`, `sglang:generation_tokens_total`,
  `sglang:token_usage` and the histogram `sglang:inter_token_latency_seconds`;
- llama-server (`--metrics`, `tools/server/server-task.cpp`): its
  `llamacpp:spec_decode_*` counters, vLLM's names under its own prefix,
  through the same reader, and `llamacpp:tokens_predicted_total`; it counts
  no finished or failed requests and keeps no latency histogram, so error
  rate and TPOT are not evaluated from its page (the shadow proxy's
  counters give the error rate);
- the shadow proxy: the two counters named in `canary.shadow_names`;
- DCGM exporter: `DCGM_FI_DEV_GPU_UTIL` (%), `DCGM_FI_DEV_FB_USED` and
  `DCGM_FI_DEV_FB_FREE` (MiB), summed or averaged over the GPUs.

Every HTTP call goes through `core._http` (auth, retries, error messages); a
scrape never raises: a failure is a snapshot with `ok=False`, which the
window turns into "not evaluated", never into a pass.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any
from urllib.parse import urlencode

from prometheus_client.parser import text_string_to_metric_families

from qualitycheck.core._config import HttpPolicy, Target
from qualitycheck.core._http import HttpClient
from qualitycheck.core._records import MetricsSnapshot
from qualitycheck.generation._metrics import parse_dcgm, parse_metrics

__all__ = [
    "DEFAULT_PROMQL",
    "LONGEST_REQUEST_S",
    "Histogram",
    "PromResult",
    "Snapshot",
    "parse_page",
    "query_prometheus",
    "scrape_page",
]

_HTTP = HttpPolicy(timeout_s=10.0, retries=2, backoff_s=0.2)
"""A page's scrape and a PromQL query: a window waits on them, so a source that does not answer soon is down for that window."""

LONGEST_REQUEST_S = _HTTP.timeout_s * (_HTTP.retries + 1) + _HTTP.backoff_s * (2**_HTTP.retries - 1)
"""The longest one scrape or query may hold a window up: every try timing out, with the longest backoffs between."""

_ENGINES = ("vllm", "sglang", "llamacpp")
"""The engines whose names `auto` recognises, by their metric prefix (`vllm:`, ...)."""
VLLM_TPOT = ("vllm:request_time_per_output_token_seconds", "vllm:inter_token_latency_seconds")
"""The per-request TPOT histogram first; the per-token ITL histogram when a server lacks it."""
SGLANG_TPOT = ("sglang:inter_token_latency_seconds",)

_SGLANG_COUNTERS = {
    "sglang:num_requests_total": "requests",
    "sglang:num_aborted_requests_total": "errors",
    "sglang:generation_tokens_total": "generation_tokens",
}
_SGLANG_GAUGES = {
    "sglang:spec_accept_rate": "spec_accept_rate",
    "sglang:spec_accept_length": "spec_accept_length",
    "sglang:token_usage": "kv_cache_usage",
}

DEFAULT_PROMQL: dict[str, str] = {
    "acceptance_rate": (
        "sum(increase(vllm:spec_decode_num_accepted_tokens_total[$window])) / sum(increase(vllm:spec_decode_num_draft_tokens_total[$window]))"
    ),
    "drafts": "sum(increase(vllm:spec_decode_num_drafts_total[$window]))",
    "kv_cache_usage": "avg(vllm:kv_cache_usage_perc)",
    "gpu_utilization": "avg(DCGM_FI_DEV_GPU_UTIL)",
    "gpu_memory_used_mib": "sum(DCGM_FI_DEV_FB_USED)",
}
"""PromQL used when `canary.promql` leaves a key unset: vLLM's and DCGM's names, every series summed.

TPOT, requests and errors have no default: which series are the candidate's
and which the baseline's depends on the cluster's labels."""


@dataclass(frozen=True)
class Histogram:
    """One histogram's cumulative bucket counts (upper bound → count), summed over its series."""

    buckets: dict[float, float]
    count: float


@dataclass(frozen=True)
class Snapshot:
    """The canary's view of one scrape of one page: what the guardrails read, under engine-neutral keys.

    What a scrape says that a run records too (vLLM's speculative-decoding
    counters, generated tokens, finished requests, KV-cache usage) is held
    once, in the run's record of a scrape (`scrape`, a `MetricsSnapshot`,
    read from the page by the run's own reader); the keys below read it
    from there. Only what the run never records is kept here besides:
    other engines' names, the shadow proxy's counters, DCGM's gauges, the
    TPOT histogram.
    """

    scrape: MetricsSnapshot
    engine: str | None = None
    """`vllm`, `sglang`, `llamacpp`, or None (a shadow proxy or DCGM page, or no engine names found)."""
    other_counters: dict[str, float] = field(default_factory=dict)
    """Counters the scrape record does not hold: vLLM's failed requests, SGLang's and the shadow proxy's names."""
    other_gauges: dict[str, float] = field(default_factory=dict)
    histograms: dict[str, Histogram] = field(default_factory=dict)
    """`tpot`: the TPOT (or inter-token latency) histogram, in seconds."""

    @property
    def t(self) -> float:
        return self.scrape.t

    @property
    def ok(self) -> bool:
        return self.scrape.ok

    @property
    def error(self) -> str | None:
        return self.scrape.error

    @cached_property
    def counters(self) -> dict[str, float]:
        """drafts, draft_tokens, accepted_tokens, requests, errors, generation_tokens (those the page has)."""
        s = self.scrape
        out: dict[str, float] = {}
        if s.spec is not None:
            out.update(drafts=s.spec.drafts, draft_tokens=s.spec.draft_tokens, accepted_tokens=s.spec.accepted_tokens)
        if s.generation_tokens is not None:
            out["generation_tokens"] = s.generation_tokens
        if s.requests_finished is not None:
            out["requests"] = s.requests_finished
        return out | self.other_counters

    @cached_property
    def gauges(self) -> dict[str, float]:
        """spec_accept_rate, spec_accept_length, kv_cache_usage, gpu_utilization, gpu_memory_used_mib, gpu_memory_free_mib."""
        kv = self.scrape.kv_cache_usage
        return ({"kv_cache_usage": kv} if kv is not None else {}) | self.other_gauges

    @property
    def per_position(self) -> dict[str, float]:
        """vLLM's accepted tokens per draft position (counters)."""
        return self.scrape.spec.per_position if self.scrape.spec is not None else {}


def _histogram(samples: list[Any], name: str) -> Histogram | None:
    buckets: dict[float, float] = {}
    count = 0.0
    seen = False
    for s in samples:
        if s.name == name + "_bucket":
            le = float(s.labels.get("le", "inf").replace("+Inf", "inf"))
            buckets[le] = buckets.get(le, 0.0) + s.value
            seen = True
        elif s.name == name + "_count":
            count += s.value
    if not seen:
        return None
    return Histogram(dict(sorted(buckets.items())), count or buckets.get(float("inf"), 0.0))


def parse_page(
    text: str,
    t: float,
    *,
    engine: str = "auto",
    model: str | None = None,
    shadow_names: tuple[str, str] | None = None,
    url: str = "",
) -> Snapshot:
    """A Prometheus text page → a `Snapshot`; `ValueError` when it is not Prometheus text.

    `engine` forces the names read (`vllm`, `sglang`, `llamacpp`); `auto` takes whichever
    the page carries. `shadow_names` (requests, errors) reads a shadow proxy's
    counters instead.
    """
    samples = [s for fam in text_string_to_metric_families(text) for s in fam.samples]
    names = {s.name for s in samples}
    counters: dict[str, float] = {}
    gauges: dict[str, float] = {}
    histograms: dict[str, Histogram] = {}
    scrape = MetricsSnapshot(url=url, t=t, ok=True)
    if shadow_names is not None:
        for key, name in zip(("requests", "errors"), shadow_names, strict=True):
            if name in names:
                counters[key] = sum(s.value for s in samples if s.name == name)
        return Snapshot(scrape, other_counters=counters)
    if engine == "auto":
        engine = next((e for e in _ENGINES if any(n.startswith(e + ":") for n in names)), "")
    if engine in ("vllm", "llamacpp"):
        scrape = MetricsSnapshot(url=url, t=t, ok=True, **parse_metrics(text, model))  # as the run records a scrape
    if engine == "vllm":
        if model and any(s.labels.get("model_name") == model for s in samples):
            samples = [s for s in samples if s.labels.get("model_name") in (model, None)]
        success = [s for s in samples if s.name == "vllm:request_success_total"]
        if success:
            counters["errors"] = sum(s.value for s in success if s.labels.get("finished_reason") == "error")
        for name in VLLM_TPOT:
            if (h := _histogram(samples, name)) is not None:
                histograms["tpot"] = h
                break
    elif engine == "sglang":
        for name, key in _SGLANG_COUNTERS.items():
            if name in names:
                counters[key] = sum(s.value for s in samples if s.name == name)
        for name, key in _SGLANG_GAUGES.items():
            values = [s.value for s in samples if s.name == name]
            if values:
                gauges[key] = sum(values) / len(values)
        for name in SGLANG_TPOT:
            if (h := _histogram(samples, name)) is not None:
                histograms["tpot"] = h
                break
        if "requests" in counters:  # SGLang counts finished and aborted requests apart
            counters["requests"] += counters.get("errors", 0.0)
    gauges.update(parse_dcgm(text))
    return Snapshot(scrape, engine or None, counters, gauges, histograms)


def _target(url: str) -> Target:
    """A metrics URL as the HTTP layer's target (the model name is not used by a scrape)."""
    return Target(url=url, model="metrics")


async def scrape_page(
    url: str, t: float, *, engine: str = "auto", model: str | None = None, shadow_names: tuple[str, str] | None = None
) -> Snapshot:
    """Scrape one page; never raises: a failure is a snapshot with `ok=False` and the reason."""
    http = HttpClient(_target(url), _HTTP)
    try:
        out = await http.get_text(url)
    finally:
        await http.aclose()
    if out.error is not None:
        return Snapshot(MetricsSnapshot(url=url, t=t, ok=False, error=f"{url}: {out.error.message}"))
    try:
        return parse_page(out.value or "", t, engine=engine, model=model, shadow_names=shadow_names, url=url)
    except ValueError as exc:
        return Snapshot(MetricsSnapshot(url=url, t=t, ok=False, error=f"{url}: not Prometheus text: {exc}"))


@dataclass(frozen=True)
class PromResult:
    """One PromQL query's answer: a value, or why there is none."""

    value: float | None
    error: str | None = None


async def query_prometheus(base_url: str, exprs: dict[str, str], window_s: float) -> dict[str, PromResult]:
    """Evaluate each expression at this instant with `/api/v1/query`; `$window` becomes the window in seconds.

    An expression must answer one sample (a scalar, or a vector of one
    series): several series are refused rather than guessed at, no series
    at all means no data in the window.
    """
    http = HttpClient(_target(base_url), _HTTP)
    out: dict[str, PromResult] = {}
    try:
        for key, expr in exprs.items():
            q = expr.replace("$window", f"{round(window_s)}s")
            res = await http.get_json(f"{base_url}/api/v1/query?{urlencode({'query': q, 'time': f'{time.time():.3f}'})}")
            out[key] = _prom_value(res.value, res.error.message if res.error else None, q)
    finally:
        await http.aclose()
    return out


def _prom_value(body: Any, error: str | None, q: str) -> PromResult:
    if error is not None:
        return PromResult(None, f"Prometheus query failed ({error}): {q}")
    if not isinstance(body, dict) or body.get("status") != "success":
        why = body.get("error", "no status") if isinstance(body, dict) else "not a JSON object"
        return PromResult(None, f"Prometheus refused the query ({why}): {q}")
    data = body.get("data") or {}
    kind: Any = data.get("resultType")
    result: Any = data.get("result")
    try:
        if kind == "scalar":
            return PromResult(float(result[1]))
        if kind == "vector":
            if not result:
                return PromResult(None, f"no series in the window: {q}")
            if len(result) > 1:
                return PromResult(None, f"{len(result)} series answered (aggregate with sum() or avg()): {q}")
            value = float(result[0]["value"][1])
            return PromResult(None if value != value else value, f"NaN (nothing in the window): {q}" if value != value else None)
    except (TypeError, KeyError, IndexError, ValueError):
        return PromResult(None, f"unexpected answer shape: {q}")
    return PromResult(None, f"expected a vector or scalar, got {kind!r}: {q}")
