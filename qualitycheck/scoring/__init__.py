"""Scoring: deterministic checks on every stored response, re-runnable from the store.

`score_store(store)` rebuilds each case's scorers from its stored `checks`
and replaces every score except the judge's. `format_features` gives the
drift features the comparison puts side by side. `check_family` declares a
family of checks (its spec, check names and scorer factory) in one place;
importing this package declares the built-in ones.
"""

from __future__ import annotations

# The registry first: it imports the built-in families in the order they are declared (and listed).
from qualitycheck.scoring._registry import build_scorers, score_case, score_store  # isort: skip
from qualitycheck.scoring._base import BASELINE, BrokenScorer, CheckSpec, LoadContext, Outcome, Scorer, check_family, declare_family
from qualitycheck.scoring._code import UnitTestsCheck
from qualitycheck.scoring._exact import ContainsCheck, ExactCheck, RegexCheck
from qualitycheck.scoring._format import format_features
from qualitycheck.scoring._judged import JudgeCheck
from qualitycheck.scoring._python import PythonCheck, PythonChecks
from qualitycheck.scoring._sql import SqlCheck
from qualitycheck.scoring._structured import JsonCheck, YamlCheck

__all__ = [
    "BASELINE",
    "BrokenScorer",
    "CheckSpec",
    "ContainsCheck",
    "ExactCheck",
    "JsonCheck",
    "JudgeCheck",
    "LoadContext",
    "Outcome",
    "PythonCheck",
    "PythonChecks",
    "RegexCheck",
    "Scorer",
    "SqlCheck",
    "UnitTestsCheck",
    "YamlCheck",
    "build_scorers",
    "check_family",
    "declare_family",
    "format_features",
    "score_case",
    "score_store",
]
