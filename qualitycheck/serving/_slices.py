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

from qualitycheck.core._cases import Case
from qualitycheck.core._store import CaseRecords, RunStore

__all__ = ["OUTPUT_BUCKETS", "PROMPT_BUCKETS", "TEMPERATURE_BUCKETS", "SliceTally", "bucket", "slices_summary"]

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


class SliceTally:
    """summary.json `slices`, folded one case at a time: memory is the number of buckets, not of cases."""

    def __init__(self) -> None:
        self._acc: dict[tuple[str, str], dict[str, Any]] = {}

    def add(self, rec: CaseRecords) -> None:
        prompt_tokens = output_tokens = None
        for r in rec.responses:  # the first usable baseline repeat gives the lengths
            if r.target == "baseline" and r.ok:
                prompt_tokens, output_tokens = r.usage.prompt_tokens, r.usage.completion_tokens
                break
        pairs = identical = 0
        by_rep: dict[int, dict[str, Any]] = {}
        for r in rec.responses:
            by_rep.setdefault(r.repeat, {})[r.target] = r
        for pair in by_rep.values():
            b, c = pair.get("baseline"), pair.get("candidate")
            if b is not None and c is not None and b.ok and c.ok:
                pairs += 1
                identical += b.answer == c.answer
        decided: dict[tuple[str, str], list[int]] = {}  # (check, side) -> [pass, decided], in the order first seen
        for sc in rec.scores:
            if sc.status == "pass" or sc.status == "fail":
                cell = decided.get((sc.check, sc.target))
                if cell is None:
                    cell = decided[sc.check, sc.target] = [0, 0]
                cell[0] += sc.status == "pass"
                cell[1] += 1
        acc = self._acc
        for key in _slice_keys(rec.case, prompt_tokens, output_tokens).items():
            a = acc.get(key)
            if a is None:
                a = acc[key] = {"cases": 0, "pairs": 0, "identical": 0, "checks": {}}
            a["cases"] += 1
            a["pairs"] += pairs
            a["identical"] += identical
            per_check = a["checks"]
            for (check, side), (p, n) in decided.items():
                tot = per_check.setdefault(check, {}).get(side)
                if tot is None:
                    tot = per_check[check][side] = [0, 0]
                tot[0] += p
                tot[1] += n

    def summary(self) -> dict[str, dict[str, dict[str, Any]]]:
        """{dimension: {bucket: {cases, identical_rate, checks: {check: {...}}}}}."""
        out: dict[str, dict[str, dict[str, Any]]] = {}
        for (dim, label), a in sorted(self._acc.items()):
            checks_out = {}
            for check, sides in sorted(a["checks"].items()):
                checks_out[check] = {f"{side}_pass_rate": (p / n if n else None) for side, (p, n) in sorted(sides.items())}
                checks_out[check]["n"] = max(n for _, n in sides.values())
            out.setdefault(dim, {})[label] = {
                "cases": a["cases"],
                "identical_rate": a["identical"] / a["pairs"] if a["pairs"] else None,
                "checks": checks_out,
            }
        return out


def slices_summary(store: RunStore) -> dict[str, dict[str, dict[str, Any]]]:
    """summary.json `slices` of a run folder on its own (`SliceTally` over one walk of the store)."""
    tally = SliceTally()
    for rec in store.by_case():
        tally.add(rec)
    return tally.summary()
