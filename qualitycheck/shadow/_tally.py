"""What the shadow proxy counts: Prometheus metrics for operators, a record per run folder for the store.

Two audiences, two lifetimes. `/qc/metrics` serves process-lifetime counters
(what a dashboard scrapes: requests, mirrored, dropped, stored, errors, the
live identical rate and acceptance); each run folder keeps a `ShadowPeriod`
for the stretch of time it covers (artifact `shadow` and `shadow.json`), so a
rotated folder says what happened while it was open, and `merge` of several
folders lists every period (the artifact is a list, and merge concatenates
lists).

Labels are closed sets (endpoints, drop reasons, error kinds), so the number of
time series never grows with traffic.
"""

from __future__ import annotations

from typing import Literal

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "DROP_REASONS",
    "PERIODS_ARTIFACT",
    "DrainRecord",
    "ShadowMetrics",
    "ShadowPeriod",
]

PERIODS_ARTIFACT = "shadow"
"""The store artifact holding the folder's `ShadowPeriod` records (a list: one per period, merged folders list all)."""

DROP_REASONS = ("max_inflight", "not_json", "not_a_case", "client_disconnected", "stopped", "store_failed")
"""Why a sampled request was not stored as a pair:

- `max_inflight`: more mirrors were pending than allowed; the request was not mirrored;
- `not_json`: the body is not a JSON object, so there is nothing to mirror;
- `not_a_case`: mirrored, but the request cannot be a case (e.g. no messages);
- `client_disconnected`: the caller left mid-answer, so the baseline's answer is incomplete;
- `stopped`: still in flight when the drain timeout ran out;
- `store_failed`: the run store refused the write (disk full, ...).
"""
ERROR_KINDS = ("http_status", "timeout", "connection", "stream_cut", "malformed", "bad_response")
ENDPOINTS = ("chat", "completions", "other")


class DrainRecord(BaseModel):
    """What the stop did: how much was in flight, how much finished within the timeout."""

    model_config = ConfigDict(extra="forbid")

    timeout_s: float
    in_flight: int
    """Pairs pending when the stop began."""
    finished: int
    """Of those, stored or accounted for before the timeout."""
    cancelled: int
    """Cancelled at the timeout (counted under dropped `stopped`)."""
    seconds: float


class ShadowPeriod(BaseModel):
    """One run folder's stretch of shadowing: what the proxy received, mirrored, dropped and stored in it."""

    model_config = ConfigDict(extra="forbid")

    format_version: int = 1
    replica: str
    """A random id per proxy process: case ids start with it, so folders of several replicas merge without clashes."""
    listen: str
    sample: float
    max_inflight: int
    started_at: float
    """Epoch seconds when the folder was opened."""
    closed_at: float | None = None
    closed_because: Literal["rotation", "stopped"] | None = None
    requests: int = 0
    """Client requests forwarded to the baseline (every path)."""
    mirrored: int = 0
    """Requests sent to the candidate as well."""
    dropped: dict[str, int] = Field(default_factory=dict)
    """Sampled requests not stored as pairs, by reason (`DROP_REASONS`)."""
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
    drain: DrainRecord | None = None


class ShadowMetrics:
    """The proxy's Prometheus metrics, on a registry of its own (several proxies may share a process in tests)."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry(auto_describe=False)
        requests = Counter("qc_shadow_requests", "Client requests forwarded to the baseline.", ["endpoint"], registry=r)
        self.requests = {e: requests.labels(e) for e in ENDPOINTS}
        self.mirrored = Counter("qc_shadow_mirrored", "Requests mirrored to the candidate.", registry=r)
        dropped = Counter("qc_shadow_dropped", "Sampled requests not stored as pairs, by reason.", ["reason"], registry=r)
        self.dropped = {k: dropped.labels(k) for k in DROP_REASONS}
        self.stored = Counter("qc_shadow_stored", "Pairs stored in the run folder.", registry=r)
        cand = Counter("qc_shadow_candidate_errors", "Candidate answers that are errors, by kind.", ["kind"], registry=r)
        self.candidate_errors = {k: cand.labels(k) for k in ERROR_KINDS}
        base = Counter("qc_shadow_baseline_errors", "Recorded baseline answers that are errors, by kind.", ["kind"], registry=r)
        self.baseline_errors = {k: base.labels(k) for k in ERROR_KINDS}
        self.compared = Counter("qc_shadow_compared", "Pairs where both sides answered.", registry=r)
        self.identical = Counter("qc_shadow_identical", "Pairs whose answers are the same.", registry=r)
        self.identical_rate = Gauge("qc_shadow_identical_rate", "Identical pairs / compared pairs since start.", registry=r)
        self.acceptance_rate = Gauge(
            "qc_shadow_acceptance_rate", "Candidate accepted / draft tokens since start (/metrics); NaN until measured.", registry=r
        )
        self.mean_accepted_length = Gauge(
            "qc_shadow_mean_accepted_length", "1 + accepted tokens / drafts since start; NaN until measured.", registry=r
        )
        self.inflight = Gauge("qc_shadow_inflight", "Mirrored pairs pending (answering or waiting to be stored).", registry=r)
        self.acceptance_rate.set(float("nan"))
        self.mean_accepted_length.set(float("nan"))
        self._compared = 0
        self._identical = 0

    def compare(self, identical: bool) -> None:
        self._compared += 1
        self._identical += identical
        self.compared.inc()
        if identical:
            self.identical.inc()
        self.identical_rate.set(self._identical / self._compared)

    def error(self, side: str, kind: str) -> None:
        counters = self.candidate_errors if side == "candidate" else self.baseline_errors
        counters.get(kind, counters["http_status"]).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
