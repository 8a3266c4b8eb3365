"""What report.html shows of the human spot-checks and of the judge's calibration (floor, position bias).

Read from summary.json only: the figures are decided in `verdict`, and the
page renders them (`report.html.j2`, sections `human-review` and
`judge-calibration`).
"""

from __future__ import annotations

from typing import Any

from qualitycheck.verdict._model import HumanAgreement, Summary

__all__ = ["human_view", "judge_calibration_view"]

CHOICES = ("baseline", "candidate", "tie", "both_wrong")


def _agreement(a: HumanAgreement | None) -> dict[str, Any] | None:
    return None if a is None else {"pairs": a.pairs, "rate": a.rate, "kappa": a.kappa}


def human_view(s: Summary) -> dict[str, Any] | None:
    """The section's rows, one per reviewed category; None when no labels were imported."""
    hr = s.human_review
    if hr is None:
        return None
    rows = []
    for name, cat in s.categories.items():
        h = cat.human_review
        if h is None:
            continue
        check = cat.checks.get("human")
        rows.append(
            {
                "name": name,
                "pairs": h.pairs,
                "labels": h.labels,
                "reviewers": h.reviewers,
                "preference": [(c.replace("_", " "), h.preference[c]) for c in CHOICES if c in h.preference],
                "sign_p": h.sign_test_p,
                "reviewers_agree": _agreement(h.reviewer_agreement),
                "judge_agree": _agreement(h.judge_agreement),
                "counted": check.counted if check is not None else [],
                "tolerated": check.tolerated if check is not None else [],
            }
        )
    return {
        "reviewers": ", ".join(hr.reviewers),
        "labels": hr.labels,
        "pairs_on_page": hr.pairs_on_page,
        "attention_labels": hr.attention_labels,
        "attention_rate": hr.attention_side_rate,
        "note": hr.note,
        "rows": rows,
    }


def judge_calibration_view(s: Summary) -> dict[str, Any] | None:
    """The judge's A/A floor per category and its position bias per judge; None when neither was measured."""
    floors = []
    for name, cat in s.categories.items():
        j = cat.checks.get("judge")
        if j is None or "aa_pairs" not in j.model_fields_set:
            continue
        floors.append(
            {
                "name": name,
                "aa_pairs": j.aa_pairs,
                "aa_losses": j.aa_losses,
                "aa_rate": j.aa_loss_rate,
                "losses": j.losses,
                "regressions": len(j.regressions),
                "tolerated": len(j.tolerated),
                "allowance": j.regression_allowance,
            }
        )
    bias = [{"name": n, **b.model_dump()} for n, b in s.judge_position_bias.items()]
    if not floors and not bias:
        return None
    return {"floors": floors, "bias": bias}
