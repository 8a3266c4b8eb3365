"""What the summary adds once human labels were imported: the `human` check, per-category figures, the review line.

Kept apart from `_summary` so a run without labels pays one artifact read:
`human_tally` returns None and nothing else here runs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from qualitycheck.core._store import RunStore
from qualitycheck.verdict._decision import HUMAN_CHECK
from qualitycheck.verdict._floor import NoiseFloor, regression_allowance
from qualitycheck.verdict._human import HUMAN_LABELS_ARTIFACT, HumanTally, PairVotes, read_human_labels
from qualitycheck.verdict._model import HumanCategory, HumanReview
from qualitycheck.verdict._outcomes import CaseOutcome
from qualitycheck.verdict._stats import CheckStats, check_stats

__all__ = ["REVIEW_KEY_ARTIFACT", "human_category", "human_cells", "human_check_stats", "human_review", "human_tally"]

REVIEW_KEY_ARTIFACT = "review_key"
"""Written by `qualitycheck review DIR`: which side is A on each pair of review.html (never on the page)."""


def human_tally(store: RunStore) -> HumanTally | None:
    """The imported labels ready to fold the judge's scores into; None when nothing was imported."""
    labels = read_human_labels(store.artifact(HUMAN_LABELS_ARTIFACT))
    if labels is None or not labels.reviewers:
        return None
    return HumanTally(labels, store.case_labels())


def human_cells(tally: HumanTally, seed: int) -> dict[str, CheckStats]:
    """category → its `human` cell, so the decision, the statuses and every renderer treat it like a check."""
    att_labels, att_picked = tally.attention()
    return {cat: human_check_stats(cat, pairs, att_labels, att_picked, seed=seed) for cat, pairs in tally.categories().items()}


def human_check_stats(
    category: str, pairs: Sequence[PairVotes], attention_labels: int, attention_picked: int, *, seed: int = 0
) -> CheckStats:
    """The `human` check of one category: the baseline is the reference, the candidate fails a pair its reviewers lost.

    A pair's outcome is its reviewers' majority (`PairVotes.outcome`); a
    case reviewed over several repeats regresses when it lost more than half
    of them, as every check's cases do. The floor is the attention checks:
    a reviewer picking a side between identical answers is noise with no
    change behind it, at twice the rate noise alone would make a loss (either
    side), which is the A/A model of `regression_allowance`. So only losses
    beyond what that noise explains count; reviewers who never picked a side
    there showed no noise, and a run without attention labels has no floor:
    in both cases every human loss counts.
    """
    per_case: dict[str, list[PairVotes]] = {}
    for pv in pairs:
        if pv.outcome is not None:
            per_case.setdefault(pv.case_id, []).append(pv)
    outcomes = [
        CaseOutcome(
            case_id=cid,
            route=votes[0].route,
            baseline=tuple(True for _ in votes),
            candidate=tuple(v.outcome != "baseline" for v in votes),
        )
        for cid, votes in sorted(per_case.items())
    ]
    stats = check_stats(category, HUMAN_CHECK, outcomes, seed=seed)
    if not attention_labels:
        return stats
    floor = NoiseFloor("attention_checks", attention_labels, attention_picked)  # type: ignore[arg-type]  # the human floor's own source
    # A reviewer's loss label is direct evidence, not a flip of a noisy check: when the reviewers never
    # picked a side between identical answers, no noise was seen and every loss counts.
    allowance = regression_allowance(len(outcomes), floor) if attention_picked else 0
    return dataclasses.replace(stats, noise=floor, allowance=allowance, supported=allowance)  # the reviewers' noise is measured itself


def human_category(tally: HumanTally, category: str) -> dict[str, Any]:
    """`{"human_review": HumanCategory}` for a reviewed category, else nothing (the field stays out of the file)."""
    pairs = tally.categories().get(category)
    if not pairs:
        return {}
    return {"human_review": HumanCategory.model_validate(tally.category_figures(pairs))}


def human_review(tally: HumanTally, store: RunStore) -> HumanReview:
    key = store.artifact(REVIEW_KEY_ARTIFACT) or {}
    att_labels, att_picked = tally.attention()
    rate = att_picked / att_labels if att_labels else None
    note = (
        f"reviewers picked a side on {att_picked} of {att_labels} attention checks (identical answers); "
        "human losses count only beyond that noise"
        if att_labels
        else "no attention check was labelled, so every human loss counts"
    )
    return HumanReview(
        reviewers=[r.reviewer for r in tally.labels.reviewers],
        labels=sum(len(r.labels) for r in tally.labels.reviewers),
        pairs_on_page=len(key.get("pairs", [])),
        attention_labels=att_labels,
        attention_side_rate=rate,
        note=note,
    )
