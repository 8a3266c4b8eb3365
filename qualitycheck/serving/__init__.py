"""Serving metrics: latency percentiles, speculative acceptance, preflight, slices.

Everything here reads either the run store (latency, slices, acceptance from
recorded /metrics windows) or the servers' own introspection endpoints
(/metrics, /tokenize, /v1/models, /version), never the answers' quality.
Definitions of every number are in the submodules' docstrings and in
docs/stages/serving.md.
"""

from __future__ import annotations

from qualitycheck.serving._acceptance import (
    WINDOWS_ARTIFACT,
    SentTally,
    acceptance_from_windows,
    acceptance_summary,
    parse_metrics,
    record_window,
    scrape,
    scrape_all,
    window,
)
from qualitycheck.serving._latency import cost_per_1k, itl_per_token, latency_summary, side_latency, tpot_s
from qualitycheck.generation._preflight import Check, PreflightResult, format_preflight, preflight, run_preflight
from qualitycheck.serving._slices import slices_summary

__all__ = [
    "Check",
    "PreflightResult",
    "SentTally",
    "WINDOWS_ARTIFACT",
    "acceptance_from_windows",
    "acceptance_summary",
    "cost_per_1k",
    "format_preflight",
    "itl_per_token",
    "latency_summary",
    "parse_metrics",
    "preflight",
    "record_window",
    "run_preflight",
    "scrape",
    "scrape_all",
    "side_latency",
    "slices_summary",
    "tpot_s",
    "window",
]
