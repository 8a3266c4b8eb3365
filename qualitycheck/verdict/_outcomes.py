"""One case's decided outcomes per check, folded from its comparison records: what every statistic is computed from.

A case's outcome for a check is its pass/fail on each side at each repeat;
everything after (floors, tests, the decision) reads these and nothing else,
so a summary of 100,000 cases holds one small tuple per case and check.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from qualitycheck.verdict._compare import CaseComparison
from qualitycheck.verdict._sequential import CaseCounts

__all__ = ["DECIDED", "CaseOutcome", "add_case_outcomes"]

DECIDED = ("pass", "fail")


@dataclass(frozen=True, slots=True)
class CaseOutcome:
    """One case's decided outcomes (True = pass) for one check, per target over repeats.

    `control` holds the control target's outcomes at the same repeats as the
    baseline; empty when there is no control.
    """

    case_id: str
    route: str
    baseline: tuple[bool, ...]
    candidate: tuple[bool, ...]
    control: tuple[bool, ...] = ()
    control_pairs: tuple[tuple[bool, bool], ...] = ()
    """(baseline, control) outcomes at the same repeat: the A/A pairs."""
    sampled: bool = False
    """The case samples (temperature > 0): judged by its pass rates, in the category's distribution test."""
    b_reps: tuple[int, ...] = ()
    c_reps: tuple[int, ...] = ()
    """For a sampled case, the repeat of each baseline and candidate outcome (the looks count samples by repeat)."""

    @property
    def b_rate(self) -> float:
        return sum(self.baseline) / len(self.baseline)

    @property
    def c_rate(self) -> float:
        return sum(self.candidate) / len(self.candidate)

    def counts(self, samples: int) -> CaseCounts:
        """Passes and decided samples per side among the first `samples` repeats (a look of the sequential test)."""
        b = [ok for ok, rep in zip(self.baseline, self.b_reps or range(len(self.baseline)), strict=True) if rep < samples]
        c = [ok for ok, rep in zip(self.candidate, self.c_reps or range(len(self.candidate)), strict=True) if rep < samples]
        return CaseCounts(self.case_id, sum(b), len(b), sum(c), len(c))

    def __reduce__(self) -> tuple[Callable[..., CaseOutcome], tuple[Any, ...]]:
        """Pickled as a constructor call (cheaper than a slotted dataclass's state), and re-sharing its tuples when read."""
        return _outcome, (
            self.case_id,
            self.route,
            self.sampled,
            self.baseline,
            self.candidate,
            self.control,
            self.control_pairs,
            self.b_reps,
            self.c_reps,
        )


_SHARED: dict[tuple[Any, ...], tuple[Any, ...]] = {}
"""Outcome tuples repeat endlessly ((True,), (False,), ...): one shared copy each keeps 100,000 cases small."""


def _shared(t: tuple[Any, ...]) -> tuple[Any, ...]:
    return _SHARED.setdefault(t, t) if len(t) <= 16 else t


def _outcome(case_id: str, route: str, sampled: bool, *outcomes: tuple[Any, ...]) -> CaseOutcome:
    """A `CaseOutcome` read back from a pickle (the walk's second process sends them), its outcome tuples shared again."""
    b, c, k, pairs, br, cr = map(_shared, outcomes)
    return CaseOutcome(case_id, route, b, c, k, pairs, sampled, br, cr)


def add_case_outcomes(into: dict[str, dict[str, list[CaseOutcome]]], reps: Sequence[CaseComparison]) -> None:
    """Add one case's decided outcomes over its repeats to category → check → outcomes.

    A check the case did not decide on both sides adds nothing, but its list
    exists, so a check no case decided still shows (n = 0) instead of vanishing.
    """
    if not reps:
        return
    case_id, route, sampled = reps[0].case_id, reps[0].route, reps[0].sampled
    per_check = into.setdefault(reps[0].category, {})
    if len(reps) == 1 and reps[0].repeat == 0:  # one repeat, the usual run: each check's outcome read once
        for n, one in sorted(reps[0].checks.items()):
            outs = per_check.setdefault(n, [])
            if one.baseline in DECIDED and one.candidate in DECIDED:
                bp = one.baseline == "pass"
                if one.control in DECIDED:
                    kp = one.control == "pass"
                    outs.append(
                        CaseOutcome(
                            case_id,
                            route,
                            _shared((bp,)),
                            _shared((one.candidate == "pass",)),
                            _shared((kp,)),
                            _shared(((bp, kp),)),
                            sampled,
                        )
                    )
                else:
                    outs.append(CaseOutcome(case_id, route, _shared((bp,)), _shared((one.candidate == "pass",)), (), (), sampled))
        return
    for n in sorted({n for r in reps for n in r.checks}):
        outs = per_check.setdefault(n, [])
        b: list[bool] = []
        c: list[bool] = []
        k: list[bool] = []
        br: list[int] = []
        cr: list[int] = []
        pairs: list[tuple[bool, bool]] = []
        for r in reps:
            o = r.checks.get(n)
            if o is None:
                continue
            if o.baseline in DECIDED:
                b.append(o.baseline == "pass")
                br.append(r.repeat)
            if o.candidate in DECIDED:
                c.append(o.candidate == "pass")
                cr.append(r.repeat)
            if o.control in DECIDED:
                k.append(o.control == "pass")
                if o.baseline in DECIDED:
                    pairs.append((o.baseline == "pass", o.control == "pass"))
        if b and c:
            reps_b, reps_c = (_shared(tuple(br)), _shared(tuple(cr))) if sampled else ((), ())
            outs.append(
                CaseOutcome(
                    case_id, route, _shared(tuple(b)), _shared(tuple(c)), _shared(tuple(k)), _shared(tuple(pairs)), sampled, reps_b, reps_c
                )
            )
