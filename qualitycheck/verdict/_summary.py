"""summary.json (Contract 3): what CI gates and users script against.

Built only from the run store (and the config's guardrails), so `report` and
`gate` can rebuild it without calling an endpoint. Keys are only ever added,
never renamed. Stages owned by other modules (latency, acceptance, preflight,
judge) are merged in when their module is present; a missing one leaves its
guardrail "not evaluated", never passed.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from qualitycheck.verdict._compare import compare_run
from qualitycheck.core._config import Config
from qualitycheck.verdict._digest import RunDigest, TextTally
from qualitycheck.verdict._gate import ALL_ROUTES, Evidence, build_rules, decide, parse_guardrails
from qualitycheck.core._records import FORMAT_VERSION
from qualitycheck.verdict._stats import CheckStats, format_drift, quality_stats
from qualitycheck.core._store import RunStore

__all__ = ["build_summary", "write_summary", "SUMMARY_NAME"]

SUMMARY_NAME = "summary.json"


def _targets(store: RunStore) -> dict[str, Any]:
    return {n: {"url": t["url"], "model": t["model"], **({"label": t["label"]} if t.get("label") else {})}
            for n, t in store.manifest.get("targets", {}).items()}


def _optional(module: str, name: str) -> Callable[..., Any] | None:
    """A function another stage provides, or None when that module is not in this tree."""
    try:
        mod = importlib.import_module(module)
    except ImportError:
        return None
    return getattr(mod, name, None)


def _errors(store: RunStore) -> dict[str, Any]:
    counts = store.count_responses()
    return {t: {"count": v["errors"], "requests": v["requests"],
                "rate": v["errors"] / v["requests"] if v["requests"] else 0.0} for t, v in counts.items()}


def _category_noise(t: TextTally, cells: dict[str, CheckStats]) -> dict[str, Any]:
    """The category's A/A self-disagreement: text divergence and per-check flip rates.

    With a control, `divergence_p_value` tests (McNemar exact, paired per
    case) whether the candidate diverges from the baseline more often than
    the control does: text divergence beyond the noise floor.
    """
    if t.aa_pairs:
        by, pairs, same = "control", t.aa_pairs, t.aa_identical
    elif t.rep_pairs:
        by, pairs, same = "repeats", t.rep_pairs, t.rep_identical
    else:
        return {"measured_by": None, "text_divergence_rate": None, "check_flip_rates": {}}
    out: dict[str, Any] = {
        "measured_by": by,
        "text_divergence_rate": 1 - same / pairs,
        "check_flip_rates": {n: s.noise.flip_rate for n, s in cells.items() if s.noise.measured_by},
    }
    if t.paired:
        from statsmodels.stats.contingency_tables import mcnemar

        cand_only, ctrl_only = t.candidate_only, t.control_only
        out["candidate_divergence_rate"] = t.paired_candidate_diverged / t.paired
        out["divergence_p_value"] = (float(mcnemar([[0, cand_only], [ctrl_only, 0]], exact=True).pvalue)
                                     if cand_only + ctrl_only else 1.0)
    return out


def _category_verdict(cells: dict[str, CheckStats], failed_routes: set[str], identical_rate: float | None) -> tuple[str, str]:
    """fail on a counted regression in a failed route or an inferior check; inconclusive when nothing decides."""
    reasons = []
    for s in cells.values():
        if s.regressions_beyond_floor and failed_routes & set(s.routes):
            reasons.append(f"{s.check}: {s.regressions_beyond_floor} regression(s) beyond the noise floor")
        if s.non_inferiority == "inferior":
            reasons.append(f"{s.check}: pass rate worse than the non-inferiority margin {s.margin}")
    if reasons:
        return "fail", "; ".join(reasons)
    undecided = [s.check for s in cells.values() if s.non_inferiority == "inconclusive"]
    if undecided:
        return "inconclusive", f"too few cases to show non-inferiority for {', '.join(undecided)}"
    if not any(s.n for s in cells.values()):
        if identical_rate == 1.0:
            return "pass", "no checks, but every answer is identical to the baseline's"
        return "inconclusive", "no check decides these cases and the answers differ from the baseline's"
    return "pass", "no regression beyond the noise floor"


def build_summary(store: RunStore, cfg: Config | None = None) -> dict[str, Any]:
    """The whole verdict from the store: comparisons, statistics, guardrails, fallback, sign-off.

    The comparisons are recomputed (and stored) on every call, streaming into
    a digest, so the verdict always follows the current scores and memory
    stays flat in the number of cases.
    """
    cfg = cfg or Config()
    guard = parse_guardrails(cfg)
    digest = RunDigest()
    compare_run(store, consume=digest.add)
    stats = quality_stats(digest.outcomes, margins=cfg.non_inferiority_margin, seed=cfg.run.seed)
    drift = format_drift(digest.drift)
    text = digest.text
    errors = _errors(store)

    latency_fn = _optional("qualitycheck.serving", "latency_summary")
    acceptance_fn = _optional("qualitycheck.serving", "acceptance_summary")
    judge_fn = _optional("qualitycheck.judge._judge", "judge_summary")
    slices_fn = _optional("qualitycheck.serving", "slices_summary")
    latency = latency_fn(store) if latency_fn else None
    acceptance = acceptance_fn(store) if acceptance_fn else None
    judge = judge_fn(store) if judge_fn else {}

    case_counts = store.category_routes()
    category_routes = {cat: set(routes) for cat, routes in case_counts.items()}
    routes_in_run = set().union(*category_routes.values()) if category_routes else set()

    preflight = store.artifact("preflight")
    ev = Evidence(errors=errors, route_errors=digest.route_errors, latency=latency, acceptance=acceptance,
                  preflight=preflight)
    repeats = store.manifest.get("repeats", 1)
    for cat, t in text.items():
        if t.pairs and t.pairs == t.cases * repeats and t.identical == t.pairs:
            ev.scored_routes |= category_routes.get(cat, set())  # identical answers: no check can differ
    for cells in stats.values():
        for s in cells.values():
            if s.n:
                ev.scored_routes |= {c for c in category_routes.get(s.category, set())}
            if not s.regressions:
                continue  # regressions within the allowance are still listed, as tolerated
            for route, ids in s.routes.items():
                per = ev.regressions.setdefault(route, {})
                for i in ids:
                    per.setdefault(i, []).append(s.check)
                share = s.allowance if len(s.routes) == 1 else s.allowance * len(ids) // len(s.regressions)
                ev.allowances[route] = max(ev.allowances.get(route, 0), share)
    results = [rule.evaluate(ev) for rule in build_rules(guard, routes_in_run, preflight_ran=preflight is not None)]
    failed_routes = {r.route for r in results if r.passed is False and r.name == "max_quality_regression_cases"}
    if ALL_ROUTES in failed_routes:
        failed_routes |= routes_in_run

    categories: dict[str, Any] = {}
    verdicts: dict[str, str] = {}
    for cat in sorted(category_routes):
        t = digest.text_json(cat)
        cells = stats.get(cat, {})
        verdict, why = _category_verdict(cells, failed_routes, t["identical_rate"])
        verdicts[cat] = verdict
        checks = {name: s.to_json() for name, s in cells.items()}
        if cat in judge:
            checks.setdefault("judge", {}).update(judge[cat])
        categories[cat] = {
            "cases": sum(case_counts[cat].values()),
            "routes": sorted(category_routes[cat]),
            **t,
            "noise_floor": _category_noise(text.get(cat) or TextTally(), cells),
            "checks": checks,
            "format_drift": drift.get(cat, {}),
            "verdict": verdict,
            "verdict_reason": why,
        }
    verdict, fallback = decide(results, verdicts, allow_not_evaluated=cfg.allow_not_evaluated,
                               fallback_action=guard.fallback_action, category_routes=category_routes)
    not_evaluated = [f"guardrail {r.name}" + (f" [{r.route}]" if r.route != ALL_ROUTES else "") + f": {r.message.removeprefix('not evaluated: ')}"
                     for r in results if r.passed is None]
    not_evaluated += [f"category {cat}: {c['verdict_reason']}" for cat, c in categories.items() if c["verdict"] == "inconclusive"]
    not_evaluated += [f"guardrail {name}: not configured, so not gated (add it to speculative_decoding_guardrails)"
                      for name in ("min_acceptance_rate", "max_tpot_p95_regression") if name not in guard.thresholds]
    if not any(s.noise.measured_by for cells in stats.values() for s in cells.values()):
        not_evaluated.append("noise floor: no control target and one repeat, so every pass→fail flip counts as a regression "
                             "(add --control or --repeats to measure how often the baseline disagrees with itself)")
    summary: dict[str, Any] = {
        "format_version": FORMAT_VERSION,
        "verdict": verdict,
        "cases": store.case_count(),
        "targets": _targets(store),
        "repeats": store.manifest.get("repeats", 1),
        "categories": categories,
        "errors": errors,
        "latency": latency if latency is not None else {},
        "acceptance": acceptance if acceptance is not None else {"rate": None, "mean_accepted_length": None,
                                                                 "draft_tokens": None, "accepted_tokens": None},
        "preflight": preflight,
        "slices": slices_fn(store) if slices_fn else {},
        "guardrails": [r.to_json() for r in results],
        "allow_not_evaluated": cfg.allow_not_evaluated,
        "fallback": fallback,
        "not_evaluated": not_evaluated,
        "seed": cfg.run.seed,
    }
    from qualitycheck.report._signoff import render_signoff

    summary["signoff"] = render_signoff(summary)
    return summary


def write_summary(folder: Path, summary: dict[str, Any]) -> Path:
    path = folder / SUMMARY_NAME
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(summary, indent=2, sort_keys=False, default=str) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path
