"""The watcher's answers to Flagger's webhooks (`POST /qc/flagger/<type>`).

Flagger (`pkg/controller/webhook.go`, v1.44) POSTs `{name, namespace, phase,
checksum, metadata}` to a webhook's URL and reads only the status code: 200,
201 or 202 is yes, anything else (a timeout and a refused connection too) is
no, and a refusal's body lands in the Canary's events. The payload does not
say which hook is calling, so the type is the last segment of the URL. What
yes and no do depends on the type (`pkg/controller/scheduler_hooks.go`);
each answer below is chosen for what Flagger then does:

| type | Flagger on no | the watcher says yes when |
|---|---|---|
| confirm-rollout | waits before scaling the canary up | the route is not tripped |
| pre-rollout | counts a failed check | the route is not tripped |
| rollout | counts a failed check (rolls back at `threshold`) | not tripped and the last window did not fail (not evaluated is not a failure) |
| confirm-traffic-increase | holds the weight | not tripped and the last window did not fail |
| confirm-promotion | waits in WaitingPromotion | armed and every guardrail passed with enough evidence |
| rollback | carries on (yes rolls back) | the route is tripped |
| post-rollout, event | logs it | always (the call is written to the watcher's log) |

The route is the webhook's `metadata.route`, else the canary's name. A route
the watcher does not watch is a 404, so a misnamed route holds a rollout
instead of passing it. No is 403, as Flagger's own load tester answers a
closed gate.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from qualitycheck.canary._status import CanaryStatus, StatusRoute

__all__ = ["HOOKS", "FlaggerAnswer", "FlaggerPayload", "answer_hook", "parse_payload"]

HOOKS = (
    "confirm-rollout",
    "pre-rollout",
    "rollout",
    "confirm-traffic-increase",
    "confirm-promotion",
    "post-rollout",
    "rollback",
    "event",
)
"""The webhook types of Flagger's Canary CRD (`spec.analysis.webhooks[].type`; its empty type is `rollout`)."""

YES, NO, BAD_PAYLOAD, UNKNOWN = 200, 403, 400, 404


class FlaggerPayload(BaseModel):
    """What Flagger POSTs (`CanaryWebhookPayload`); fields it may add later are ignored."""

    model_config = ConfigDict(extra="ignore")

    name: str
    namespace: str = ""
    phase: str = ""
    checksum: str = ""
    metadata: dict[str, str] = {}


@dataclass(frozen=True)
class FlaggerAnswer:
    status: int
    body: dict[str, Any]
    log: str | None = None
    """A line for the watcher's log (post-rollout and event calls, which decide nothing)."""


def parse_payload(raw: bytes) -> FlaggerPayload | str:
    """The payload, or why it is not one (answered 400)."""
    try:
        return FlaggerPayload.model_validate(json.loads(raw))
    except (ValueError, ValidationError) as exc:
        first = str(exc).splitlines()
        return f"not a Flagger webhook payload ({first[0] if first else exc}): expected JSON with name, namespace, phase, metadata"


def answer_hook(hook: str, payload: FlaggerPayload, status: CanaryStatus) -> FlaggerAnswer:
    """The answer to one call of a webhook of type `hook` (one of `HOOKS`)."""
    route_name = payload.metadata.get("route") or payload.name
    canary = f"{payload.name}.{payload.namespace}" if payload.namespace else payload.name
    base = {"hook": hook, "canary": canary, "route": route_name}
    if hook in ("post-rollout", "event"):
        said = payload.metadata.get("eventMessage", "")
        line = f"qualitycheck canary: flagger {hook}: {canary} {payload.phase}" + (f": {said}" if said else "")
        return FlaggerAnswer(YES, {**base, "ok": True, "reason": "acknowledged"}, log=line)
    route = status.routes.get(route_name)
    if route is None:
        watched = ", ".join(sorted(status.routes)) or "none"
        reason = f"route {route_name!r} is not watched (watched: {watched}); set the webhook's metadata.route"
        return FlaggerAnswer(UNKNOWN, {**base, "ok": False, "reason": reason})
    ok, reason = _decide(hook, route)
    return FlaggerAnswer(YES if ok else NO, {**base, "ok": ok, "reason": reason, "state": route.state, "passed": route.passed})


def _decide(hook: str, route: StatusRoute) -> tuple[bool, str]:
    tripped = route.state == "tripped"
    trip = f"route {route.route} is tripped (by {route.tripped_by}); re-arm it with `qualitycheck canary --rearm {route.route}`"
    if hook == "rollback":
        return (True, trip) if tripped else (False, f"route {route.route} is armed: no rollback")
    if tripped:
        return False, trip
    if hook in ("confirm-rollout", "pre-rollout"):
        return True, f"route {route.route} is armed"
    if hook in ("rollout", "confirm-traffic-increase"):
        if route.passed is False:
            return False, route.reason
        return True, route.reason if route.passed else f"not a failure: {route.reason}"
    # confirm-promotion
    return (True, route.reason) if route.passed is True else (False, route.reason)
