"""The comparisons of a whole run, reduced in one pass to what the summary's statistics read.

A 100,000-case run has 100,000 comparison records, each with the format
features of every side; holding them took gigabytes. The statistics need
far less: per (category, check) each case's decided outcomes, per category
the text-agreement counts and the similarity and divergence values, per
format feature the paired values, per route the error counts. `RunDigest`
keeps exactly those, as shared tuples and packed arrays, and is fed one
case's records at a time by `compare.compare_run`.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields
from itertools import groupby
from typing import Any

from qualitycheck.verdict._compare import CaseComparison
from qualitycheck.verdict._drift import DriftSamples, DriftTally
from qualitycheck.verdict._outcomes import CaseOutcome, add_case_outcomes

__all__ = ["RunDigest", "TextTally"]


@dataclass
class TextTally:
    """How often the candidate's (and the control's) text equals the baseline's, in one category."""

    cases: int = 0
    pairs: int = 0
    identical: int = 0
    similarity: array = field(default_factory=lambda: array("d"))  # type: ignore[type-arg]
    divergence: array = field(default_factory=lambda: array("q"))  # type: ignore[type-arg]
    aa_pairs: int = 0
    aa_identical: int = 0
    rep_pairs: int = 0
    rep_identical: int = 0
    paired: int = 0
    """(case, repeat)s where the candidate and the control were both compared with the baseline."""
    paired_candidate_diverged: int = 0
    candidate_only: int = 0
    """Of those: the candidate diverged and the control did not."""
    control_only: int = 0
    greedy_pairs: int = 0
    """Greedy cases compared (the divergence rate's bound is about these: sampled texts differ by design). Counted
    per case, not per repeat: a case's repeats are not independent requests of the traffic it stands for."""
    greedy_identical: int = 0
    """Of those, cases identical to the baseline on every repeat."""
    sampled_cases: int = 0
    sampled_pairs: int = 0
    """(case, repeat)s of sampled cases both sides answered: the samples taken."""

    def add(self, c: CaseComparison) -> None:
        if c.identical is not None:
            self.pairs += 1
            self.identical += c.identical
            if c.sampled:
                self.sampled_pairs += 1
            if c.similarity is not None:
                self.similarity.append(c.similarity)
            if c.divergence_char is not None:
                self.divergence.append(c.divergence_char)
        if c.control_identical is not None:
            self.aa_pairs += 1
            self.aa_identical += c.control_identical
            if c.identical is not None:
                self.paired += 1
                self.paired_candidate_diverged += not c.identical
                self.candidate_only += (not c.identical) and c.control_identical
                self.control_only += c.identical and not c.control_identical
        if c.baseline_repeat_identical is not None and not c.sampled:
            # a sampled baseline's repeats differ by design: they are its samples, not a measure of batching noise
            self.rep_pairs += 1
            self.rep_identical += c.baseline_repeat_identical

    def merge(self, later: TextTally) -> None:
        """Fold in the tally of the cases after this one's: counts add up, values follow in order."""
        for name in _COUNTS:
            setattr(self, name, getattr(self, name) + getattr(later, name))
        self.similarity.extend(later.similarity)
        self.divergence.extend(later.divergence)


_COUNTS = tuple(f.name for f in fields(TextTally) if f.name not in ("similarity", "divergence"))
"""`TextTally`'s counters (everything but its value arrays)."""


@dataclass
class RunDigest:
    """Everything the summary needs from the comparisons; `add` takes one case's records at a time."""

    outcomes: dict[str, dict[str, list[CaseOutcome]]] = field(default_factory=dict)
    """category → check → per-case outcomes (cases decided on both sides)."""
    text: dict[str, TextTally] = field(default_factory=dict)
    drift: dict[str, DriftTally] = field(default_factory=dict)
    """category → its paired format-feature values (`drift_samples()` gives them per feature)."""
    route_errors: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)
    """route → target → {count: failed requests, requests}."""
    skipped_sampled: dict[str, dict[str, int]] = field(default_factory=dict)
    """category → check → sampled cases the check skipped on the candidate (identity checks do not apply to them)."""

    def add(self, reps: Sequence[CaseComparison]) -> None:
        """Take every record of one case (all its repeats); a case must not be added twice."""
        if not reps:
            return
        cat = reps[0].category
        add_case_outcomes(self.outcomes, reps)
        tally = self.text.get(cat)
        if tally is None:
            tally = self.text[cat] = TextTally()
        tally.cases += 1
        if reps[0].sampled:
            tally.sampled_cases += 1
            skipped = {n for c in reps for n, o in c.checks.items() if o.candidate == "skipped"}
            if skipped:
                counts = self.skipped_sampled.setdefault(cat, {})
                for n in skipped:
                    counts[n] = counts.get(n, 0) + 1
        drift = self.drift.get(cat)
        if drift is None:
            drift = self.drift[cat] = DriftTally()
        compared = [c.identical for c in reps if c.identical is not None]
        if compared and not reps[0].sampled:
            tally.greedy_pairs += 1
            tally.greedy_identical += all(compared)
        for c in reps:
            tally.add(c)
            if "baseline" in c.format and "candidate" in c.format:
                drift.add(c.format["baseline"], c.format["candidate"], c.format.get("control"))
            per = self.route_errors.setdefault(c.route, {})
            for side, ok in (("baseline", c.baseline_ok), ("candidate", c.candidate_ok), ("control", c.control_ok)):
                if ok is None:
                    continue
                d = per.setdefault(side, {"count": 0, "requests": 0})
                d["requests"] += 1
                d["count"] += not ok

    def merge(self, later: RunDigest) -> None:
        """Fold in the digest of the cases after this one's, as if `add` had gone on with them.

        Lists and arrays continue in case order and dictionaries gain the
        later keys after their own (the order the statistics and
        summary.json see them in is the order of one walk).
        """
        for cat, checks in later.outcomes.items():
            mine = self.outcomes.setdefault(cat, {})
            for name, outs in checks.items():
                mine.setdefault(name, []).extend(outs)
        for cat, text in later.text.items():
            if cat in self.text:
                self.text[cat].merge(text)
            else:
                self.text[cat] = text
        for cat, drift in later.drift.items():
            if cat in self.drift:
                self.drift[cat].merge(drift)
            else:
                self.drift[cat] = drift
        for cat, counts in later.skipped_sampled.items():
            mine_s = self.skipped_sampled.setdefault(cat, {})
            for n, k in counts.items():
                mine_s[n] = mine_s.get(n, 0) + k
        for route, sides in later.route_errors.items():
            per = self.route_errors.setdefault(route, {})
            for side, d in sides.items():
                got = per.setdefault(side, {"count": 0, "requests": 0})
                got["count"] += d["count"]
                got["requests"] += d["requests"]

    @classmethod
    def of(cls, comps: Iterable[CaseComparison]) -> RunDigest:
        """The digest of records already in case order (as the store yields them)."""
        digest = cls()
        for _, reps in groupby(comps, key=lambda c: c.case_id):
            digest.add(list(reps))
        return digest

    def drift_samples(self) -> dict[str, dict[str, DriftSamples]]:
        """category → format feature → paired values, what `format_drift` reads."""
        return {cat: tally.samples() for cat, tally in self.drift.items()}

    def text_json(self, category: str) -> dict[str, Any]:
        """The category's text-agreement figures as summary.json shows them."""
        t = self.text.get(category) or TextTally()
        div = sorted(t.divergence)
        return {
            "identical_rate": t.identical / t.pairs if t.pairs else None,
            "pairs": t.pairs,
            "similarity_mean": sum(t.similarity) / len(t.similarity) if t.similarity else None,
            "first_divergence_char_median": div[len(div) // 2] if div else None,
            "control_identical_rate": t.aa_identical / t.aa_pairs if t.aa_pairs else None,
        }
