"""Guardrails: the seed's block read verbatim, per-route overrides, and the verdict.

Each guardrail is a small rule object whose `evaluate(evidence)` returns a
`GuardrailResult` with a message a release manager can read. A rule whose
observation is missing (no /metrics, no latency) is *not evaluated*
(`passed: None`), never passed; the run is then `inconclusive` unless the
config sets `allow_not_evaluated: true`.

```yaml
speculative_decoding_guardrails:
  min_acceptance_rate: 0.55
  max_tpot_p95_regression: "10%"
  max_error_rate: "1%"
  max_quality_regression_cases: 0
  fallback_action: "disable_speculative_decoding_for_route"
routes:            # per-route overrides of any guardrail above
  billing: {max_quality_regression_cases: 2}
non_inferiority_margin: {exact: 0.02}
```
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Protocol

from pydantic import ConfigDict

from qualitycheck.core._config_file import Config
from qualitycheck.core._errors import ConfigError, Problem
from qualitycheck.core._records import PreflightCheckRecord, PreflightRecord

__all__ = [
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
    "SampledFinding",
    "build_rules",
    "decide",
    "parse_fraction",
    "parse_guardrails",
]

DEFAULT_GUARDRAILS: dict[str, Any] = {
    "max_error_rate": "1%",
    "max_quality_regression_cases": 0,
    "fallback_action": "disable_speculative_decoding_for_route",
}
"""Gated when the config names no guardrails: what every run measures (quality, errors).

Acceptance and latency thresholds depend on the deployment, so they are
gated only when configured; the sign-off lists them as not gated otherwise.
"""

ALL_ROUTES = "*"


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
    """What the rules read, all taken from the summary being built."""

    errors: dict[str, dict[str, Any]] = field(default_factory=dict)
    """target → {count, requests, rate} over the whole run."""
    route_errors: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)
    """route → target → {count, requests}."""
    latency: dict[str, Any] | None = None
    acceptance: dict[str, Any] | None = None
    regressions: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    """route → case id → checks it regressed on (greedy cases, and cases humans reported lost)."""
    allowances: dict[str, int] = field(default_factory=dict)
    """route → regressions among those that the noise floor explains (the pooled floor's, and the reviewers')."""
    supported: dict[str, int] = field(default_factory=dict)
    """route → regressions the floors' measured rates themselves explain; tolerating more rests on too few A/A pairs."""
    floor: str = ""
    """The pooled greedy floor's figures for messages ("3 of 120 cases asked again decided a check differently")."""
    floor_advice: str = "asking every case twice (--control URL) or more cases would decide"
    """What would give the floor more pairs, for a route left undecided by too few."""
    sampled: dict[str, list[SampledFinding]] = field(default_factory=dict)
    """route → the distribution tests of the sampled cells its cases are in."""
    scored_routes: set[str] = field(default_factory=set)
    """Routes with at least one check decided on both sides."""
    preflight: PreflightRecord | None = None
    """The preflight record (generation/_preflight.py), when preflight ran."""

    def greedy(self, routes: list[str]) -> tuple[dict[str, list[str]], int, int]:
        """The routes' greedy regressions (case id → checks), and how many of them the floor allows and supports."""
        cases: dict[str, list[str]] = {}
        allowance = supported = 0
        for r in routes:
            for case_id, checks in self.regressions.get(r, {}).items():
                cases.setdefault(case_id, []).extend(checks)
            allowance += self.allowances.get(r, 0)
            supported += self.supported.get(r, 0)
        return cases, allowance, supported

    def greedy_decision(self, routes: list[str], threshold: int) -> Literal["fail", "thin_floor", "pass"]:
        """What the routes' greedy regressions decide under `threshold`: the one place this is decided.

        fail: more regressions beyond the floor's allowance than the threshold;
        thin_floor: within the allowance only because the floor rests on too few
        pairs (its measured rate explains fewer), which leaves the routes
        undecided; pass otherwise.
        """
        cases, allowance, supported = self.greedy(routes)
        if len(cases) - allowance > threshold:
            return "fail"
        needed = len(cases) - threshold
        return "thin_floor" if needed > 0 and needed > supported else "pass"


@dataclass(frozen=True)
class SampledFinding:
    """One (category, check) cell's sampled cases, as the quality guardrail of their routes reads them."""

    category: str
    check: str
    outcome: str
    """drop | no_drop | undecided (after Holm across the run's sampled cells)."""
    message: str
    """The evidence in a sentence: both rates, the drop's bounds, p, and the cases with the largest drops."""
    cases: tuple[str, ...] = ()
    """For a drop: the cases whose pass rate fell (the regression cases it counts)."""


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
        """Greedy regressions beyond the pooled floor, and sampled categories whose pass rate dropped.

        A sampled cell with a significant drop fails its routes whatever the
        threshold (it is a drop of the category, not a count of cases). A
        route is undecided (`passed: None`), never passed, when a sampled
        cell of it could not be decided, or when its regressions are within
        the allowance only because the floor was measured on too few pairs.
        """
        routes = sorted(ev.scored_routes) if self.route == ALL_ROUTES else [self.route]
        if not any(r in ev.scored_routes for r in routes):
            return GuardrailResult(
                self.name,
                self.threshold,
                None,
                None,
                "not evaluated: no check was decided on both the baseline and the candidate",
                self.route,
            )
        cases, allowance, supported = ev.greedy(routes)
        greedy = ev.greedy_decision(routes, self.threshold)
        findings: dict[tuple[str, str], SampledFinding] = {}
        for r in routes:
            for f in ev.sampled.get(r, []):
                findings.setdefault((f.category, f.check), f)
        drops = [f for f in findings.values() if f.outcome == "drop"]
        undecided = [f for f in findings.values() if f.outcome == "undecided"]
        n = max(0, len(cases) - allowance)
        listed = "; ".join(f"{i} ({', '.join(sorted(set(c)))})" for i, c in sorted(cases.items())[:20])
        floor = f" ({ev.floor})" if ev.floor else ""
        if drops or greedy == "fail":
            parts = []
            if drops:
                parts.append("sampled pass rate dropped: " + "; ".join(f.message for f in drops))
            if greedy == "fail":
                more = f" and {len(cases) - 20} more" if len(cases) > 20 else ""
                noise = f" after {allowance} explained by the measured noise floor{floor}" if allowance else ""
                parts.append(f"{n} case(s) regressed beyond the noise floor{noise} (max {self.threshold}): {listed}{more}")
            observed = n + len({c for f in drops for c in f.cases})
            return GuardrailResult(self.name, self.threshold, observed, False, "; ".join(parts), self.route)
        needed = len(cases) - self.threshold
        if greedy == "thin_floor":
            return GuardrailResult(
                self.name,
                self.threshold,
                None,
                None,
                f"undecided: {len(cases)} regression case(s) are within the noise allowance ({allowance}) only because the "
                f"floor was measured on too few pairs{floor}; its measured rate explains {supported}; {ev.floor_advice}: {listed}",
                self.route,
            )
        if undecided:
            return GuardrailResult(
                self.name,
                self.threshold,
                None,
                None,
                "undecided: sampled pass rates could not be told apart within the budget: " + "; ".join(f.message for f in undecided),
                self.route,
            )
        if cases:
            msg = (
                f"no regression beyond the noise floor: {len(cases)} regression case(s) tolerated, as the measured A/A "
                f"noise{floor} explains up to {allowance}: {listed}"
                if needed > 0
                else f"{len(cases)} regression case(s), within the maximum {self.threshold}: {listed}"
            )
        else:
            msg = "no regression beyond the noise floor"
        if findings:
            msg += "; sampled pass rates: " + "; ".join(f.message for f in findings.values())
        return GuardrailResult(self.name, self.threshold, n, True, msg, self.route)


_RULES: dict[str, tuple[Callable[..., Rule], str]] = {
    "min_acceptance_rate": (MinAcceptanceRate, "a rate like 0.55 or '55%'"),
    "max_tpot_p95_regression": (MaxTpotP95Regression, "a percentage like '10%' or a fraction like 0.1"),
    "max_error_rate": (MaxErrorRate, "a percentage like '1%' or a fraction like 0.01"),
    "max_quality_regression_cases": (MaxQualityRegressionCases, "a whole number of cases like 0"),
}
_KNOWN = (*_RULES, "fallback_action")


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


def parse_fraction(value: Any) -> float:
    """'10%' → 0.1, 0.55 → 0.55, '0.55' → 0.55; ValueError otherwise."""
    if isinstance(value, bool):
        raise ValueError("not a number")
    if isinstance(value, (int, float)):
        x = float(value)
    elif isinstance(value, str):
        s = value.strip()
        x = float(s[:-1].strip()) / 100 if s.endswith("%") else float(s)
    else:
        raise ValueError("not a number")
    if not 0 <= x <= 100:
        raise ValueError("out of range")
    return x


def _parse_value(name: str, value: Any) -> float | int:
    if name == "max_quality_regression_cases":
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError("expected")
        return value
    x = parse_fraction(value)
    if name in ("min_acceptance_rate", "max_error_rate") and x > 1:
        raise ValueError("a rate above 100%")
    return x


@dataclass(frozen=True)
class Guardrails:
    """The parsed block: thresholds for the whole endpoint and per route, and the fallback action."""

    thresholds: dict[str, float | int]
    routes: dict[str, dict[str, float | int]]
    fallback_action: str


def parse_guardrails(cfg: Config) -> Guardrails:
    """Validate the guardrail block and route overrides; every problem names its field."""
    src = cfg.source or "config"
    problems: list[Problem] = []
    raw = dict(DEFAULT_GUARDRAILS if not cfg.speculative_decoding_guardrails else cfg.speculative_decoding_guardrails)

    def check(block: dict[str, Any], where: str) -> dict[str, float | int]:
        out: dict[str, float | int] = {}
        for key, value in block.items():
            if key == "fallback_action":
                if where != "speculative_decoding_guardrails" or not isinstance(value, str) or not value.strip():
                    problems.append(
                        Problem(src, None, f"{where}.{key}", "expected a non-empty action name in speculative_decoding_guardrails only")
                    )
                continue
            if key not in _RULES:
                near = difflib.get_close_matches(key, _KNOWN, n=1)
                hint = f"; did you mean {near[0]!r}?" if near else f"; known: {', '.join(_KNOWN)}"
                problems.append(Problem(src, None, f"{where}.{key}", f"unknown guardrail{hint}"))
                continue
            try:
                out[key] = _parse_value(key, value)
            except ValueError:
                problems.append(Problem(src, None, f"{where}.{key}", f"expected {_RULES[key][1]}, got {value!r}"))
        return out

    thresholds = check(raw, "speculative_decoding_guardrails")
    routes = {}
    for route, block in cfg.routes.items():  # the config model has already made each block a mapping
        routes[route] = check(block, f"routes.{route}")
    for check_name, margin in cfg.non_inferiority_margin.items():
        if not 0 <= margin < 1:
            problems.append(
                Problem(src, None, f"non_inferiority_margin.{check_name}", f"expected a pass-rate margin between 0 and 1, got {margin!r}")
            )
    if problems:
        raise ConfigError(problems)
    action = raw.get("fallback_action") or DEFAULT_GUARDRAILS["fallback_action"]
    return Guardrails(thresholds, routes, str(action))


def build_rules(g: Guardrails, routes_in_run: set[str], *, preflight_ran: bool = False) -> list[Rule]:
    """One rule per configured guardrail for the endpoint, then one per route override.

    Quality is judged per route for every route in the run (a route's
    override, or the global threshold), so the fallback can name the routes
    that regressed; latency and acceptance are endpoint-wide observations.
    """
    rules: list[Rule] = [PreflightConsistent()] if preflight_ran else []
    for name, value in g.thresholds.items():
        if name != "max_quality_regression_cases":
            rules.append(_RULES[name][0](value))
    for route in sorted(routes_in_run | set(g.routes)):
        over = g.routes.get(route, {})
        q = over.get("max_quality_regression_cases", g.thresholds.get("max_quality_regression_cases"))
        if q is not None:
            rules.append(MaxQualityRegressionCases(int(q), route))
        for name, value in over.items():
            if name != "max_quality_regression_cases":
                rules.append(_RULES[name][0](value, route))
    return rules


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
