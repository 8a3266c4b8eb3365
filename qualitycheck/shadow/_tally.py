"""What the shadow proxy counts: Prometheus metrics for operators, a record per run folder for the store.

Two audiences, two lifetimes. `/qc/metrics` serves process-lifetime counters
(what a dashboard scrapes: requests, mirrored, dropped, stored, errors, the
live identical rate and acceptance); each run folder keeps a `ShadowPeriod`
for the stretch of time it covers (the typed artifact `core.ShadowPeriods`,
and `shadow.json` for people), so a rotated folder says what happened while it
was open, and `merge` of several folders lists every period.

Labels are closed sets (endpoints, drop reasons, error kinds), so the number of
time series never grows with traffic.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from qualitycheck.core._records import ShadowDrain, ShadowPeriod, ShadowPeriods

__all__ = [
    "DROP_REASONS",
    "ShadowDrain",
    "ShadowMetrics",
    "ShadowPeriod",
    "ShadowPeriods",
]

DROP_REASONS = (
    "max_inflight",
    "handoff_full",
    "mirror_down",
    "not_json",
    "not_a_case",
    "client_disconnected",
    "stopped",
    "store_failed",
)
"""Why a sampled request was not stored as a pair:

- `max_inflight`: more mirrors were pending than allowed; the request was not mirrored;
- `handoff_full`: the mirror process is not taking requests as fast as they come (stalled, or saturated);
- `mirror_down`: the mirror process is gone (the callers are served as before);
- `not_json`: the body is not a JSON object, so there is nothing to mirror;
- `not_a_case`: mirrored, but the request cannot be a case (e.g. no messages);
- `client_disconnected`: the caller left mid-answer, so the baseline's answer is incomplete;
- `stopped`: still in flight when the drain timeout ran out;
- `store_failed`: the run store refused the write (disk full, ...).
"""
ERROR_KINDS = ("http_status", "timeout", "connection", "stream_cut", "malformed", "bad_response")
ENDPOINTS = ("chat", "completions", "other")


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
