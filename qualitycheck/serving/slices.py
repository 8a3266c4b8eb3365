"""Results sliced by what a case looks like, besides its category.

Speculation breaks unevenly: long outputs drift more, sampled cases differ by
design, a system prompt changes the template path, one route or tenant may
carry all the damage. Each slice reports its cases, how often the two sides
answered identically, and every check's pass rate on both sides, read from
the store's scores. Lengths come from the baseline's usage (the reference
side); a case without a baseline answer falls into the "unknown" bucket.
"""

from __future__ import annotations

from typing import Any

from ..cases import Case
from ..store import RunStore

__all__ = ["OUTPUT_BUCKETS", "PROMPT_BUCKETS", "TEMPERATURE_BUCKETS", "bucket", "slices_summary"]

OUTPUT_BUCKETS = ((32, "1-32"), (128, "33-128"), (512, "129-512"), (None, ">512"))
PROMPT_BUCKETS = ((128, "1-128"), (512, "129-512"), (2048, "513-2048"), (None, ">2048"))
TEMPERATURE_BUCKETS = ((0.0, "0 (greedy)"), (0.5, "(0, 0.5]"), (1.0, "(0.5, 1]"), (None, ">1"))


def bucket(value: float | None, edges: tuple[tuple[float | None, str], ...]) -> str:
    """The label of the first bucket whose upper edge (inclusive) holds `value`."""
    if value is None:
        return "unknown"
    for upper, label in edges:
        if upper is None or value <= upper:
            return label
    return edges[-1][1]


def _slice_keys(case: Case, prompt_tokens: int | None, output_tokens: int | None) -> dict[str, str]:
    temp = case.params.get("temperature", 0.0)
    keys = {
        "output_length": bucket(output_tokens, OUTPUT_BUCKETS),
        "prompt_length": bucket(prompt_tokens, PROMPT_BUCKETS),
        "temperature": bucket(float(temp) if isinstance(temp, (int, float)) else None, TEMPERATURE_BUCKETS),
        "system_prompt": "yes" if case.messages and any(m.get("role") in ("system", "developer") for m in case.messages) else "no",
        "route": case.route,
    }
    for k, v in case.tags.items():
        if k != "route":
            keys[f"tag:{k}"] = v
    return keys


def slices_summary(store: RunStore) -> dict[str, dict[str, dict[str, Any]]]:
    """summary.json `slices`: {dimension: {bucket: {cases, identical_rate, checks: {check: {...}}}}}."""
    cases = {c.id: c for c in store.cases()}
    lengths: dict[str, tuple[int | None, int | None]] = {}
    identical: dict[str, list[bool]] = {}
    for case_id, rs in store.responses_by_case():
        by_rep: dict[int, dict[str, Any]] = {}
        for r in rs:
            by_rep.setdefault(r.repeat, {})[r.target] = r
            if r.target == "baseline" and r.ok and case_id not in lengths:
                lengths[case_id] = (r.usage.prompt_tokens, r.usage.completion_tokens)
        for pair in by_rep.values():
            b, c = pair.get("baseline"), pair.get("candidate")
            if b is not None and c is not None and b.ok and c.ok:
                identical.setdefault(case_id, []).append(b.text == c.text)
    passes: dict[tuple[str, str, str], list[int]] = {}  # (case, check, side) -> [pass, decided]
    for s in store.scores():
        if s.status not in ("pass", "fail"):
            continue
        cell = passes.setdefault((s.case_id, s.check, s.target), [0, 0])
        cell[0] += s.status == "pass"
        cell[1] += 1
    per_case_checks: dict[str, dict[str, dict[str, list[int]]]] = {}
    for (case_id, check, side), cell in passes.items():
        per_case_checks.setdefault(case_id, {}).setdefault(check, {})[side] = cell

    out: dict[str, dict[str, dict[str, Any]]] = {}
    acc: dict[tuple[str, str], dict[str, Any]] = {}
    for case_id, case in cases.items():
        prompt_tokens, output_tokens = lengths.get(case_id, (None, None))
        for dim, label in _slice_keys(case, prompt_tokens, output_tokens).items():
            a = acc.setdefault((dim, label), {"cases": 0, "pairs": 0, "identical": 0, "checks": {}})
            a["cases"] += 1
            same = identical.get(case_id, [])
            a["pairs"] += len(same)
            a["identical"] += sum(same)
            for check, sides in per_case_checks.get(case_id, {}).items():
                ch = a["checks"].setdefault(check, {})
                for side, (p, n) in sides.items():
                    tot = ch.setdefault(side, [0, 0])
                    tot[0] += p
                    tot[1] += n
    for (dim, label), a in sorted(acc.items()):
        checks = {}
        for check, sides in sorted(a["checks"].items()):
            checks[check] = {f"{side}_pass_rate": (p / n if n else None) for side, (p, n) in sorted(sides.items())}
            checks[check]["n"] = max(n for _, n in sides.values())
        out.setdefault(dim, {})[label] = {
            "cases": a["cases"],
            "identical_rate": a["identical"] / a["pairs"] if a["pairs"] else None,
            "checks": checks,
        }
    return out
