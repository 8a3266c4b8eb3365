"""Serving metrics: latency percentiles, speculative acceptance, slices.

Everything here reads the run store (latency, slices, acceptance from the
/metrics windows recorded around generation), never an endpoint and never
the answers' quality; the preflight and the scrapes that talk to servers
belong to `generation`, over the one HTTP layer in `core._http`.
Definitions of every number are in the submodules' docstrings and in
docs/stages/serving.md.
"""

from __future__ import annotations

from qualitycheck.serving._acceptance import acceptance_from_windows, acceptance_rates, acceptance_summary
from qualitycheck.serving._errors import ErrorKind, ErrorTally, error_kind
from qualitycheck.serving._gpu import gpu_from_samples, gpu_summary
from qualitycheck.serving._latency import LatencyTally, cost_per_1k, itl_per_token, latency_summary, side_latency, tpot_s
from qualitycheck.serving._slices import SliceTally, slices_summary

__all__ = [
    "ErrorKind",
    "ErrorTally",
    "LatencyTally",
    "SliceTally",
    "acceptance_from_windows",
    "acceptance_rates",
    "acceptance_summary",
    "cost_per_1k",
    "error_kind",
    "gpu_from_samples",
    "gpu_summary",
    "itl_per_token",
    "latency_summary",
    "side_latency",
    "slices_summary",
    "tpot_s",
]
