"""Per-case status, read back from summary.json: the report, the sign-off, the terminal and the pytest plugin render it.

Which regressions count is decided once, by the quality decision
(`verdict._decision.decide_quality`), and written per check into
summary.json (`checks.<check>.tolerated`); here a case's statuses are read
from that record and from the compare stage's records of the case (errors,
identical texts), so no reader decides anything.

- `regression`: a regression counted against `max_quality_regression_cases`:
  the quality guardrail of the case's route failed, or was left undecided
  because the measured noise floor does not explain it;
- `tolerated`: every other regression: within the route's threshold, or
  explained by the floor's measured disagreements (listed, not counted);
- `flaky`: the baseline disagrees with itself on this case, against the
  control or across its repeats (the statistics' A/A definition, the only
  one); a flaky case is never a regression or an improvement, whatever
  the candidate does;
- `improved`: the pass rate rose by more than half (fail → pass);
- `error`: a stored response or score of the case is an error;
- `divergent`: in some repeat the candidate's text differs from the baseline's;
- `identical`: every repeat answered on both sides, with equal texts.

Human spot-checks are a check too (`human`): a pair whose reviewers
preferred the baseline is a candidate loss, a regression of the case unless
the reviewers' own noise (sides picked between identical answers, the
attention checks) explains it, exactly as the A/A floor explains flips of
the other checks.

The first three and `improved` are per check; a case carries every status
that applies, in `STATUS_ORDER`, and the first of them is its primary
status (what the report lists it under) (`check_statuses`, `StatusBook`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from qualitycheck.verdict._compare import CaseComparison
from qualitycheck.verdict._model import CheckSummary, Summary

__all__ = ["STATUS_ORDER", "CaseStatus", "Status", "StatusBook", "check_statuses"]

Status = Literal["regression", "tolerated", "error", "improved", "flaky", "divergent", "identical"]

STATUS_ORDER: tuple[Status, ...] = ("regression", "tolerated", "error", "improved", "flaky", "divergent", "identical")
"""What needs a look first: a case's primary status is the first of its statuses in this order."""


def check_statuses(check: CheckSummary) -> dict[str, Status]:
    """case id → its status on this check, as summary.json records it (cases without one are absent)."""
    out: dict[str, Status] = {i: "flaky" for i in check.flaky}
    out.update({i: "improved" for i in check.improvements})
    out.update({i: "tolerated" for i in check.tolerated})
    out.update({i: "regression" for i in check.counted})
    return out


@dataclass(frozen=True, slots=True)
class CaseStatus:
    """One case: every status that applies (primary first) and its status per check."""

    statuses: tuple[Status, ...] = ()
    """In STATUS_ORDER; empty when nothing was compared for the case (no answer stored)."""
    checks: Mapping[str, Status] = field(default_factory=dict)
    """check → regression | tolerated | improved | flaky, for the checks that hold one."""

    @property
    def primary(self) -> Status | None:
        return self.statuses[0] if self.statuses else None

    def checks_with(self, status: Status) -> list[str]:
        return sorted(n for n, st in self.checks.items() if st == status)


def _errored(c: CaseComparison) -> bool:
    answered = c.finish_reasons  # the sides with a stored response in this repeat
    sides = (("baseline", c.baseline_ok), ("candidate", c.candidate_ok), ("control", c.control_ok))
    if any(side in answered and ok is False for side, ok in sides):
        return True
    return any("error" in (o.baseline, o.candidate, o.control) for o in c.checks.values())


class StatusBook:
    """Every case's status from summary.json and the compare stage's records, one case at a time.

    Holds only the cases summary.json lists (regressions, improvements,
    flaky), so a reader walking a 100,000-case run keeps what it keeps.
    """

    def __init__(self, summary: Summary):
        self.repeats = max(1, summary.repeats)
        self._by_case: dict[str, dict[str, Status]] = {}
        for cat in summary.categories.values():
            for name, check in cat.checks.items():
                for case_id, status in check_statuses(check).items():
                    self._by_case.setdefault(case_id, {})[name] = status

    @classmethod
    def without_checks(cls, repeats: int) -> StatusBook:
        """A book that knows no check's status: a case's error, divergent and identical only.

        Those follow from the case's own comparisons, so a reader walking the
        store knows them before the statistics have decided any regression.
        """
        book = cls.__new__(cls)
        book.repeats = max(1, repeats)
        book._by_case = {}
        return book

    def case(self, case_id: str, comps: Sequence[CaseComparison]) -> CaseStatus:
        """The status of one case from its comparison records (all its repeats)."""
        checks = self._by_case.get(case_id, _NO_CHECKS)
        errored = divergent = False
        identical = bool(comps) and len(comps) == self.repeats
        for c in comps:
            errored = errored or _errored(c)
            if c.identical is False:
                divergent = True
            elif not c.identical:
                identical = False
        found: list[Status] = [*checks.values()]
        if errored:
            found.append("error")
        if divergent:
            found.append("divergent")
        elif identical:
            found.append("identical")
        key = frozenset(found)
        statuses = _IN_ORDER.get(key)
        if statuses is None:
            statuses = _IN_ORDER[key] = tuple(s for s in STATUS_ORDER if s in key)
        return CaseStatus(statuses, checks)


_NO_CHECKS: Mapping[str, Status] = {}
_IN_ORDER: dict[frozenset[Status], tuple[Status, ...]] = {}
"""A set of statuses → the same in STATUS_ORDER (a run has a handful of distinct sets)."""
