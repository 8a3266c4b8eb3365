"""The `canary` block of qualitycheck.yaml: where the live metrics come from and how much evidence a window needs.

The thresholds themselves are not here: they are the config's
`speculative_decoding_guardrails` and `routes` overrides, the block the
offline gate reads (`Config.guardrails`, `core._guardrails`), so a canary and the
run that signed it off judge by the same numbers.

```yaml
canary:
  candidate_metrics: http://candidate:8000/metrics
  baseline_metrics: http://baseline:8000/metrics
  shadow_metrics: http://shadow:9000/qc/metrics
  dcgm_metrics: http://gpu-node:9400/metrics
  routes: [chat, billing]
  evidence: {min_drafts: 50, min_requests: 10, min_pairs: 5}
  # or, in a cluster: prometheus: http://prometheus:9090 with promql: {...}
```
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["CanaryConfig", "CanaryEvidence", "CanaryPromQL", "ShadowMetricNames", "parse_duration"]


class CanaryPromQL(BaseModel):
    """PromQL per guardrail for `qualitycheck canary --prometheus URL`; each must return one sample (aggregate with sum()).

    `$window` is replaced by the watch window (`300s`). An expression left
    unset falls back to the default for vLLM's names where there is one
    (docs/stages/canary.md); a guardrail with neither is not watched.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    acceptance_rate: str | None = None
    """Accepted draft tokens / draft tokens over the window."""
    drafts: str | None = None
    """Drafts (verification steps) over the window: the acceptance guardrail's evidence."""
    tpot_p95_candidate: str | None = None
    """The candidate's TPOT p95 over the window, in seconds."""
    tpot_p95_baseline: str | None = None
    """The baseline's TPOT p95 over the window, in seconds."""
    requests: str | None = None
    """The candidate's finished requests over the window: the evidence of the error rate and TPOT."""
    baseline_requests: str | None = None
    """The baseline's finished requests over the window: TPOT's evidence on that side."""
    errors: str | None = None
    """The candidate's failed requests over the window (the error rate is errors / requests)."""
    kv_cache_usage: str | None = None
    """KV-cache usage of the candidate (0..1), recorded beside the guardrails."""
    gpu_utilization: str | None = None
    """GPU utilisation in percent (DCGM_FI_DEV_GPU_UTIL), recorded beside the guardrails."""
    gpu_memory_used_mib: str | None = None
    """GPU framebuffer memory used in MiB (DCGM_FI_DEV_FB_USED), recorded beside the guardrails."""


class CanaryEvidence(BaseModel):
    """The least evidence a window needs before a guardrail counts; below it the guardrail is not evaluated."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    min_drafts: int = Field(default=50, ge=1)
    """Drafts (verification steps) in the window for the acceptance rate (SGLang exposes no draft counter: requests)."""
    min_requests: int = Field(default=10, ge=1)
    """Requests finished in the window, on each side, for TPOT p95 and the error rate."""
    min_pairs: int = Field(default=5, ge=1)
    """Baseline/candidate pairs stored in the window (`--run DIR`) for the quality guardrail."""


class ShadowMetricNames(BaseModel):
    """The counters of the shadow proxy's `/qc/metrics` that the error-rate guardrail reads."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    requests: str = "qc_shadow_mirrored_total"
    """Requests mirrored to the candidate."""
    errors: str = "qc_shadow_candidate_errors_total"
    """Mirrored requests the candidate failed."""


class CanaryConfig(BaseModel):
    """`qualitycheck canary`: metric sources, evidence minimums, windows; flags override it key by key."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    engine: Literal["auto", "vllm", "sglang", "llamacpp"] = "auto"
    """Which metric names the scraped endpoints use; `auto` recognises them on each page."""
    candidate_metrics: str | None = None
    """The candidate's Prometheus text endpoint (e.g. http://host:8000/metrics)."""
    baseline_metrics: str | None = None
    """The baseline's, for TPOT p95 over the same window."""
    shadow_metrics: str | None = None
    """The shadow proxy's /qc/metrics, for the error rate of mirrored requests."""
    dcgm_metrics: str | None = None
    """A DCGM exporter's /metrics: GPU utilisation and memory, recorded beside the guardrails."""
    prometheus: str | None = None
    """A Prometheus server: the guardrails are read with the PromQL below instead of scraping."""
    promql: CanaryPromQL = CanaryPromQL()
    shadow_names: ShadowMetricNames = ShadowMetricNames()
    evidence: CanaryEvidence = CanaryEvidence()
    routes: list[str] = Field(default_factory=list)
    """The routes the candidate serves (what a trip takes off speculation); default: the keys of `routes`, else `default`."""
    interval: str = "30s"
    """How often a window is evaluated."""
    window: str = "5m"
    """How far back each evaluation looks."""
    trip_after: int = Field(default=3, ge=1)
    """Consecutive failing windows (each with enough evidence) before a route trips."""
    listen: str = "127.0.0.1:0"
    """Where the watcher serves /qc/metrics, /qc/status, /qc/ready and Flagger's webhooks (port 0: a free port, printed at start)."""
    action_retries: int = Field(default=3, ge=0, le=100)
    """Tries of a failing fallback action per window; it stays pending, and is tried again, until it succeeds."""

    @field_validator("candidate_metrics", "baseline_metrics", "shadow_metrics", "dcgm_metrics", "prometheus")
    @classmethod
    def _http(cls, v: str | None) -> str | None:
        if v is not None and not v.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return v.rstrip("/") if v is not None else None

    @field_validator("interval", "window")
    @classmethod
    def _duration(cls, v: str) -> str:
        parse_duration(v)
        return v

    @field_validator("listen")
    @classmethod
    def _listen(cls, v: str) -> str:
        host, sep, port = v.rpartition(":")
        if not sep or not host or not port.isdigit() or int(port) > 65535:
            raise ValueError(f"expected HOST:PORT, got {v!r}")
        return v

    @property
    def interval_s(self) -> float:
        return parse_duration(self.interval)

    @property
    def window_s(self) -> float:
        return parse_duration(self.window)


_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def parse_duration(text: str | float) -> float:
    """'30s' → 30.0, '5m' → 300.0, '1h' → 3600.0, '1w' → 604800.0, '250ms' → 0.25, '2' → 2.0 (seconds); ValueError otherwise."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
    else:
        s = str(text).strip().lower()
        unit = next((u for u in _DURATION_UNITS if s.endswith(u) and not (u == "s" and s.endswith("ms"))), "")
        try:
            value = float(s[: len(s) - len(unit)]) * (_DURATION_UNITS[unit] if unit else 1.0)
        except ValueError:
            raise ValueError(f"expected a duration like 30s, 5m or 1h, got {text!r}") from None
    if not value > 0:
        raise ValueError(f"expected a positive duration, got {text!r}")
    return value
