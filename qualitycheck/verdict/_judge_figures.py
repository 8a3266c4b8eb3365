"""The judge's figures in summary.json: wins, losses, ties, position consistency, rubric deltas.

Two calibration figures come with them: the judge's A/A loss rate (the
baseline judged against the control, where no change stands behind a loss:
its noise floor, per category) and its position bias (per judge, from the
verdicts of the both-order calls every pairwise pair gets).

The judge stage (`qualitycheck.judge`) calls the judge and stores its scores;
summarising those scores per category is the verdict's work, beside the
other statistics (the rubric delta's interval is the paired bootstrap of
`_stats`). `JudgeTally` folds one case at a time, so the summary feeds it
from its one walk of the store.
"""

from __future__ import annotations

from typing import Any

from qualitycheck.core._records import Score
from qualitycheck.core._store import CaseRecords, RunStore
from qualitycheck.verdict._model import JudgePositionBias
from qualitycheck.verdict._tests import paired_bootstrap_ci

__all__ = ["JudgeTally", "judge_summary"]

_AA_KEYS = ("aa_pairs", "aa_judged", "aa_losses", "aa_errors")


def _delta_ci(deltas: list[float], seed: int) -> list[float] | None:
    """The project's seeded paired bootstrap (`_stats`) over per-pair grade deltas."""
    if not deltas:
        return None
    lo, hi = paired_bootstrap_ci([0.0] * len(deltas), deltas, seed=seed)
    return [lo, hi]


class JudgeTally:
    """summary.json's judge figures (`judge_summary`), folded one case at a time from its judge scores."""

    def __init__(self, seed: int = 0):
        self.seed = seed
        self._acc: dict[str, dict[str, Any]] = {}
        self._aa: dict[str, dict[str, int]] = {}
        self._bias: dict[str, dict[str, int]] = {}

    @classmethod
    def for_store(cls, store: RunStore) -> JudgeTally:
        """Seeded with the run's own `run.seed` (as stored with its config), whatever config re-gates it."""
        return cls(_run_seed(store))

    def add(self, rec: CaseRecords) -> None:
        for s in rec.scores:
            if s.check == "judge":
                self.add_score(s, rec.case.category)

    def _add_positions(self, d: dict[str, Any]) -> None:
        """One pairwise pair's two verdicts (a | b | tie per order) into its judge's position counts."""
        positions = d.get("positions")
        if d.get("kind") != "pairwise" or not isinstance(positions, list) or len(positions) != 2:
            return
        b = self._bias.setdefault(str(d.get("judge", "?")), {"pairs": 0, "first": 0, "second": 0, "tie": 0, "same_position": 0})
        b["pairs"] += 1
        for p in positions:
            b[{"a": "first", "b": "second"}.get(p, "tie")] += 1
        b["same_position"] += positions[0] == positions[1] != "tie"

    def _add_aa(self, s: Score, category: str) -> None:
        """A/A pair (baseline vs control, or a later baseline repeat vs the first): identical ones are pairs the judge could not lose."""
        a = self._aa.setdefault(category, dict.fromkeys(_AA_KEYS, 0))
        a["aa_pairs"] += 1
        if s.detail.get("identical"):
            return
        self._add_positions(s.detail)
        if s.status == "error" or s.detail.get("error"):
            a["aa_errors"] += 1
            return
        a["aa_judged"] += 1
        a["aa_losses"] += s.value == "loss"

    def add_score(self, s: Score, category: str) -> None:
        if s.check == "judge" and s.target in ("control", "baseline") and s.detail.get("aa"):
            self._add_aa(s, category)
            return
        if s.check != "judge" or s.target != "candidate" or s.detail.get("not_configured") or s.status == "skipped":
            return
        a = self._acc.get(category)
        if a is None:
            a = self._acc[category] = {
                "wins": 0,
                "losses": 0,
                "ties": 0,
                "judge_errors": 0,
                "judged": 0,
                "skipped_identical": 0,
                "no_answer": 0,
                "flagged_injection": 0,
                "_consistent": 0,
                "_pairwise": 0,
                "_deltas": [],
                "lost_cases": [],
                "won_cases": [],
            }
        d = s.detail
        if d.get("no_answer"):
            a["no_answer"] += 1
            return
        if d.get("identical"):
            a["skipped_identical"] += 1
            if d.get("kind") == "single":
                a["_deltas"].append(0.0)
            return
        a["judged"] += 1
        a["flagged_injection"] += bool(d.get("flagged_injection"))
        if s.status == "error":
            a["judge_errors"] += 1
            return
        a[{"win": "wins", "loss": "losses", "tie": "ties"}[s.value]] += 1
        if s.value in ("loss", "win"):
            a["lost_cases" if s.value == "loss" else "won_cases"].append(s.case_id)
        self._add_positions(d)
        if d.get("position_consistent") is not None:
            a["_pairwise"] += 1
            a["_consistent"] += bool(d["position_consistent"])
        if d.get("rubric_delta") is not None:
            a["_deltas"].append(float(d["rubric_delta"]))

    def merge(self, later: JudgeTally) -> None:
        """Fold in the tally of the cases after this one's: counts add up, lists go on in case order."""
        for cat, theirs in later._acc.items():
            acc = self._acc.get(cat)
            if acc is None:
                self._acc[cat] = theirs
                continue
            for key, value in theirs.items():
                if isinstance(value, list):
                    acc[key].extend(value)
                else:
                    acc[key] += value
        for mine, other in ((self._aa, later._aa), (self._bias, later._bias)):
            for name, counts in other.items():
                got = mine.get(name)
                if got is None:
                    mine[name] = counts
                else:
                    for key, n in counts.items():
                        got[key] += n

    def summary(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for cat, acc in sorted(self._acc.items()):
            a = dict(acc)
            deltas = a.pop("_deltas")
            pw, cons = a.pop("_pairwise"), a.pop("_consistent")
            a["lost_cases"] = sorted(set(a["lost_cases"]))
            a["won_cases"] = sorted(set(a["won_cases"]))
            a["position_consistency_rate"] = cons / pw if pw else None
            a["rubric_delta_mean"] = sum(deltas) / len(deltas) if deltas else None
            a["rubric_delta_ci"] = _delta_ci(deltas, self.seed)
            out[cat] = a
        for cat, aa in sorted(self._aa.items()):
            if cat in out:  # a category whose candidate was never judged has no judge cell to add a floor to
                out[cat].update(aa, aa_loss_rate=aa["aa_losses"] / aa["aa_pairs"] if aa["aa_pairs"] else None)
        return out

    def position_bias(self) -> dict[str, JudgePositionBias]:
        """Per pairwise judge: how often each position won, and how often both orders picked the same position.

        An unbiased judge picks the first reply as often as the second across
        the two orders (they show each side first once), so
        `first_position_rate` far from 0.5 is position bias, and
        `same_position_pairs` counts the pairs it decided by position alone.
        """
        out: dict[str, JudgePositionBias] = {}
        for name, b in sorted(self._bias.items()):
            decisive = b["first"] + b["second"]
            out[name] = JudgePositionBias(
                pairs=b["pairs"],
                first_position_wins=b["first"],
                second_position_wins=b["second"],
                ties=b["tie"],
                first_position_rate=b["first"] / decisive if decisive else None,
                same_position_pairs=b["same_position"],
                same_position_rate=b["same_position"] / b["pairs"] if b["pairs"] else None,
            )
        return out


def _run_seed(store: RunStore) -> int:
    """The run's configured seed (`run.seed`), as stored with its config."""
    return store.config().run.seed


def judge_summary(store: RunStore, *, seed: int | None = None) -> dict[str, dict[str, Any]]:
    """Per category: win/loss/tie counts, position consistency, judge errors, rubric delta and its CI.

    `lost_cases` / `won_cases` list the case ids the candidate lost / won on
    any repeat (the contract's `regressions`, with the noise floor, come from
    the statistics over the judge scores' pass/fail).

    `judged` counts pairs that needed the judge (wins + losses + ties +
    judge_errors); byte-identical pairs are `skipped_identical` (ties without
    a call) and pairs where a side has no answer are `no_answer`. The rubric
    delta (candidate − baseline grade) includes identical pairs as 0, since
    their grades are equal by construction. Categories without judged cases
    are absent. This reads the judge scores alone; the summary folds the
    same `JudgeTally` into its one walk of the store.
    """
    tally = JudgeTally(_run_seed(store) if seed is None else seed)
    labels: dict[str, tuple[str, str]] | None = None  # read only once a judge score turns up
    for s in store.scores():
        if s.check != "judge" or s.target != "candidate":
            continue
        if labels is None:
            labels = store.case_labels()
        tally.add_score(s, labels[s.case_id][0] if s.case_id in labels else "?")
    return tally.summary()
