"""Scoring: deterministic checks on every stored response, re-runnable from the store.

`score_store(store)` rebuilds each case's scorers from its stored `checks`
and replaces every score except the judge's. `format_features` gives the
drift features the comparison puts side by side.
"""

from __future__ import annotations

from qualitycheck.scoring._format import format_features
from qualitycheck.scoring._registry import BASELINE, FAMILIES, Outcome, Scorer, build_scorers, score_case, score_store

__all__ = [
    "BASELINE",
    "FAMILIES",
    "Outcome",
    "Scorer",
    "build_scorers",
    "format_features",
    "score_case",
    "score_store",
]
