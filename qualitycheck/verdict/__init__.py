"""From scores to a verdict: per-case comparison, the digest, paired statistics and the noise floor,
guardrails, and summary.json (`Summary`, a pydantic model, and its JSON Schema). A case's status
(regression, tolerated, flaky, improved, error, divergent, identical) is decided in `_status` only.

Names are imported on first use, so importing one stage never pulls in the
heavy dependencies of another (scipy, jinja2, aiohttp).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from qualitycheck.core._lazy import lazy_exports

if TYPE_CHECKING:
    from qualitycheck.verdict._judge_figures import (
        JudgeTally as JudgeTally,
        judge_summary as judge_summary,
    )
    from qualitycheck.verdict._compare import (
        CaseComparison as CaseComparison,
        CheckOutcome as CheckOutcome,
        compare_case as compare_case,
        compare_run as compare_run,
        first_divergence as first_divergence,
        similarity as similarity,
    )
    from qualitycheck.verdict._digest import (
        RunDigest as RunDigest,
        TextTally as TextTally,
    )
    from qualitycheck.verdict._gate import (
        DEFAULT_GUARDRAILS as DEFAULT_GUARDRAILS,
        Evidence as Evidence,
        GuardrailResult as GuardrailResult,
        Guardrails as Guardrails,
        MaxErrorRate as MaxErrorRate,
        MaxQualityRegressionCases as MaxQualityRegressionCases,
        MaxTpotP95Regression as MaxTpotP95Regression,
        MinAcceptanceRate as MinAcceptanceRate,
        PreflightConsistent as PreflightConsistent,
        Rule as Rule,
        build_rules as build_rules,
        decide as decide,
        parse_fraction as parse_fraction,
        parse_guardrails as parse_guardrails,
    )
    from qualitycheck.verdict._stats import (
        ALPHA as ALPHA,
        CaseClassification as CaseClassification,
        CaseOutcome as CaseOutcome,
        CheckStats as CheckStats,
        DriftSamples as DriftSamples,
        NoiseFloor as NoiseFloor,
        add_case_outcomes as add_case_outcomes,
        add_drift as add_drift,
        check_stats as check_stats,
        classify_cases as classify_cases,
        format_drift as format_drift,
        holm as holm,
        minimum_detectable_effect as minimum_detectable_effect,
        noise_floor as noise_floor,
        non_inferiority as non_inferiority,
        paired_bootstrap_ci as paired_bootstrap_ci,
        paired_p_value as paired_p_value,
        quality_stats as quality_stats,
        regression_allowance as regression_allowance,
        simulate_gate as simulate_gate,
    )
    from qualitycheck.verdict._model import (
        Acceptance as Acceptance,
        CategorySummary as CategorySummary,
        CheckSummary as CheckSummary,
        Latency as Latency,
        Preflight as Preflight,
        Summary as Summary,
        read_summary as read_summary,
        summary_json_schema as summary_json_schema,
    )
    from qualitycheck.verdict._status import (
        STATUS_ORDER as STATUS_ORDER,
        CaseStatus as CaseStatus,
        Status as Status,
        StatusBook as StatusBook,
        check_statuses as check_statuses,
    )
    from qualitycheck.verdict._summary import (
        SUMMARY_NAME as SUMMARY_NAME,
        build_summary as build_summary,
        write_summary as write_summary,
    )

_HOME = {
    "JudgeTally": "_judge_figures",
    "judge_summary": "_judge_figures",
    "ALPHA": "_stats",
    "Acceptance": "_model",
    "CaseClassification": "_stats",
    "CaseComparison": "_compare",
    "CaseOutcome": "_stats",
    "CaseStatus": "_status",
    "CategorySummary": "_model",
    "CheckOutcome": "_compare",
    "CheckStats": "_stats",
    "CheckSummary": "_model",
    "DEFAULT_GUARDRAILS": "_gate",
    "DriftSamples": "_stats",
    "Evidence": "_gate",
    "GuardrailResult": "_gate",
    "Guardrails": "_gate",
    "Latency": "_model",
    "MaxErrorRate": "_gate",
    "MaxQualityRegressionCases": "_gate",
    "MaxTpotP95Regression": "_gate",
    "MinAcceptanceRate": "_gate",
    "NoiseFloor": "_stats",
    "Preflight": "_model",
    "PreflightConsistent": "_gate",
    "Rule": "_gate",
    "RunDigest": "_digest",
    "STATUS_ORDER": "_status",
    "SUMMARY_NAME": "_summary",
    "Status": "_status",
    "StatusBook": "_status",
    "Summary": "_model",
    "TextTally": "_digest",
    "add_case_outcomes": "_stats",
    "add_drift": "_stats",
    "build_rules": "_gate",
    "build_summary": "_summary",
    "check_stats": "_stats",
    "check_statuses": "_status",
    "classify_cases": "_stats",
    "compare_case": "_compare",
    "compare_run": "_compare",
    "decide": "_gate",
    "first_divergence": "_compare",
    "format_drift": "_stats",
    "holm": "_stats",
    "minimum_detectable_effect": "_stats",
    "noise_floor": "_stats",
    "non_inferiority": "_stats",
    "paired_bootstrap_ci": "_stats",
    "paired_p_value": "_stats",
    "parse_fraction": "_gate",
    "parse_guardrails": "_gate",
    "quality_stats": "_stats",
    "read_summary": "_model",
    "regression_allowance": "_stats",
    "similarity": "_compare",
    "simulate_gate": "_stats",
    "summary_json_schema": "_model",
    "write_summary": "_summary",
}

__all__ = sorted(_HOME)

__getattr__ = lazy_exports(__name__, _HOME)
