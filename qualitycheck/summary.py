"""summary.json (Contract 3): what CI gates and users script against.

Built only from the run store, so `report` and `gate` can rebuild it without
calling an endpoint. Keys are only ever added, never renamed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .records import FORMAT_VERSION
from .store import RunStore

__all__ = ["build_summary", "write_summary", "SUMMARY_NAME"]

SUMMARY_NAME = "summary.json"


def _targets(store: RunStore) -> dict[str, Any]:
    return {n: {"url": t["url"], "model": t["model"], **({"label": t["label"]} if t.get("label") else {})}
            for n, t in store.manifest.get("targets", {}).items()}


def build_summary(store: RunStore) -> dict[str, Any]:
    cases = store.cases()
    by_cat: dict[str, dict[str, Any]] = {}
    cat_of = {c.id: c.category for c in cases}
    for c in cases:
        by_cat.setdefault(c.category, {"cases": 0, "pairs": 0, "identical": 0})["cases"] += 1
    for case_id, rs in store.responses_by_case():
        sides: dict[int, dict[str, Any]] = {}
        for r in rs:
            sides.setdefault(r.repeat, {})[r.target] = r
        for pair in sides.values():
            b, c = pair.get("baseline"), pair.get("candidate")
            if b is None or c is None or not b.ok or not c.ok:
                continue
            d = by_cat[cat_of[case_id]]
            d["pairs"] += 1
            d["identical"] += b.text == c.text
    counts = store.count_responses()
    errors = {t: {"count": v["errors"], "requests": v["requests"],
                  "rate": v["errors"] / v["requests"] if v["requests"] else 0.0} for t, v in counts.items()}
    categories = {}
    all_identical = True
    for cat, d in sorted(by_cat.items()):
        rate = d["identical"] / d["pairs"] if d["pairs"] else None
        ok = d["pairs"] == d["cases"] * store.manifest.get("repeats", 1) and d["identical"] == d["pairs"]
        all_identical &= ok
        categories[cat] = {"cases": d["cases"], "identical_rate": rate, "checks": {}, "format_drift": {},
                           "verdict": "pass" if ok else "fail"}
    verdict = "pass" if all_identical and not any(e["count"] for e in errors.values()) else "fail"
    return {
        "format_version": FORMAT_VERSION,
        "verdict": verdict,
        "cases": len(cases),
        "targets": _targets(store),
        "categories": categories,
        "errors": errors,
    }


def write_summary(folder: Path, summary: dict[str, Any]) -> Path:
    path = folder / SUMMARY_NAME
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(summary, indent=2, sort_keys=False, default=str) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path
