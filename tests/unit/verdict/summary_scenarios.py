"""Deterministic run stores that reach every section of summary.json, for the golden and schema tests.

Each scenario is a small store built without an endpoint (fixed URLs, fixed
timings, stored artifacts written verbatim), so the summary built from it is
the same on every machine. `golden/<name>.json` holds the summary.json of
each scenario as the dict-built summary wrote it, before summary.json became
a model: the model must write every one of those fields exactly as it was.
The golden files are built with `drift_features` in place of scoring's format
features, so they follow the summary's own fields, not the feature set.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from qualitycheck.core._config_file import Config
from qualitycheck.core._records import Response, Score, Usage
from qualitycheck.core._store import RunStore
from tests.unit.verdict.verdict_builders import make_store


def drift_features(text: str, finish_reason: str | None, completion_tokens: int | None) -> dict[str, Any]:
    """Two format features, a count and a bool, that stay put when scoring's feature set grows."""
    return {"chars": len(text), "empty": not text.strip()}


SEED_BLOCK = {
    "min_acceptance_rate": 0.55,
    "max_tpot_p95_regression": "10%",
    "max_error_rate": "1%",
    "max_quality_regression_cases": 0,
    "fallback_action": "disable_speculative_decoding_for_route",
}


def _rows() -> list[dict[str, Any]]:
    """qa: one regression among 9; json (route billing): clean; prose: differs with no check; same: identical, no check."""
    rows: list[dict[str, Any]] = [
        {"id": f"q{i}", "category": "qa", "checks": {"exact": {"baseline": "pass", "candidate": "pass"}}} for i in range(8)
    ]
    rows.append(
        {
            "id": "bad",
            "category": "qa",
            "texts": {"baseline": "yes", "candidate": "no"},
            "checks": {"exact": {"baseline": "pass", "candidate": "fail"}},
        }
    )
    rows += [
        {
            "id": f"j{i}",
            "category": "json",
            "route": "billing",
            "texts": {"baseline": '{"a": 1}', "candidate": '{"a": 1}'},
            "checks": {"json_parse": {"baseline": "pass", "candidate": "pass"}},
        }
        for i in range(3)
    ]
    rows.append({"id": "p0", "category": "prose", "texts": {"baseline": "A short answer.", "candidate": "A *short* answer."}})
    rows.append({"id": "s0", "category": "same"})
    return rows


def plain(folder: Path) -> tuple[RunStore, Config]:
    return make_store(folder, _rows()), Config()


def control(folder: Path) -> tuple[RunStore, Config]:
    rows = _rows()
    rows[3]["checks"]["exact"]["control"] = "fail"  # q3: the baseline disagrees with itself (flaky)
    rows[3]["checks"]["exact"]["candidate"] = "fail"
    rows[5]["texts"] = {"baseline": "x", "candidate": "y", "control": "z"}
    return make_store(folder, rows, targets=("baseline", "candidate", "control")), Config()


def repeats(folder: Path) -> tuple[RunStore, Config]:
    rows: list[dict[str, Any]] = [
        {"id": f"c{i}", "category": "qa", "checks": {"exact": {"baseline": "pass", "candidate": "pass"}}} for i in range(6)
    ]
    rows.append(
        {
            "id": "drop",
            "category": "qa",
            "texts": {"baseline": "a", "candidate": ["a", "b", "b"]},
            "checks": {"exact": {"baseline": "pass", "candidate": ["fail", "fail", "pass"]}},
        }
    )
    rows.append(
        {
            "id": "wobbly",
            "category": "qa",
            "texts": {"baseline": ["a", "b", "a"], "candidate": "b"},
            "checks": {"exact": {"baseline": ["pass", "fail", "pass"], "candidate": "fail"}},
        }
    )
    return make_store(folder, rows, repeats=3), Config(speculative_decoding_guardrails={"max_quality_regression_cases": 0})


def errors(folder: Path) -> tuple[RunStore, Config]:
    rows = _rows()
    rows[1]["texts"] = {"baseline": "ok", "candidate": None}
    rows[1]["checks"] = {"exact": {"baseline": "pass", "candidate": "error"}}
    rows[9]["texts"] = {"baseline": None, "candidate": '{"a": 1}'}
    rows[9]["checks"] = {}
    cfg = Config(
        speculative_decoding_guardrails={"max_error_rate": "5%", "max_quality_regression_cases": 1},
        routes={"billing": {"max_error_rate": "1%"}},
    )
    return make_store(folder, rows), cfg


def judge(folder: Path) -> tuple[RunStore, Config]:
    """Pairwise and rubric judge scores as the judge stage stores them (value win/loss/tie on the candidate)."""
    outcomes = {
        "w0": ("pass", "pass", "win", {"kind": "pairwise", "position_consistent": True}),
        "w1": ("pass", "fail", "loss", {"kind": "pairwise", "position_consistent": True}),
        "w2": ("pass", "pass", "tie", {"kind": "pairwise", "position_consistent": False}),
        "w3": ("pass", "pass", "tie", {"kind": "pairwise", "identical": True}),
        "r0": ("pass", "pass", "tie", {"kind": "single", "rubric_delta": -1.0}),
        "r1": ("pass", "pass", "tie", {"kind": "single", "identical": True}),
    }
    rows = [
        {
            "id": cid,
            "category": "summaries" if cid.startswith("w") else "explain",
            "texts": {"baseline": "b " + cid, "candidate": ("b " if o[2] == "tie" else "c ") + cid},
        }
        for cid, o in outcomes.items()
    ]
    store = make_store(folder, rows)
    scores = []
    for cid, (b, c, value, detail) in outcomes.items():
        scores.append(Score(case_id=cid, target="baseline", check="judge", status=b))
        scores.append(Score(case_id=cid, target="candidate", check="judge", status=c, value=value, detail=detail))
    store.replace_scores(scores, checks=["judge"])
    return store, Config()


PREFLIGHT = {
    "ok": False,
    "baseline": "http://baseline",
    "candidate": "http://candidate",
    "model": "m",
    "checks": [
        {"name": "served_model", "passed": True, "detail": "both serve 'm'", "baseline": None, "candidate": None},
        {"name": "tokenize", "passed": False, "detail": "token ids differ for 1 of 13 inputs", "baseline": None, "candidate": None},
        {"name": "generation_defaults", "passed": None, "detail": "not exposed", "baseline": None, "candidate": None},
        {"name": "engine_version", "passed": True, "detail": "both 0.9", "baseline": "0.9", "candidate": "0.9"},
    ],
    "mismatches": ["tokenize"],
}


def preflight(folder: Path) -> tuple[RunStore, Config]:
    store = make_store(folder, _rows())
    store.put_artifact("preflight", PREFLIGHT)
    return store, Config()


def not_evaluated(folder: Path) -> tuple[RunStore, Config]:
    """The seed's block on a run without /metrics or timings: acceptance and TPOT cannot be evaluated."""
    cfg = Config(
        speculative_decoding_guardrails=SEED_BLOCK,
        routes={"qa": {"max_quality_regression_cases": 1}},
        non_inferiority_margin={"exact": 0.05},
    )
    return make_store(folder, _rows()), cfg


def _window(category: str, start: float, sent: int, drafted: tuple[float, float, float]) -> dict[str, Any]:
    """One /metrics window as generation records it: counters before and after `sent` requests per side."""

    def scrape(t: float, spec: dict[str, Any] | None, tokens: float) -> dict[str, Any]:
        return {
            "url": "http://x/metrics",
            "t": t,
            "ok": True,
            "error": None,
            "spec": spec,
            "generation_tokens": tokens,
            "requests_finished": tokens,
        }

    drafts, draft_tokens, accepted = drafted
    before = {"drafts": 0.0, "draft_tokens": 0.0, "accepted_tokens": 0.0, "per_position": {"0": 0.0, "1": 0.0}}
    after = {
        "drafts": drafts,
        "draft_tokens": draft_tokens,
        "accepted_tokens": accepted,
        "per_position": {"0": accepted * 0.6, "1": accepted * 0.4},
    }
    stats = {"requests": sent, "attempts": sent, "ok": sent, "output_tokens": sent * 4}
    return {
        "category": category,
        "before": {"baseline": scrape(start, None, 0.0), "candidate": scrape(start, before, 0.0)},
        "after": {"baseline": scrape(start + 1, None, sent * 4.0), "candidate": scrape(start + 1, after, sent * 4.0)},
        "sent": {"baseline": stats, "candidate": stats},
    }


def serving(folder: Path) -> tuple[RunStore, Config]:
    """Streamed timings, a GPU price, /metrics windows per category and tags that slice the run."""
    rows = _rows()
    for i, r in enumerate(rows):
        r.setdefault("route", r["category"])
        if i % 2:
            r["texts"] = {"baseline": "one two three four", "candidate": "one two three four"}
    store = make_store(folder, rows)
    for i, r in enumerate(rows):
        for k, side in enumerate(("baseline", "candidate")):
            text = r.get("texts", {}).get(side, "same")
            ttft = 0.010 + 0.001 * i + 0.002 * k
            times = [ttft + 0.005 * j * (1 + k) for j in range(4)]
            store.put_response(
                Response(
                    case_id=r["id"],
                    target=side,
                    fingerprint="f",
                    text=text,
                    finish_reason="stop",
                    usage=Usage(prompt_tokens=12 + i, completion_tokens=4),
                    ttft_s=ttft,
                    chunk_times=times,
                    e2e_s=times[-1] + 0.001,
                    started_at=100.0 + i,
                )
            )
    store.put_artifact("config", {"run": {"gpu_hour_usd": 2.5}})
    store.put_artifact("metrics_windows", [_window("qa", 100.0, 9, (9.0, 27.0, 15.0)), _window("json", 110.0, 3, (3.0, 9.0, 2.0))])
    cfg = Config(speculative_decoding_guardrails=SEED_BLOCK)
    return store, cfg


SCENARIOS: dict[str, Callable[[Path], tuple[RunStore, Config]]] = {
    "plain": plain,
    "control": control,
    "repeats": repeats,
    "errors": errors,
    "judge": judge,
    "preflight": preflight,
    "not_evaluated": not_evaluated,
    "serving": serving,
}
