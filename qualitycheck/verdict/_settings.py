"""The verdict's own settings: the few values of the config the summary and the quality decision read.

The verdict never sees the whole config (`core._config_file.Config`): the
pipeline hands it these, so a stage reads what it uses and nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from qualitycheck.core._guardrails import GuardrailBlock, Guardrails, resolve_guardrails
from qualitycheck.verdict._likelihood import DEFAULT_SHIFT_NATS, DivergenceRule
from qualitycheck.verdict._sequential import DEFAULT_DROP

__all__ = ["VerdictSettings"]


@dataclass(frozen=True)
class VerdictSettings:
    """What gating a run reads: the guardrails in force, the non-inferiority margins, the seed, the sampled design's drop."""

    guardrails: Guardrails = field(default_factory=lambda: resolve_guardrails(GuardrailBlock(), {}))
    margins: Mapping[str, float] = field(default_factory=dict)
    """Per check, the largest pass-rate drop still called non-inferior."""
    seed: int = 0
    """Seeds the bootstrap: the same run gives the same CIs."""
    allow_not_evaluated: bool = False
    """Let a run pass when some guardrail could not be evaluated."""
    detectable_drop: float = DEFAULT_DROP
    """The drop a sampled category must be able to detect, for stored answers not taken in rounds (no sampling record)."""
    detectable_shift: float = DEFAULT_SHIFT_NATS
    """The likelihood shift (nats per token) a sampled category must be able to detect before it passes."""
    divergence_rule: DivergenceRule = field(default_factory=DivergenceRule)
    """Where a greedy divergence stops being numerics (`verdict._likelihood.classify_divergence`)."""
