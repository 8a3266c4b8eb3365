"""Human spot-check labels, un-blinded, and the figures summary.json draws from them.

`qualitycheck review DIR` writes a blinded page (`report._review`); its
`--import` un-blinds each reviewer's labels with the key kept in the run
folder and stores them here, as one typed, versioned record
(`HumanLabels`, the `human_labels` artifact). Everything after reads that
record: the per-category preference with its interval and sign test, the
agreement between reviewers, the judge's agreement with the humans (Cohen's
kappa on the pairs both judged), and the per-case outcomes whose losses
`verdict._status.human_check_stats` turns into regressions.

Attention checks (pairs whose two answers are identical) measure the
reviewers' own noise: a side picked there has no change behind it, the
human counterpart of the A/A floor.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from qualitycheck.core._records import Score
from qualitycheck.verdict._tests import sign_test_p as _sign_test

__all__ = [
    "HUMAN_LABELS_ARTIFACT",
    "HUMAN_LABELS_VERSION",
    "Choice",
    "HumanLabel",
    "HumanLabels",
    "HumanTally",
    "PairVotes",
    "ReviewerLabels",
    "cohen_kappa",
    "majority",
    "read_human_labels",
    "sign_test_p",
    "wilson_ci",
]

HUMAN_LABELS_ARTIFACT = "human_labels"
HUMAN_LABELS_VERSION = 1

Choice = Literal["baseline", "candidate", "tie", "both_wrong"]
"""An un-blinded label: which side the reviewer preferred (or neither)."""


class HumanLabel(BaseModel):
    """One reviewer's label on one pair, with the side it names."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    pair_id: str
    """The opaque id the page showed."""
    case_id: str
    repeat: int = 0
    attention: bool = False
    """The pair was an attention check (identical answers)."""
    choice: Choice
    note: str = ""


class ReviewerLabels(BaseModel):
    """Everything one reviewer's export contributed (a later import of the same reviewer replaces it)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    reviewer: str
    source: str = ""
    """The imported file's name."""
    sha256: str = ""
    """Of the imported file's bytes."""
    labels: list[HumanLabel] = Field(default_factory=list)


class HumanLabels(BaseModel):
    """The `human_labels` artifact: every reviewer's un-blinded labels of this run."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    format_version: int = HUMAN_LABELS_VERSION
    reviewers: list[ReviewerLabels] = Field(default_factory=list)

    def merged(self, new: Iterable[ReviewerLabels]) -> HumanLabels:
        """These labels with `new` reviewers added; a reviewer imported again is replaced, not doubled."""
        by_name = {r.reviewer: r for r in self.reviewers}
        for r in new:
            by_name[r.reviewer] = r
        return HumanLabels(reviewers=[by_name[n] for n in sorted(by_name)])


def read_human_labels(body: Any) -> HumanLabels | None:
    """The stored record, or None when nothing was imported (or the record is not one this version reads)."""
    if body is None:
        return None
    try:
        return HumanLabels.model_validate(body)
    except ValidationError:
        return None


# ------------------------------------------------------------------ statistics
def wilson_ci(k: int, n: int, z: float = 1.959963984540054) -> tuple[float, float] | None:
    """95% Wilson score interval of a proportion: sound at small n and at 0 or n, where the normal one is not."""
    if n <= 0:
        return None
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def sign_test_p(wins: int, losses: int) -> float | None:
    """Two-sided exact sign test of candidate wins against baseline wins (ties left out); None without either.

    The verdict's one sign test (`verdict._tests.sign_test_p`), which says 1.0 where this says None.
    """
    return _sign_test(wins, losses) if wins + losses else None


def cohen_kappa(a: Sequence[str], b: Sequence[str]) -> float | None:
    """Cohen's kappa of two raters over the same items; None when undefined (no items, or chance agreement is total)."""
    n = len(a)
    if n == 0 or n != len(b):
        return None
    observed = sum(x == y for x, y in zip(a, b, strict=True)) / n
    ca, cb = Counter(a), Counter(b)
    expected = sum(ca[k] * cb[k] for k in ca) / (n * n)
    if expected >= 1.0:
        return 1.0 if observed == 1.0 else None
    return (observed - expected) / (1 - expected)


def majority(choices: Sequence[Choice]) -> Choice | None:
    """The pair's outcome: the choice more than half its reviewers made; a split pair reads as a tie."""
    if not choices:
        return None
    top, n = Counter(choices).most_common(1)[0]
    return top if 2 * n > len(choices) else "tie"


def _for_judge(c: Choice) -> str:
    """A human choice in the judge's terms (from the candidate's side): both wrong is no preference."""
    return {"baseline": "loss", "candidate": "win"}.get(c, "tie")


@dataclass
class PairVotes:
    """One reviewed (case, repeat): its category, route, and every reviewer's choice."""

    case_id: str
    repeat: int
    category: str
    route: str
    attention: bool
    votes: dict[str, Choice] = field(default_factory=dict)
    """reviewer → choice."""

    @property
    def outcome(self) -> Choice | None:
        return majority(list(self.votes.values()))


class HumanTally:
    """Folds the stored labels with the judge's scores of the same pairs into summary.json's human figures."""

    def __init__(self, labels: HumanLabels, cases: Mapping[str, tuple[str, str]]):
        """`cases`: case id → (category, route), as `RunStore.case_labels` gives them."""
        self.labels = labels
        self.pairs: dict[tuple[str, int], PairVotes] = {}
        for r in labels.reviewers:
            for lab in r.labels:
                cat, route = cases.get(lab.case_id, ("?", "?"))
                pv = self.pairs.setdefault((lab.case_id, lab.repeat), PairVotes(lab.case_id, lab.repeat, cat, route, lab.attention))
                pv.votes[r.reviewer] = lab.choice
        self.judge: dict[tuple[str, int], str] = {}

    def add_judge_score(self, s: Score) -> None:
        """The judge's decided verdict on a pair the humans labelled (from the candidate's side)."""
        decided = s.check == "judge" and s.target == "candidate" and s.status != "error" and s.value in ("win", "loss", "tie")
        if decided and (s.case_id, s.repeat) in self.pairs:
            self.judge[(s.case_id, s.repeat)] = str(s.value)

    def attention(self) -> tuple[int, int]:
        """(attention-check labels, those that picked a side): the reviewers' noise, with no change behind it."""
        labels = picked = 0
        for pv in self.pairs.values():
            if pv.attention:
                labels += len(pv.votes)
                picked += sum(v in ("baseline", "candidate") for v in pv.votes.values())
        return labels, picked

    def categories(self) -> dict[str, list[PairVotes]]:
        """The reviewed divergent pairs per category (attention checks apart)."""
        out: dict[str, list[PairVotes]] = {}
        for key in sorted(self.pairs):
            pv = self.pairs[key]
            if not pv.attention:
                out.setdefault(pv.category, []).append(pv)
        return out

    def category_figures(self, pairs: Sequence[PairVotes]) -> dict[str, Any]:
        """Preference (shares with Wilson intervals, sign test), reviewer agreement and the judge's agreement."""
        outcomes = [o for o in (pv.outcome for pv in pairs) if o is not None]
        counts = Counter(outcomes)
        n = len(outcomes)
        preference = {
            c: {"count": counts[c], "rate": counts[c] / n if n else None, "ci": wilson_ci(counts[c], n)}
            for c in ("baseline", "candidate", "tie", "both_wrong")
        }
        reviewers = sorted({r for pv in pairs for r in pv.votes})
        agree = shared = 0
        kappas: list[float] = []
        for i, r1 in enumerate(reviewers):
            for r2 in reviewers[i + 1 :]:
                both = [(pv.votes[r1], pv.votes[r2]) for pv in pairs if r1 in pv.votes and r2 in pv.votes]
                shared += len(both)
                agree += sum(x == y for x, y in both)
                k = cohen_kappa([x for x, _ in both], [y for _, y in both])
                if k is not None:
                    kappas.append(k)
        judged = [
            (self.judge[(pv.case_id, pv.repeat)], _for_judge(o))
            for pv in pairs
            if (o := pv.outcome) and (pv.case_id, pv.repeat) in self.judge
        ]
        return {
            "pairs": n,
            "labels": sum(len(pv.votes) for pv in pairs),
            "reviewers": len(reviewers),
            "preference": preference,
            "sign_test_p": sign_test_p(counts["candidate"], counts["baseline"]),
            "reviewer_agreement": {
                "pairs": shared,
                "rate": agree / shared if shared else None,
                "kappa": sum(kappas) / len(kappas) if kappas else None,
            }
            if len(reviewers) > 1
            else None,
            "judge_agreement": {
                "pairs": len(judged),
                "rate": sum(j == h for j, h in judged) / len(judged) if judged else None,
                "kappa": cohen_kappa([j for j, _ in judged], [h for _, h in judged]),
            }
            if judged
            else None,
            "lost_cases": sorted({pv.case_id for pv in pairs if pv.outcome == "baseline"}),
        }
