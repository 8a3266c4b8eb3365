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


def _slice_keys(case: Case, prompt_tokens: int | None, output_tokens: int | None) -> tuple[tuple[str, str], ...]:
    """The case's bucket in every dimension, as (dimension, label) pairs."""
    temp = case.params.get("temperature", 0.0)
    keys = [
        ("output_length", bucket(output_tokens, OUTPUT_BUCKETS)),
        ("prompt_length", bucket(prompt_tokens, PROMPT_BUCKETS)),
        ("temperature", bucket(float(temp) if isinstance(temp, (int, float)) else None, TEMPERATURE_BUCKETS)),
        ("system_prompt", "yes" if case.messages and any(m.get("role") in ("system", "developer") for m in case.messages) else "no"),
        ("route", case.route),
    ]
    keys += [(f"tag:{k}", v) for k, v in case.tags.items() if k != "route"]
    return tuple(keys)


_SIGNATURES = 4_096
"""Distinct bucket combinations a tally holds before folding them into its per-bucket totals."""


class SliceTally:
    """summary.json `slices`, folded one case at a time: memory is the number of buckets, not of cases.

    A case lands in one bucket of every dimension (five, plus one per tag).
    Cases are first counted per combination of buckets (their signature:
    a run has few), with their pass counts per (check, side), so a case
    costs one lookup and one addition per cell instead of one per cell in
    every dimension; the combinations are folded into the buckets when the
    summary is read, or when more than `_SIGNATURES` distinct ones are held
    (unique tags), which bounds memory. Every figure is a sum,
    so the result does not depend on when a combination is folded.
    """

    def __init__(self) -> None:
        self._acc: dict[tuple[str, str], dict[str, Any]] = {}
        self._sigs: dict[tuple[tuple[str, str], ...], list[Any]] = {}
        """signature → [cases, pairs, identical, {(check, side): [pass, decided]}]."""

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
        sig = _slice_keys(rec.case, prompt_tokens, output_tokens)
        a = self._sigs.get(sig)
        if a is None:
            if len(self._sigs) >= _SIGNATURES:
                self._fold()
            a = self._sigs[sig] = [0, 0, 0, {}]
        a[0] += 1
        a[1] += pairs
        a[2] += identical
        cells = a[3]
        for sc in rec.scores:
            status = sc.status
            if status == "pass" or status == "fail":
                cell = cells.get((sc.check, sc.target))
                if cell is None:
                    cell = cells[sc.check, sc.target] = [0, 0]
                cell[0] += status == "pass"
                cell[1] += 1

    def merge(self, later: SliceTally) -> None:
        """Fold in the tally of the cases after this one's (every figure is a sum)."""
        self._fold()
        later._fold()
        acc = self._acc
        for key, theirs in later._acc.items():
            a = acc.get(key)
            if a is None:
                acc[key] = theirs
                continue
            a["cases"] += theirs["cases"]
            a["pairs"] += theirs["pairs"]
            a["identical"] += theirs["identical"]
            for check, sides in theirs["checks"].items():
                per_check = a["checks"].setdefault(check, {})
                for side, (p, n) in sides.items():
                    tot = per_check.setdefault(side, [0, 0])
                    tot[0] += p
                    tot[1] += n

    def _fold(self) -> None:
        """Add the held combinations into every bucket they name."""
        acc = self._acc
        for sig, (cases, pairs, identical, cells) in self._sigs.items():
            for key in sig:
                a = acc.get(key)
                if a is None:
                    a = acc[key] = {"cases": 0, "pairs": 0, "identical": 0, "checks": {}}
                a["cases"] += cases
                a["pairs"] += pairs
                a["identical"] += identical
                per_check = a["checks"]
                for (check, side), (p, n) in cells.items():
                    tot = per_check.setdefault(check, {}).get(side)
                    if tot is None:
                        tot = per_check[check][side] = [0, 0]
                    tot[0] += p
                    tot[1] += n
        self._sigs.clear()

    def summary(self) -> dict[str, dict[str, dict[str, Any]]]:
        """{dimension: {bucket: {cases, identical_rate, checks: {check: {...}}}}}."""
        self._fold()
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
