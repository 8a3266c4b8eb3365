"""Speculative-decoding acceptance from the /metrics windows stored with a run.

vLLM's `vllm:spec_decode_*` counters are global to the server, so the run
attributes them by deltas: generation scrapes every target before and after
it sends (a "window"; one per category when acceptance is wanted per
category) and stores the windows (`generation._metrics`). This module only
reads them back: no HTTP here. Each window also records what we sent in it,
so that counters moved by someone else's traffic are caught (their request
or generated-token count grew by more than ours) and reported as a warning
rather than silently mixed in. A server without /metrics gives None values:
the gate then reports `min_acceptance_rate` as not evaluated, never as passed.

Definitions (vLLM's): acceptance rate = accepted tokens / draft tokens;
mean accepted length = 1 + accepted tokens / drafts (tokens emitted per
verification step, the bonus token included); acceptance at position i =
tokens accepted at draft position i / drafts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from qualitycheck.core._records import MetricsSnapshot, MetricsWindow, MetricsWindows, SentCounts, SpecCounters
from qualitycheck.core._store import RunStore

__all__ = [
    "acceptance_from_windows",
    "acceptance_rates",
    "acceptance_summary",
]


# ---------------------------------------------------------------- deltas


def _delta(before: MetricsSnapshot, after: MetricsSnapshot | None) -> tuple[dict[str, Any] | None, str | None]:
    """Counter deltas of one target over one window, or why there are none."""
    if not before.ok or after is None or not after.ok:
        why = before.error if not before.ok else after.error if after is not None else "no scrape after the window"
        return None, f"/metrics unavailable ({why})"
    out: dict[str, Any] = {}
    if before.generation_tokens is not None and after.generation_tokens is not None:
        out["generation_tokens"] = after.generation_tokens - before.generation_tokens
    if before.requests_finished is not None and after.requests_finished is not None:
        out["requests_finished"] = after.requests_finished - before.requests_finished
    sa = after.spec
    if sa is None:
        out["spec"] = None
        return out, None
    sb = before.spec or SpecCounters()  # counters that appeared during the window started from zero
    spec: dict[str, Any] = {
        "drafts": sa.drafts - sb.drafts,
        "draft_tokens": sa.draft_tokens - sb.draft_tokens,
        "accepted_tokens": sa.accepted_tokens - sb.accepted_tokens,
        "per_position": {p: v - sb.per_position.get(p, 0.0) for p, v in sa.per_position.items()},
    }
    if any(v < 0 for k, v in spec.items() if k != "per_position") or any(v < 0 for v in out.values() if isinstance(v, float)):
        return None, "counters went down during the run (server restarted?)"
    out["spec"] = spec
    return out, None


def _other_traffic(d: dict[str, Any], sent: SentCounts) -> str | None:
    """A reason to believe someone else's requests moved this server's counters, or None."""
    if not sent.requests:
        return None
    finished = d.get("requests_finished")
    if finished is not None and finished > sent.attempts:
        return f"server finished {finished:g} requests while we sent {sent.attempts}"
    gen = d.get("generation_tokens")
    ours = sent.output_tokens
    failed = sent.attempts - sent.ok
    if gen is not None and ours and not failed and gen > ours * 1.01 + 1:
        return f"server generated {gen:g} tokens while our answers hold {ours}"
    return None


def _rates(spec: dict[str, Any]) -> dict[str, Any]:
    drafts, draft_tokens, accepted = spec["drafts"], spec["draft_tokens"], spec["accepted_tokens"]
    positions = sorted(spec["per_position"], key=lambda p: int(p) if str(p).isdigit() else 0)
    return {
        "rate": accepted / draft_tokens if draft_tokens else None,
        "mean_accepted_length": 1 + accepted / drafts if drafts else None,
        "draft_tokens": int(draft_tokens),
        "accepted_tokens": int(accepted),
        "drafts": int(drafts),
        "by_position": [spec["per_position"][p] / drafts if drafts else None for p in positions],
    }


def acceptance_rates(
    drafts: float, draft_tokens: float, accepted_tokens: float, per_position: dict[str, float] | None = None
) -> dict[str, Any]:
    """The acceptance figures (rate, mean accepted length, by position) from counter deltas a caller holds itself.

    The live canary takes its deltas over a sliding window rather than from
    stored windows; the definitions stay these (module docstring).
    """
    spec = {"drafts": drafts, "draft_tokens": draft_tokens, "accepted_tokens": accepted_tokens, "per_position": dict(per_position or {})}
    return _rates(spec) if draft_tokens > 0 else _empty()


def _empty() -> dict[str, Any]:
    return {"rate": None, "mean_accepted_length": None, "draft_tokens": None, "accepted_tokens": None, "drafts": None, "by_position": []}


def _add(total: dict[str, Any], spec: dict[str, Any]) -> None:
    for k in ("drafts", "draft_tokens", "accepted_tokens"):
        total[k] = total.get(k, 0.0) + spec[k]
    pp = total.setdefault("per_position", {})
    for p, v in spec["per_position"].items():
        pp[p] = pp.get(p, 0.0) + v


def acceptance_from_windows(windows: Sequence[MetricsWindow], side: str = "candidate", reference: str = "baseline") -> dict[str, Any]:
    """Contract 3 `acceptance` from the recorded windows (see the module docstring for definitions)."""
    warnings: list[str] = []
    total: dict[str, Any] = {}
    by_cat: dict[str, dict[str, Any]] = {}
    candidate_speculating = False
    reference_speculating = False
    unavailable = False
    used = 0
    for w in windows:
        sent = w.sent.get(side)
        if sent is None or not sent.requests:
            continue  # a resumed run that had nothing left to send
        label = f" (category {w.category})" if w.category else ""
        if reference in w.before:
            d_ref, _ = _delta(w.before[reference], w.after.get(reference))
            if d_ref and d_ref.get("spec") and d_ref["spec"]["draft_tokens"] > 0:
                reference_speculating = True
        if side not in w.before:
            continue
        d, why = _delta(w.before[side], w.after.get(side))
        if d is None:
            unavailable = True
            warnings.append(f"{side} {why}{label}: acceptance not measured")
            continue
        if (reason := _other_traffic(d, sent)) is not None:
            warnings.append(f"{side} counters moved by other traffic{label}: {reason}; acceptance includes it")
        if d["spec"] is None:
            continue
        used += 1
        if d["spec"]["draft_tokens"] > 0:
            candidate_speculating = True
        _add(total, d["spec"])
        if w.category:
            _add(by_cat.setdefault(w.category, {}), d["spec"])
    if total and total["draft_tokens"] > 0:
        out = _rates(total)
    else:
        out = _empty()
        if used and not unavailable:
            warnings.append(f"{side} exposes spec-decode counters but drafted nothing: speculation inactive")
        elif not unavailable and any(w.sent.get(side, SentCounts()).requests for w in windows):
            warnings.append(
                f"{side} /metrics has no spec-decode counters (vllm:spec_decode_* or llamacpp:spec_decode_*): speculative decoding is not active there"
            )
    if by_cat:
        out["by_category"] = {c: (_rates(s) if s["draft_tokens"] > 0 else _empty()) for c, s in sorted(by_cat.items())}
    if reference_speculating:
        warnings.append(f"{reference} is speculating too (its spec-decode counters moved): the comparison is not against plain decoding")
    out["warnings"] = warnings
    out["speculating"] = candidate_speculating
    out["baseline_speculating"] = reference_speculating
    return out


def acceptance_summary(store: RunStore) -> dict[str, Any]:
    """summary.json `acceptance`; all values None with a warning when nothing was scraped."""
    windows = store.record_or_empty(MetricsWindows).windows
    if not windows:
        out = _empty()
        out.update(
            warnings=["no /metrics scrapes recorded for this run: acceptance not measured"], speculating=False, baseline_speculating=False
        )
        return out
    return acceptance_from_windows(windows)
