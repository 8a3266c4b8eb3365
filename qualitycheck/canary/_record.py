"""The canary's records: one line of `OUT/canary.jsonl` per evaluated window (or re-arm), typed and versioned.

Each guardrail's outcome is the offline gate's own `GuardrailResult`
(`passed: null` is "not evaluated", never a pass), with the evidence the
window held and how many consecutive failing windows the route has seen.
`qualitycheck schema canary` prints the JSON Schema of a line.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from qualitycheck.verdict._gate import GuardrailResult
from qualitycheck.verdict._model import GpuFacts

__all__ = [
    "CANARY_FORMAT_VERSION",
    "ActionRecord",
    "CanaryRecord",
    "GpuFacts",
    "GuardrailWindow",
    "RouteState",
    "SourceStatus",
    "canary_json_schema",
]

CANARY_FORMAT_VERSION = 1


class _Closed(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


class GuardrailWindow(_Closed):
    """One guardrail of one route in one window."""

    result: GuardrailResult
    """The offline gate's record: name, threshold, observed, passed (null: not evaluated), message, route."""
    evidence: dict[str, float] = Field(default_factory=dict)
    """What the window held for it: drafts, requests per side, pairs."""
    source: str = ""
    """Where the observation came from: a metrics URL, `prometheus`, or the run folder."""
    streak: int = 0
    """Consecutive failing windows with enough evidence, this one included (not-evaluated windows neither add nor reset)."""


class SourceStatus(_Closed):
    """One metrics source in this window."""

    name: str
    """candidate, baseline, shadow, dcgm, prometheus or run."""
    url: str
    ok: bool
    error: str | None = None
    engine: str | None = None
    counter_resets: int = 0
    """Counters that went down inside the window (a restart); the increase after it is counted."""


class ActionRecord(_Closed):
    """The fallback action of one route: run once, retried until it succeeds, never forgotten."""

    route: str
    action: str
    """The configured `fallback_action`."""
    status: Literal["done", "pending", "recorded"]
    """done: it ran and succeeded; pending: it failed and will be tried again; recorded: --dry-run, nothing ran."""
    attempts: int = 0
    error: str | None = None
    event: dict[str, Any] = Field(default_factory=dict)
    """The JSON the action received on stdin (or as the webhook body)."""


class RouteState(_Closed):
    route: str
    state: Literal["armed", "tripped"]
    tripped_by: str | None = None
    """The guardrail that tripped it."""
    tripped_at: float | None = None


class CanaryRecord(_Closed):
    """One line of canary.jsonl."""

    format_version: int = CANARY_FORMAT_VERSION
    kind: Literal["window", "rearm"] = "window"
    t: float
    """Unix time at the end of the window."""
    window_s: float = 0.0
    status: Literal["healthy", "failing", "not_evaluated", "tripped"]
    """tripped: a route is off speculation (now or earlier, until re-armed); failing: a guardrail failed but has not
    failed on enough consecutive windows; not_evaluated: some watched guardrail lacked evidence or its source; healthy:
    every watched guardrail passed."""
    dry_run: bool = False
    guardrails: list[GuardrailWindow] = Field(default_factory=list)
    unwatched: list[str] = Field(default_factory=list)
    """Configured guardrails with no source to read them from (e.g. quality without --run)."""
    sources: list[SourceStatus] = Field(default_factory=list)
    acceptance: dict[str, float | None] = Field(default_factory=dict)
    """rate, mean_accepted_length, drafts, draft_tokens, accepted_tokens over the window."""
    gpu: dict[str, GpuFacts] = Field(default_factory=dict)
    """candidate / baseline → means over the window's scrapes (the offline summary's record, `verdict._model.GpuFacts`)."""
    routes: list[RouteState] = Field(default_factory=list)
    tripped_now: list[str] = Field(default_factory=list)
    """Routes this window tripped."""
    actions: list[ActionRecord] = Field(default_factory=list)
    """Actions run, retried or recorded in this window."""
    alerts: list[str] = Field(default_factory=list)
    """What an operator must look at: a source down, an action failing."""


def canary_json_schema() -> dict[str, Any]:
    """The JSON Schema (Draft 2020-12) of one canary.jsonl line."""
    schema = CanaryRecord.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "qualitycheck canary.jsonl line"
    return schema
