"""The guardrails block of the config, typed: the seed's block read verbatim, per-route overrides, resolved thresholds.

```yaml
speculative_decoding_guardrails:
  min_acceptance_rate: 0.55
  max_tpot_p95_regression: "10%"
  max_error_rate: "1%"
  max_quality_regression_cases: 0
  fallback_action: "disable_speculative_decoding_for_route"
routes:            # per-route overrides of any guardrail above
  billing: {max_quality_regression_cases: 2}
```

Values are validated when the config loads, so a bad one is reported with
its file, line and field before any request is sent (not after a suite was
generated). Rates and percentages are read as fractions (`'10%'` → 0.1); a
run's stored config writes them back as fractions, which read the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, SerializerFunctionWrapHandler, field_validator, model_serializer

__all__ = ["DEFAULT_GUARDRAILS", "GuardrailBlock", "Guardrails", "RouteGuardrails", "parse_fraction", "resolve_guardrails"]

DEFAULT_GUARDRAILS: dict[str, Any] = {
    "max_error_rate": 0.01,
    "max_quality_regression_cases": 0,
    "fallback_action": "disable_speculative_decoding_for_route",
}
"""Gated when the config names no guardrails: what every run measures (quality, errors).

Acceptance and latency thresholds depend on the deployment, so they are
gated only when configured; the sign-off lists them as not gated otherwise.
"""

THRESHOLDS = ("min_acceptance_rate", "max_tpot_p95_regression", "max_error_rate", "max_quality_regression_cases")
"""The guardrails with a threshold, in the order the rules are built."""


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


def _fraction(value: Any, hint: str, *, at_most_one: bool) -> float | None:
    if value is None:
        return None
    try:
        x = parse_fraction(value)
    except ValueError:
        raise ValueError(f"expected {hint}, got {value!r}") from None
    if at_most_one and x > 1:
        raise ValueError(f"expected {hint}, got {value!r} (a rate above 100%)")
    return x


class RouteGuardrails(BaseModel):
    """The thresholds one route overrides (any of the block's, except the fallback action)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    min_acceptance_rate: float | None = None
    """The least share of draft tokens the target accepts: a rate like 0.55 or '55%'."""
    max_tpot_p95_regression: float | None = None
    """The most the candidate's p95 time per output token may grow: a percentage like '10%' or a fraction like 0.1."""
    max_error_rate: float | None = None
    """The most requests the candidate may fail: a percentage like '1%' or a fraction like 0.01."""
    max_quality_regression_cases: int | None = None
    """The most regression cases beyond the noise floor: a whole number of cases like 0."""

    @field_validator("min_acceptance_rate", mode="before")
    @classmethod
    def _acceptance(cls, v: Any) -> float | None:
        return _fraction(v, "a rate like 0.55 or '55%'", at_most_one=True)

    @field_validator("max_tpot_p95_regression", mode="before")
    @classmethod
    def _tpot(cls, v: Any) -> float | None:
        return _fraction(v, "a percentage like '10%' or a fraction like 0.1", at_most_one=False)

    @field_validator("max_error_rate", mode="before")
    @classmethod
    def _errors(cls, v: Any) -> float | None:
        return _fraction(v, "a percentage like '1%' or a fraction like 0.01", at_most_one=True)

    @field_validator("max_quality_regression_cases", mode="before")
    @classmethod
    def _cases(cls, v: Any) -> int | None:
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
            raise ValueError(f"expected a whole number of cases like 0, got {v!r}")
        return v

    @model_serializer(mode="wrap")
    def _as_written(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Only what is set: a stored config reads back as the block was written, and unset guardrails stay unset."""
        return {k: v for k, v in handler(self).items() if v is not None}

    def thresholds(self) -> dict[str, float | int]:
        """The thresholds set here, by guardrail name, in rule order."""
        return {name: v for name in THRESHOLDS if (v := getattr(self, name)) is not None}


class GuardrailBlock(RouteGuardrails):
    """`speculative_decoding_guardrails`: the thresholds for the whole endpoint and the fallback action."""

    fallback_action: str | None = None
    """What the fallback plan tells operators to do on a failed route."""

    @field_validator("fallback_action")
    @classmethod
    def _action(cls, v: str | None) -> str | None:
        if v is not None and not v.strip():
            raise ValueError("expected a non-empty action name")
        return v


@dataclass(frozen=True)
class Guardrails:
    """The guardrails in force: thresholds for the whole endpoint and per route, and the fallback action."""

    thresholds: dict[str, float | int]
    routes: dict[str, dict[str, float | int]]
    fallback_action: str


def resolve_guardrails(block: GuardrailBlock, routes: Mapping[str, RouteGuardrails]) -> Guardrails:
    """The block as configured, or the defaults when it sets nothing (a stored config writes unset values as null).

    A block that sets only the fallback action gates no threshold, as written.
    """
    thresholds = block.thresholds()
    if not thresholds and block.fallback_action is None:
        thresholds = {k: v for k, v in DEFAULT_GUARDRAILS.items() if k in THRESHOLDS}
    action = block.fallback_action or DEFAULT_GUARDRAILS["fallback_action"]
    return Guardrails(thresholds, {route: over.thresholds() for route, over in routes.items()}, str(action))
