"""Guardrails: one rule per configured threshold, and the run's verdict and fallback plan.

The block is typed and validated when the config loads (`core._guardrails`).
Each guardrail is a small rule object whose `evaluate(evidence)` returns a
`GuardrailResult` with a message a release manager can read. A rule whose
observation is missing (no /metrics, no latency) is *not evaluated*
(`passed: None`), never passed; the run is then `inconclusive` unless the
config sets `allow_not_evaluated: true`.

The block's YAML is shown in `core/_guardrails.py`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from pydantic import ConfigDict

from qualitycheck.core._guardrails import DEFAULT_GUARDRAILS, Guardrails, parse_fraction
from qualitycheck.core._records import PreflightCheckRecord, PreflightRecord

if TYPE_CHECKING:
    from qualitycheck.verdict._decision import QualityDecision

__all__ = [
    "ALL_ROUTES",
    "DEFAULT_GUARDRAILS",
    "Evidence",
    "GuardrailResult",
    "Guardrails",
    "MaxErrorRate",
    "MaxQualityRegressionCases",
    "MaxTpotP95Regression",
    "MinAcceptanceRate",
    "PreflightConsistent",
    "Rule",
    "build_rules",
    "decide",
    "parse_fraction",
    "quality_thresholds",
]


ALL_ROUTES = "*"
"""A guardrail of the whole endpoint: every route at once."""


@dataclass(frozen=True)
class GuardrailResult:
    """One guardrail's outcome (an entry of summary.json `guardrails`); `passed` is None when it could not be evaluated."""

    __pydantic_config__: ClassVar[ConfigDict] = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    name: str
    threshold: float | int | str
    """As configured: a rate, a percentage like '10%', a number of cases, or what the rule requires."""
    observed: float | int | list[str] | None
    """What the run measured (a rate, a relative change, a number of cases, the preflight checks that differ); null when not evaluated."""
    passed: bool | None
    """null: not evaluated (the observation is missing), never counted as passed."""
    message: str
    route: str = ALL_ROUTES
    """The route this result applies to ('*': the whole endpoint)."""


@dataclass
class Evidence:
    """What the rules read: the run's measured figures, and the quality decision (`verdict._decision.decide_quality`)."""

    errors: dict[str, dict[str, Any]] = field(default_factory=dict)
    """target → {count, requests, rate} over the whole run."""
    route_errors: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)
    """route → target → {count, requests}."""
    latency: dict[str, Any] | None = None
    acceptance: dict[str, Any] | None = None
    quality: QualityDecision | None = None
    """Every route's quality guardrail, decided; the rule renders its route's decision."""
    preflight: PreflightRecord | None = None
    """The preflight record (generation/_preflight.py), when preflight ran."""


class Rule(Protocol):
    @property
    def name(self) -> str: ...

    def evaluate(self, ev: Evidence) -> GuardrailResult: ...


def _pct(x: float) -> str:
    return f"{x * 100:.2f}%".replace(".00%", "%")


@dataclass(frozen=True)
class MinAcceptanceRate:
    threshold: float
    route: str = ALL_ROUTES
    name: str = "min_acceptance_rate"

    def evaluate(self, ev: Evidence) -> GuardrailResult:
        rate = (ev.acceptance or {}).get("rate")
        if rate is None:
            return GuardrailResult(
                self.name,
                self.threshold,
                None,
                None,
                "not evaluated: no speculative-decoding counters were scraped from the candidate's /metrics",
                self.route,
            )
        ok = rate >= self.threshold
        msg = f"draft acceptance rate {rate:.3f} {'≥' if ok else '<'} minimum {self.threshold:.3f}" + (
            "" if ok else ": the drafts are mostly rejected; speculation costs more than it saves"
        )
        return GuardrailResult(self.name, self.threshold, rate, ok, msg, self.route)


@dataclass(frozen=True)
class MaxTpotP95Regression:
    threshold: float
    route: str = ALL_ROUTES
    name: str = "max_tpot_p95_regression"

    def evaluate(self, ev: Evidence) -> GuardrailResult:
        lat = ev.latency or {}
        b = ((lat.get("baseline") or {}).get("tpot_ms") or {}).get("p95")
        c = ((lat.get("candidate") or {}).get("tpot_ms") or {}).get("p95")
        if not b or c is None:
            return GuardrailResult(
                self.name,
                _pct(self.threshold),
                None,
                None,
                "not evaluated: TPOT p95 is missing for the baseline or the candidate (streaming timings needed)",
                self.route,
            )
        change = c / b - 1
        ok = change <= self.threshold
        msg = (
            f"candidate TPOT p95 {c:.1f} ms vs baseline {b:.1f} ms: {change * 100:+.1f}% "
            f"({'within' if ok else 'beyond'} the allowed +{_pct(self.threshold)})"
        )
        return GuardrailResult(self.name, _pct(self.threshold), round(change, 6), ok, msg, self.route)


@dataclass(frozen=True)
class MaxErrorRate:
    threshold: float
    route: str = ALL_ROUTES
    name: str = "max_error_rate"

    def evaluate(self, ev: Evidence) -> GuardrailResult:
        if self.route == ALL_ROUTES:
            sides = {t: (d.get("count", 0), d.get("requests", 0)) for t, d in ev.errors.items()}
        else:
            sides = {t: (d["count"], d["requests"]) for t, d in ev.route_errors.get(self.route, {}).items()}
        cand = sides.get("candidate")
        if not cand or not cand[1]:
            return GuardrailResult(
                self.name, _pct(self.threshold), None, None, "not evaluated: the candidate has no requests in this run", self.route
            )
        rate = cand[0] / cand[1]
        ok = rate <= self.threshold
        parts = [f"{t} {n}/{r} = {_pct(n / r) if r else 'n/a'}" for t, (n, r) in sorted(sides.items())]
        msg = f"error rate per side: {', '.join(parts)}; candidate {'within' if ok else 'above'} the maximum {_pct(self.threshold)}"
        base = sides.get("baseline")
        if base and base[1] and base[0] / base[1] > self.threshold:
            msg += " (the baseline is above it too: the comparison itself is weakened)"
        if self.route == ALL_ROUTES:
            msg += _error_kinds(ev.errors)
        return GuardrailResult(self.name, _pct(self.threshold), round(rate, 6), ok, msg, self.route)


_KINDS_NAMED = 3
"""Kinds named per side in the error-rate message; summary.json `errors.<side>.kinds` has them all."""


def _error_kinds(errors: dict[str, dict[str, Any]]) -> str:
    """Why the requests failed, per side: the most frequent kinds with a sample of the server's message.

    A rate says that something is wrong; `http_404 × 20 (The model `x` does
    not exist.)` says what to fix.
    """
    parts = []
    for side, d in sorted(errors.items()):
        kinds = d.get("kinds") or []
        if kinds:
            named = ", ".join(f"{k['kind']} × {k['count']} ({k['message']})" for k in kinds[:_KINDS_NAMED])
            more = f" and {len(kinds) - _KINDS_NAMED} more kinds" if len(kinds) > _KINDS_NAMED else ""
            parts.append(f"{side}: {named}{more}")
    return f"; why: {'; '.join(parts)}" if parts else ""


@dataclass(frozen=True)
class MaxQualityRegressionCases:
    threshold: int
    route: str = ALL_ROUTES
    name: str = "max_quality_regression_cases"

    def evaluate(self, ev: Evidence) -> GuardrailResult:
        """The route's quality decision as a result: decided in `decide_quality`, rendered here."""
        d = ev.quality.routes.get(self.route) if ev.quality is not None else None
        if d is None or d.threshold != self.threshold:
            return GuardrailResult(
                self.name,
                self.threshold,
                None,
                None,
                "not evaluated: no check was decided on both the baseline and the candidate",
                self.route,
            )
        return GuardrailResult(self.name, self.threshold, d.observed, d.passed, d.message, self.route)


_RULES: dict[str, Callable[..., Rule]] = {
    "min_acceptance_rate": MinAcceptanceRate,
    "max_tpot_p95_regression": MaxTpotP95Regression,
    "max_error_rate": MaxErrorRate,
    "max_quality_regression_cases": MaxQualityRegressionCases,
}


@dataclass(frozen=True)
class PreflightConsistent:
    """Baseline and candidate must serve the same model with the same tokenizer, chat template and defaults.

    Not one of the seed's thresholds but a precondition of every other one:
    when the two sides tokenize the same messages differently, a quality
    difference may be template drift rather than the drafter, so the run
    fails and says which check differed. Runs with preflight switched off
    get no result here (the sign-off lists preflight as not run).
    """

    route: str = ALL_ROUTES
    name: str = "preflight_consistent"
    threshold: str = "all checks match"

    def evaluate(self, ev: Evidence) -> GuardrailResult:
        checks = ev.preflight.checks if ev.preflight is not None else []
        failed = [c for c in checks if c.passed is False]
        if not failed:
            unchecked = [c for c in checks if c.passed is None]
            if len(unchecked) == len(checks):  # nothing compared: no evidence of consistency, so never a pass
                missing = _endpoints(unchecked) or "no check was recorded"
                return GuardrailResult(
                    self.name,
                    self.threshold,
                    None,
                    None,
                    f"not evaluated: no preflight check could be performed (not exposed or not answering: {missing})",
                    self.route,
                )
            matched = ", ".join(c.name for c in checks if c.passed)
            note = (
                f"; not checked: {', '.join(c.name for c in unchecked)} (not exposed or not answering: {_endpoints(unchecked)})"
                if unchecked
                else ""
            )
            return GuardrailResult(self.name, self.threshold, [], True, f"baseline and candidate match on {matched}{note}", self.route)
        msg = "; ".join(f"{c.name}: {c.detail}" for c in failed)
        return GuardrailResult(
            self.name,
            self.threshold,
            [c.name for c in failed],
            False,
            f"the endpoints differ before any answer is compared: {msg}",
            self.route,
        )


_CHECK_ENDPOINTS = {
    "served_model": "/v1/models",
    "model_root": "/v1/models",
    "model_max_model_len": "/v1/models",
    "tokenize": "/tokenize",
    "tokenizer_and_stop_tokens": "/tokenizer_info",
    "generation_defaults": "/server_info",
    "engine_version": "/version",
}
"""The endpoint each preflight check reads (generation/_preflight.py), named when a check could not be made."""


def _endpoints(checks: list[PreflightCheckRecord]) -> str:
    """The endpoints behind checks that could not be made, each once, in the checks' order."""
    names = dict.fromkeys(_CHECK_ENDPOINTS.get(c.name, c.name) for c in checks)
    return ", ".join(names)


def build_rules(g: Guardrails, routes_in_run: set[str], *, preflight_ran: bool = False) -> list[Rule]:
    """One rule per configured guardrail for the endpoint, then one per route override.

    Quality is judged per route for every route in the run (a route's
    override, or the global threshold), so the fallback can name the routes
    that regressed; latency and acceptance are endpoint-wide observations.
    """
    rules: list[Rule] = [PreflightConsistent()] if preflight_ran else []
    for name, value in g.thresholds.items():
        if name != "max_quality_regression_cases":
            rules.append(_RULES[name](value))
    for route in sorted(routes_in_run | set(g.routes)):
        over = g.routes.get(route, {})
        q = over.get("max_quality_regression_cases", g.thresholds.get("max_quality_regression_cases"))
        if q is not None:
            rules.append(MaxQualityRegressionCases(int(q), route))
        for name, value in over.items():
            if name != "max_quality_regression_cases":
                rules.append(_RULES[name](value, route))
    return rules


def quality_thresholds(rules: Iterable[Rule]) -> dict[str, int]:
    """route (or '*') → its max_quality_regression_cases: what the quality decision is asked to decide."""
    return {r.route: r.threshold for r in rules if isinstance(r, MaxQualityRegressionCases)}


def decide(
    results: list[GuardrailResult],
    category_verdicts: dict[str, str],
    *,
    allow_not_evaluated: bool,
    fallback_action: str,
    category_routes: dict[str, set[str]],
) -> tuple[str, dict[str, Any]]:
    """The run's verdict and the fallback plan: which routes to take off speculation."""
    failed = [r for r in results if r.passed is False]
    missing = [r for r in results if r.passed is None]
    if failed or "fail" in category_verdicts.values():
        verdict = "fail"
    elif (missing and not allow_not_evaluated) or "inconclusive" in category_verdicts.values():
        verdict = "inconclusive"
    else:
        verdict = "pass"
    routes_in_run = set().union(*category_routes.values()) if category_routes else set()
    routes: set[str] = set()
    for cat, v in category_verdicts.items():
        if v == "fail":
            routes |= category_routes.get(cat, set())
    for r in failed:
        routes |= routes_in_run if r.route == ALL_ROUTES else {r.route}
    fallback = {
        "action": fallback_action if verdict != "pass" else "none",
        "configured_action": fallback_action,
        "routes": sorted(routes if verdict == "fail" else routes_in_run if verdict == "inconclusive" else set()),
        "reason": (
            "; ".join(f"{r.name}[{r.route}]: {r.message}" for r in failed)
            if failed
            else "guardrails not evaluated: " + ", ".join(f"{r.name}[{r.route}]" for r in missing)
            if verdict == "inconclusive" and missing
            else "a category is inconclusive"
            if verdict == "inconclusive"
            else "a category failed its statistics"
            if verdict == "fail"
            else "every guardrail passed"
        ),
    }
    return verdict, fallback
