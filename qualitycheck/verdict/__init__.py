"""From scores to a verdict: per-case comparison, the digest, paired statistics and the noise floor,
guardrails, and summary.json (`Summary`, a pydantic model, and its JSON Schema). A case's status
(regression, tolerated, flaky, improved, error, divergent, identical) follows from one function,
`_decision.decide_quality`, which decides every route and category; `_status` reads it back.

Names are imported on first use, so importing one stage never pulls in the
heavy dependencies of another (scipy, jinja2, aiohttp).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from qualitycheck.core._lazy import lazy_exports

if TYPE_CHECKING:
    from qualitycheck.verdict._compare import CaseComparison as CaseComparison
    from qualitycheck.verdict._compare import CheckOutcome as CheckOutcome
    from qualitycheck.verdict._compare import compare_case as compare_case
    from qualitycheck.verdict._compare import compare_run as compare_run
    from qualitycheck.verdict._compare import first_divergence as first_divergence
    from qualitycheck.verdict._compare import similarity as similarity
    from qualitycheck.verdict._decision import CategoryDecision as CategoryDecision
    from qualitycheck.verdict._decision import QualityDecision as QualityDecision
    from qualitycheck.verdict._decision import QualityEvidence as QualityEvidence
    from qualitycheck.verdict._decision import RouteDecision as RouteDecision
    from qualitycheck.verdict._decision import decide_quality as decide_quality
    from qualitycheck.verdict._decision import quality_evidence as quality_evidence
    from qualitycheck.verdict._digest import RunDigest as RunDigest
    from qualitycheck.verdict._digest import TextTally as TextTally
    from qualitycheck.verdict._drift import DriftSamples as DriftSamples
    from qualitycheck.verdict._drift import add_drift as add_drift
    from qualitycheck.verdict._drift import format_drift as format_drift
    from qualitycheck.verdict._floor import NoiseFloor as NoiseFloor
    from qualitycheck.verdict._floor import noise_floor as noise_floor
    from qualitycheck.verdict._floor import regression_allowance as regression_allowance
    from qualitycheck.verdict._gate import DEFAULT_GUARDRAILS as DEFAULT_GUARDRAILS
    from qualitycheck.verdict._gate import Evidence as Evidence
    from qualitycheck.verdict._gate import GuardrailResult as GuardrailResult
    from qualitycheck.verdict._gate import Guardrails as Guardrails
    from qualitycheck.verdict._gate import MaxErrorRate as MaxErrorRate
    from qualitycheck.verdict._gate import MaxQualityRegressionCases as MaxQualityRegressionCases
    from qualitycheck.verdict._gate import MaxTpotP95Regression as MaxTpotP95Regression
    from qualitycheck.verdict._gate import MinAcceptanceRate as MinAcceptanceRate
    from qualitycheck.verdict._gate import PreflightConsistent as PreflightConsistent
    from qualitycheck.verdict._gate import Rule as Rule
    from qualitycheck.verdict._gate import build_rules as build_rules
    from qualitycheck.verdict._gate import decide as decide
    from qualitycheck.verdict._gate import parse_fraction as parse_fraction
    from qualitycheck.verdict._judge_figures import JudgeTally as JudgeTally
    from qualitycheck.verdict._judge_figures import judge_summary as judge_summary
    from qualitycheck.verdict._model import Acceptance as Acceptance
    from qualitycheck.verdict._model import CategorySummary as CategorySummary
    from qualitycheck.verdict._model import CheckSummary as CheckSummary
    from qualitycheck.verdict._model import Latency as Latency
    from qualitycheck.verdict._model import Preflight as Preflight
    from qualitycheck.verdict._model import Summary as Summary
    from qualitycheck.verdict._model import read_summary as read_summary
    from qualitycheck.verdict._model import summary_json_schema as summary_json_schema
    from qualitycheck.verdict._outcomes import CaseOutcome as CaseOutcome
    from qualitycheck.verdict._outcomes import add_case_outcomes as add_case_outcomes
    from qualitycheck.verdict._settings import VerdictSettings as VerdictSettings
    from qualitycheck.verdict._stats import CaseClassification as CaseClassification
    from qualitycheck.verdict._stats import CheckStats as CheckStats
    from qualitycheck.verdict._stats import check_stats as check_stats
    from qualitycheck.verdict._stats import classify_cases as classify_cases
    from qualitycheck.verdict._stats import quality_stats as quality_stats
    from qualitycheck.verdict._status import STATUS_ORDER as STATUS_ORDER
    from qualitycheck.verdict._status import CaseStatus as CaseStatus
    from qualitycheck.verdict._status import Status as Status
    from qualitycheck.verdict._status import StatusBook as StatusBook
    from qualitycheck.verdict._status import check_statuses as check_statuses
    from qualitycheck.verdict._summary import SUMMARY_NAME as SUMMARY_NAME
    from qualitycheck.verdict._summary import build_summary as build_summary
    from qualitycheck.verdict._summary import run_evidence as run_evidence
    from qualitycheck.verdict._summary import write_summary as write_summary
    from qualitycheck.verdict._tests import ALPHA as ALPHA
    from qualitycheck.verdict._tests import holm as holm
    from qualitycheck.verdict._tests import minimum_detectable_effect as minimum_detectable_effect
    from qualitycheck.verdict._tests import non_inferiority as non_inferiority
    from qualitycheck.verdict._tests import paired_bootstrap_ci as paired_bootstrap_ci
    from qualitycheck.verdict._tests import paired_p_value as paired_p_value
    from qualitycheck.verdict._tests import sign_test_p as sign_test_p

_HOME = {
    "ALPHA": "_tests",
    "Acceptance": "_model",
    "CaseClassification": "_stats",
    "CaseComparison": "_compare",
    "CaseOutcome": "_outcomes",
    "CaseStatus": "_status",
    "CategoryDecision": "_decision",
    "CategorySummary": "_model",
    "CheckOutcome": "_compare",
    "CheckStats": "_stats",
    "CheckSummary": "_model",
    "DEFAULT_GUARDRAILS": "_gate",
    "DriftSamples": "_drift",
    "Evidence": "_gate",
    "GuardrailResult": "_gate",
    "Guardrails": "_gate",
    "JudgeTally": "_judge_figures",
    "Latency": "_model",
    "MaxErrorRate": "_gate",
    "MaxQualityRegressionCases": "_gate",
    "MaxTpotP95Regression": "_gate",
    "MinAcceptanceRate": "_gate",
    "NoiseFloor": "_floor",
    "Preflight": "_model",
    "PreflightConsistent": "_gate",
    "QualityDecision": "_decision",
    "QualityEvidence": "_decision",
    "RouteDecision": "_decision",
    "Rule": "_gate",
    "RunDigest": "_digest",
    "STATUS_ORDER": "_status",
    "SUMMARY_NAME": "_summary",
    "Status": "_status",
    "StatusBook": "_status",
    "Summary": "_model",
    "TextTally": "_digest",
    "VerdictSettings": "_settings",
    "add_case_outcomes": "_outcomes",
    "add_drift": "_drift",
    "build_rules": "_gate",
    "build_summary": "_summary",
    "check_stats": "_stats",
    "check_statuses": "_status",
    "classify_cases": "_stats",
    "compare_case": "_compare",
    "compare_run": "_compare",
    "decide": "_gate",
    "decide_quality": "_decision",
    "first_divergence": "_compare",
    "format_drift": "_drift",
    "holm": "_tests",
    "judge_summary": "_judge_figures",
    "minimum_detectable_effect": "_tests",
    "noise_floor": "_floor",
    "non_inferiority": "_tests",
    "paired_bootstrap_ci": "_tests",
    "paired_p_value": "_tests",
    "parse_fraction": "_gate",
    "quality_evidence": "_decision",
    "quality_stats": "_stats",
    "read_summary": "_model",
    "regression_allowance": "_floor",
    "run_evidence": "_summary",
    "sign_test_p": "_tests",
    "similarity": "_compare",
    "summary_json_schema": "_model",
    "write_summary": "_summary",
}

__all__ = sorted(_HOME)

__getattr__ = lazy_exports(__name__, _HOME)
