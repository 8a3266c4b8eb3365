"""Per-case comparison of the candidate (and the control) against the baseline.

One `CaseComparison` per (case, repeat): each check's outcome on every
target and whether it flipped, whether the texts are identical, where they
first diverge (characters, and tokens when both sides returned token ids),
how similar they are, and the format features of each side. The records
are persisted in the store (table `comparisons`, one row per case and
repeat) so the statistics, the gate and the HTML report all read the same
comparison, and none of them recomputes text diffs. The stage walks the run
one case at a time and hands each record on as it is made: a 100,000-case
run never holds more than one case's records.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from qualitycheck.core._records import FORMAT_VERSION, Response, Score
from qualitycheck.core._store import CaseRecords, RunStore

__all__ = [
    "CaseComparison",
    "CaseConsumer",
    "CheckOutcome",
    "compare_case",
    "compare_run",
    "first_divergence",
    "similarity",
]

SIDES = ("baseline", "candidate", "control")
SIMILARITY_BUDGET = 40_000
"""Largest product of the differing middles' lengths compared character by character (≈200 × 200)."""

Flip = Literal["regression", "improvement"]
Features = Callable[..., dict[str, Any]]
"""An answer's format features (`scoring.format_features`): called with its text, finish reason and
completion tokens, and with its tool calls as a fourth argument only when the request declared tools."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class CheckOutcome(_Frozen):
    """One check on one (case, repeat): the status on every target and the flip."""

    baseline: str | None = None
    """pass | fail | error | skipped, or None when that target has no score."""
    candidate: str | None = None
    control: str | None = None
    flip: Flip | None = None
    """regression: baseline pass → candidate fail; improvement: fail → pass."""
    control_flip: bool = False
    """The control (same configuration as the baseline) decided differently: noise."""


class CaseComparison(_Frozen):
    """The baseline and the candidate (and control) on one case and repeat."""

    format_version: int = FORMAT_VERSION
    case_id: str
    category: str
    route: str
    repeat: int = 0
    baseline_ok: bool = False
    """The baseline has a response without error."""
    candidate_ok: bool = False
    control_ok: bool | None = None
    """None when the run has no control target."""
    identical: bool | None = None
    """Answers equal (`Response.answer`: text and tool calls); None when either side has no usable response."""
    divergence_char: int | None = None
    """Index of the first differing character (None when identical or missing)."""
    divergence_token: int | None = None
    """Index of the first differing token id, when both sides returned token ids."""
    similarity: float | None = None
    """difflib ratio in [0, 1] of the two texts."""
    similarity_exact: bool = True
    """False when the texts were too long for an exact ratio and an upper bound was used."""
    control_identical: bool | None = None
    """Baseline text equals the control's (the A/A noise floor)."""
    baseline_repeat_identical: bool | None = None
    """For repeats after the first: the baseline's text equals its own text at repeat 0 (noise without a control)."""
    baseline_len: int = 0
    candidate_len: int = 0
    finish_reasons: dict[str, str | None] = Field(default_factory=dict)
    checks: dict[str, CheckOutcome] = Field(default_factory=dict)
    format: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """Side → format features (qualitycheck.scoring._format); empty when unavailable."""

    @property
    def regressions(self) -> list[str]:
        return [n for n, o in self.checks.items() if o.flip == "regression"]

    @property
    def improvements(self) -> list[str]:
        return [n for n, o in self.checks.items() if o.flip == "improvement"]


def first_divergence(a: str | list[int], b: str | list[int]) -> int | None:
    """First index where two sequences differ; None when equal (a prefix differs at its end)."""
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return None if len(a) == len(b) else n


def similarity(a: str, b: str, budget: int = SIMILARITY_BUDGET) -> tuple[float, bool]:
    """difflib ratio of two texts, exact while the differing middle is small enough.

    Common prefix and suffix are matched for free; only the middle goes to
    SequenceMatcher, whose cost grows with the product of the lengths (and
    worse on repetitive text, which runaway answers are). Past `budget`
    (product of the middle lengths) the middle is compared word by word,
    and past it again bounded by `quick_ratio`; both are flagged approximate,
    so a 100 kB answer costs milliseconds, not minutes.
    """
    if a == b:
        return 1.0, True
    total = len(a) + len(b)
    pre = 0
    n = min(len(a), len(b))
    while pre < n and a[pre] == b[pre]:
        pre += 1
    suf = 0
    while suf < n - pre and a[len(a) - 1 - suf] == b[len(b) - 1 - suf]:
        suf += 1
    ma, mb = a[pre : len(a) - suf], b[pre : len(b) - suf]
    mid_total = len(ma) + len(mb)
    exact = len(ma) * len(mb) <= budget
    if exact:
        mid_ratio = difflib.SequenceMatcher(None, ma, mb, autojunk=False).ratio()
    else:
        wa, wb = ma.split(), mb.split()
        sm = difflib.SequenceMatcher(None, wa, wb, autojunk=False)
        mid_ratio = sm.ratio() if len(wa) * len(wb) <= budget else sm.quick_ratio()
    mid_matches = mid_ratio * mid_total / 2 if mid_total else 0.0
    return (2 * (pre + suf) + 2 * mid_matches) / total, exact


def _flip(b: str | None, c: str | None) -> Flip | None:
    if b == "pass" and c == "fail":
        return "regression"
    if b == "fail" and c == "pass":
        return "improvement"
    return None


def compare_pair(
    case_id: str,
    category: str,
    route: str,
    repeat: int,
    responses: dict[str, Response],
    scores: dict[str, dict[str, Score]],
    features: Features | None = None,
    tools: bool = False,
) -> CaseComparison:
    """Compare one (case, repeat); `responses`/`scores` are keyed by target (scores then by check).

    `tools`: the request declared tools, so every side's features include
    its tool calls (none is a value too).
    """
    b, c, k = (responses.get(s) for s in SIDES)
    b_ok, c_ok = bool(b and b.ok), bool(c and c.ok)
    k_ok = bool(k and k.ok) if k is not None or "control" in scores else None
    out: dict[str, Any] = {
        "case_id": case_id,
        "category": category,
        "route": route,
        "repeat": repeat,
        "baseline_ok": b_ok,
        "candidate_ok": c_ok,
        "control_ok": k_ok,
        "baseline_len": len(b.answer) if b else 0,
        "candidate_len": len(c.answer) if c else 0,
        "finish_reasons": {s: r.finish_reason for s, r in responses.items()},
    }
    if b_ok and c_ok:
        assert b is not None and c is not None
        out["identical"] = b.answer == c.answer
        if not out["identical"]:
            out["divergence_char"] = first_divergence(b.answer, c.answer)
            if b.token_ids is not None and c.token_ids is not None:
                out["divergence_token"] = first_divergence(b.token_ids, c.token_ids)
            out["similarity"], out["similarity_exact"] = similarity(b.answer, c.answer)
        else:
            out["similarity"] = 1.0
    if b_ok and k_ok:
        assert b is not None and k is not None
        out["control_identical"] = b.answer == k.answer
    names = sorted({n for per in scores.values() for n in per})
    checks = {}
    for n in names:
        st = {s: (scores.get(s, {}).get(n).status if n in scores.get(s, {}) else None) for s in SIDES}  # type: ignore[union-attr]
        checks[n] = CheckOutcome(
            baseline=st["baseline"],
            candidate=st["candidate"],
            control=st["control"],
            flip=_flip(st["baseline"], st["candidate"]),
            control_flip=st["baseline"] in ("pass", "fail") and st["control"] in ("pass", "fail") and st["baseline"] != st["control"],
        )
    out["checks"] = checks
    if features is not None:
        seen: dict[tuple[str, str | None, int | None], dict[str, Any]] = {}  # greedy sides mostly answer alike
        fmt = {}
        for s, r in responses.items():
            if r.ok:
                key = (r.answer, r.finish_reason, r.usage.completion_tokens)
                if key not in seen:
                    args = (r.text, r.finish_reason, r.usage.completion_tokens)
                    seen[key] = features(*args, r.tool_calls or []) if tools else features(*args)
                fmt[s] = seen[key]
        out["format"] = fmt
    return CaseComparison(**out)


def compare_case(rec: CaseRecords, features: Features | None = None) -> list[CaseComparison]:
    """One case's comparisons, one per repeat that has any response; none when nothing was answered."""
    case = rec.case
    by_repeat: dict[int, dict[str, Response]] = {}
    for r in rec.responses:
        by_repeat.setdefault(r.repeat, {})[r.target] = r
    scores: dict[int, dict[str, dict[str, Score]]] = {}
    for s in rec.scores:
        scores.setdefault(s.repeat, {}).setdefault(s.target, {})[s.check] = s
    first = by_repeat.get(0, {}).get("baseline")
    out = []
    for rep, sides in sorted(by_repeat.items()):
        comp = compare_pair(
            case.id, case.category, case.route, rep, sides, scores.get(rep, {}), features, tools=bool(case.params.get("tools"))
        )
        b = sides.get("baseline")
        if rep > 0 and first is not None and first.ok and b is not None and b.ok:
            comp = comp.model_copy(update={"baseline_repeat_identical": b.answer == first.answer})
        out.append(comp)
    return out


CaseConsumer = Callable[[CaseRecords, list[CaseComparison]], None]
"""What a walk of the store hands each case to: its records (as read) and its comparisons (as made)."""


def compare_run(
    store: RunStore, consume: Callable[[list[CaseComparison]], None] | None = None, *, each: Sequence[CaseConsumer] = ()
) -> int:
    """Compare every stored (case, repeat), store the records, and hand each case on as it is compared.

    Streams: one case is in memory at a time, the records go to the store's
    `comparisons` table as they are made (the table is brought up to date
    in one transaction) and to `consume` (cases with records only) and every
    one of `each` (every case, with its records and its comparisons,
    possibly none) in case-id order. This is the one walk of the store after
    scoring: the summary's digest, latency, slices and judge figures and the
    report's rows are all fed from it. Returns how many records were stored.

    A case whose stored rows (case, responses, scores) are those its stored
    records were made from, by this same code (`comparison_salt`), is not
    compared again: its records are read back, equal to what comparing
    would make, and nothing is written. `report` and `gate` of a finished
    run therefore compare only what changed since the last summary.
    """
    from qualitycheck.scoring._format import format_features  # the scoring package loads every check family: only when comparing

    salt = comparison_salt(format_features)
    stored = store.comparisons_with_inputs()
    count = 0

    def cases() -> Iterator[tuple[str, str, list[tuple[int, str]] | None]]:
        nonlocal count
        for rec in store.by_case(inputs=True):
            inputs = f"{salt}:{rec.inputs}"
            kept = stored.take(rec.case.id)
            fresh: list[tuple[int, str]] | None = None
            if kept and kept[0] == inputs:
                comps = [CaseComparison.model_validate_json(b) for b in kept[1:]]
            else:
                comps = compare_case(rec, format_features)
                fresh = [(c.repeat, c.model_dump_json()) for c in comps]
            for f in each:
                f(rec, comps)
            count += len(comps)
            if comps and consume is not None:
                consume(comps)
            yield rec.case.id, inputs, fresh

    store.update_comparisons(cases())
    return count


def comparison_salt(features: Features) -> str:
    """What a comparison record depends on besides its case's stored rows: the code that makes it.

    A digest of the sources of this module, the format-feature function's
    module (and its name: tests swap in their own), the answer extraction
    and the records, with pydantic's version (it writes the JSON): an
    upgrade or an edit of any of them makes every case compared afresh.
    """
    import hashlib
    import sys
    from pathlib import Path

    import pydantic

    h = hashlib.blake2b(f"{features.__module__}.{features.__qualname__};pydantic {pydantic.VERSION}".encode(), digest_size=8)
    for name in (__name__, features.__module__, "qualitycheck.scoring._extract", "qualitycheck.core._records"):
        path = getattr(sys.modules.get(name), "__file__", None)
        h.update(Path(path).read_bytes() if path else name.encode())
    return h.hexdigest()
