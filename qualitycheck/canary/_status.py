"""The watcher's decision as a rollout controller reads it: `/qc/status`, typed and versioned.

A controller (Argo Rollouts' `web` provider, Flagger's webhooks) asks one
question per route: may this candidate go on? The answer is the route's
`passed`, per window and three-valued like every guardrail's: true when
every guardrail of the route passed with enough evidence, false when one
failed, null when the window cannot say (not evaluated, unwatched, no window
yet, or the last window is stale). The route's `state` (armed / tripped) is
the watcher's own hysteresis, kept apart so that a controller applying its
own (`failureLimit`, Flagger's `threshold`) can read the window alone.

Staleness is decided when the answer is made, not when the window was: a
watcher whose loop stopped evaluating must not keep answering with the last
pass it saw. `qualitycheck schema canary-status` prints the JSON Schema.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pydantic import Field

from qualitycheck.canary._record import CanaryRecord, GuardrailWindow, RouteState, _Closed

__all__ = [
    "STALE_AFTER_INTERVALS",
    "STATUS_FORMAT_VERSION",
    "CanaryStatus",
    "StatusGuardrail",
    "StatusRoute",
    "StatusWindow",
    "build_status",
    "status_json_schema",
]

STATUS_FORMAT_VERSION = 1

STALE_AFTER_INTERVALS = 3
"""Intervals (beyond the longest one scrape may take) after which the last window no longer answers."""


class StatusGuardrail(_Closed):
    """One guardrail of one route in the last window (the gate's result, flattened for a JSON path)."""

    name: str
    passed: bool | None
    """true passed, false failed, null not evaluated (too little evidence, its source down, or no source at all)."""
    observed: float | int | list[str] | None
    threshold: float | int | str
    message: str
    evidence: dict[str, float] = Field(default_factory=dict)
    """What the window held for it: drafts, requests per side, pairs."""
    source: str = ""
    failing_windows: int = 0
    """Consecutive failing windows with enough evidence (the watcher's streak toward `trip_after`)."""


class StatusRoute(_Closed):
    """One watched route: the watcher's state and the last window's answer."""

    route: str
    state: Literal["armed", "tripped"]
    """tripped: taken off speculation after `trip_after` consecutive failing windows, until `--rearm ROUTE`."""
    tripped_by: str | None = None
    tripped_at: float | None = None
    passed: bool | None
    """The last window: true every guardrail of the route passed with enough evidence; false one failed; null otherwise."""
    reason: str
    """Why `passed` is what it is, in words (what a controller shows beside its measurement)."""
    guardrails: list[StatusGuardrail] = Field(default_factory=list)
    """The endpoint's guardrails, then the route's own thresholds (`routes.<route>`): a name may come twice, both judged."""


class StatusWindow(_Closed):
    """The last window decided, and whether it still answers for now."""

    start: float | None
    """Unix time; null before the first window."""
    end: float | None
    window_s: float
    interval_s: float
    """How often a window is decided: a controller reading faster reads the same window twice."""
    age_s: float | None
    """Seconds since the window ended, when this answer was made."""
    stale_after_s: float
    stale: bool
    """The last window is older than `stale_after_s`: every route's `passed` is null until a new one is decided."""
    decided: int = 0
    """Windows this watcher process decided."""


class CanaryStatus(_Closed):
    """The body of `GET /qc/status`."""

    format_version: int = STATUS_FORMAT_VERSION
    t: float
    """Unix time this answer was made."""
    ready: bool
    """A first window was decided (what `/qc/ready` answers 200 for)."""
    status: Literal["healthy", "failing", "not_evaluated", "tripped"] | None
    """The last window's status as canary.jsonl records it; null before the first window."""
    dry_run: bool
    trip_after: int
    window: StatusWindow
    routes: dict[str, StatusRoute]
    """route → its answer (a JSON path reads one as `{$.routes.<route>}`)."""
    alerts: list[str] = Field(default_factory=list)
    """The last window's alerts (a source down, an action failing)."""


def build_status(
    *,
    now: float,
    record: CanaryRecord | None,
    routes: Iterable[RouteState],
    guardrails: Mapping[str, Iterable[GuardrailWindow]],
    interval_s: float,
    window_s: float,
    stale_after_s: float,
    trip_after: int,
    dry_run: bool,
    decided: int,
) -> CanaryStatus:
    """The answer for `now`: each route's guardrails (the unwatched ones included, as not evaluated), its state, and
    the route's three-valued `passed`."""
    age = None if record is None else max(0.0, now - record.t)
    stale = age is not None and age > stale_after_s
    window = StatusWindow(
        start=None if record is None else record.t - record.window_s,
        end=None if record is None else record.t,
        window_s=window_s,
        interval_s=interval_s,
        age_s=age,
        stale_after_s=stale_after_s,
        stale=stale,
        decided=decided,
    )
    out: dict[str, StatusRoute] = {}
    for rs in routes:
        gs = [_flat(gw) for gw in guardrails.get(rs.route, ())]
        passed, reason = _route_answer(gs, record is not None, stale, age)
        out[rs.route] = StatusRoute(
            route=rs.route,
            state=rs.state,
            tripped_by=rs.tripped_by,
            tripped_at=rs.tripped_at,
            passed=passed,
            reason=reason,
            guardrails=gs,
        )
    return CanaryStatus(
        t=now,
        ready=record is not None,
        status=None if record is None else record.status,
        dry_run=dry_run,
        trip_after=trip_after,
        window=window,
        routes=out,
        alerts=[] if record is None else list(record.alerts),
    )


def _flat(gw: GuardrailWindow) -> StatusGuardrail:
    r = gw.result
    return StatusGuardrail(
        name=r.name,
        passed=r.passed,
        observed=r.observed,
        threshold=r.threshold,
        message=r.message,
        evidence=dict(gw.evidence),
        source=gw.source,
        failing_windows=gw.streak,
    )


def _route_answer(gs: list[StatusGuardrail], decided: bool, stale: bool, age: float | None) -> tuple[bool | None, str]:
    """A failure decides; any guardrail without an answer (or a window too old to answer) leaves the route undecided."""
    if not decided:
        return None, "no window decided yet"
    if stale:
        return None, f"the last window ended {age:.0f}s ago: the watcher has stopped deciding windows"
    failed = [g for g in gs if g.passed is False]
    if failed:
        return False, "; ".join(f"{g.name} failed: {g.message}" for g in failed)
    if not gs:
        return None, "no guardrail applies to this route"
    missing = [g for g in gs if g.passed is None]
    if missing:
        return None, "; ".join(f"{g.name}: {g.message}" for g in missing)
    return True, "every guardrail passed with enough evidence"


def status_json_schema() -> dict[str, Any]:
    """The JSON Schema (Draft 2020-12) of the body of `/qc/status`."""
    schema = CanaryStatus.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "qualitycheck canary /qc/status"
    return schema
