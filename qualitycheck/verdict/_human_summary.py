"""What the summary adds once human labels were imported: the `human` check, per-category figures, the review line.

Kept apart from `_summary` so a run without labels pays one artifact read:
`human_tally` returns None and nothing else here runs.
"""

from __future__ import annotations

from typing import Any

from qualitycheck.core._store import RunStore
from qualitycheck.verdict._human import HUMAN_LABELS_ARTIFACT, HumanTally, read_human_labels
from qualitycheck.verdict._model import HumanCategory, HumanReview
from qualitycheck.verdict._stats import CheckStats
from qualitycheck.verdict._status import human_check_stats

__all__ = ["REVIEW_KEY_ARTIFACT", "add_human_stats", "human_category", "human_review", "human_tally"]

REVIEW_KEY_ARTIFACT = "review_key"
"""Written by `qualitycheck review DIR`: which side is A on each pair of review.html (never on the page)."""


def human_tally(store: RunStore) -> HumanTally | None:
    """The imported labels ready to fold the judge's scores into; None when nothing was imported."""
    labels = read_human_labels(store.artifact(HUMAN_LABELS_ARTIFACT))
    if labels is None or not labels.reviewers:
        return None
    return HumanTally(labels, store.case_labels())


def add_human_stats(stats: dict[str, dict[str, CheckStats]], tally: HumanTally, seed: int) -> None:
    """Each reviewed category gains a `human` cell, so the gate, the statuses and every renderer treat it like a check."""
    att_labels, att_picked = tally.attention()
    for cat, pairs in tally.categories().items():
        stats.setdefault(cat, {})["human"] = human_check_stats(cat, pairs, att_labels, att_picked, seed=seed)


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
