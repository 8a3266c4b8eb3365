"""The A/A noise floor: how often the baseline disagrees with itself, and how many regressions that explains.

A pair is one case asked twice of the baseline (the control, the baseline
asked again where the candidate diverged, or two of its repeats); it
disagrees when a check decided it differently. Each (category, check) has its
own floor (`noise_floor`: its flaky cases, its flip rate), and the deployment
has one pooled over every greedy case of the run (`pooled_floor`: batching
noise belongs to the serving stack, not to a route or a check); both count
pairs the one way `_pairs_of` does. The regressions a floor explains are an
exact conditional test against its pairs (`regression_allowance`) and what
its measured rate itself explains (`supported_allowance`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from qualitycheck.verdict._memo import remembered
from qualitycheck.verdict._outcomes import CaseOutcome
from qualitycheck.verdict._tests import ALPHA

__all__ = [
    "NoiseFloor",
    "NoiseSource",
    "RouteQuality",
    "can_regress",
    "noise_floor",
    "pooled_floor",
    "regression_allowance",
    "supported_allowance",
]

NoiseSource = Literal["control", "repeats", "baseline_again"]
"""How an A/A noise floor was measured (`noise_floor`)."""


@dataclass(frozen=True)
class NoiseFloor:
    """How often the baseline disagrees with itself: for one (category, check), or pooled over the run."""

    measured_by: NoiseSource | None
    """'control', 'repeats', 'baseline_again', or None when the run cannot tell (no control, one repeat)."""
    pairs: int = 0
    """A/A pairs compared (baseline vs control at the same repeat, or repeat vs repeat)."""
    disagreements: int = 0
    flaky: tuple[str, ...] = ()
    """Cases whose baseline disagreed with itself (a cell's floor; the pooled floor lists none)."""

    @property
    def flip_rate(self) -> float | None:
        """Share of A/A pairs that decided differently."""
        return self.disagreements / self.pairs if self.pairs else None


def _pairs_of(case: Sequence[CaseOutcome], control: bool) -> tuple[int, int]:
    """One case's A/A pairs and disagreements over the checks given (one check: its own; all: the case's).

    With a control, a pair is the case at one repeat asked of both, and it
    disagrees when any of the checks decided it differently (checks hold the
    same pairs, in repeat order). With repeats, every two repeats of the
    baseline are a pair; the case's disagreements are those of its most
    divided check.
    """
    if control:
        most = max(len(o.control_pairs) for o in case)
        disagree = sum(any(i < len(o.control_pairs) and o.control_pairs[i][0] != o.control_pairs[i][1] for o in case) for i in range(most))
        return most, disagree
    r = max(len(o.baseline) for o in case)
    return r * (r - 1) // 2, max(sum(o.baseline) * (len(o.baseline) - sum(o.baseline)) for o in case)


def _floor_of(cases: Iterable[Sequence[CaseOutcome]], source: NoiseSource | None) -> NoiseFloor:
    """The floor of cases, each a group of outcomes (a check's, or all of a case's): from the control, else the repeats."""
    groups = list(cases)
    if any(o.control_pairs for case in groups for o in case):
        by: NoiseSource = "baseline_again" if source == "baseline_again" else "control"
        control = True
    elif any(len(o.baseline) > 1 for case in groups for o in case):
        by, control = "repeats", False
    else:
        return NoiseFloor(None)
    pairs = disagreements = 0
    for case in groups:
        p, d = _pairs_of(case, control)
        pairs += p
        disagreements += d
    return NoiseFloor(by, pairs, disagreements)


def noise_floor(outcomes: Sequence[CaseOutcome], source: NoiseSource | None = None) -> NoiseFloor:
    """One check's floor: A/A disagreement from the control target, or else from baseline repeats, and its flaky cases.

    `source="baseline_again"` says the control answers are the baseline asked
    again for the cases whose candidate text diverged only (the default
    floor, `generation._noise`); their pairs are measured the same way, and
    `classify_cases` then judges regressions among those cases only.
    """
    floor = _floor_of(([o] for o in outcomes), source)
    if floor.measured_by is None:
        return floor
    if floor.measured_by == "repeats":
        flaky = tuple(o.case_id for o in outcomes if len(set(o.baseline)) > 1)
    else:
        flaky = tuple(o.case_id for o in outcomes if any(b != k for b, k in o.control_pairs) or len(set(o.baseline)) > 1)
    return NoiseFloor(floor.measured_by, floor.pairs, floor.disagreements, flaky)


def pooled_floor(outcomes: Mapping[str, Mapping[str, Sequence[CaseOutcome]]], source: NoiseSource | None = None) -> NoiseFloor:
    """The deployment's one greedy noise floor: A/A disagreement over every re-asked case of the run, counted per case.

    Batching noise is a property of the serving stack, not of a route or a
    check, so it is measured once over all greedy cases and every route's
    regressions are weighed against it. A pair is one case asked twice (the
    control, the baseline again, or two of its repeats); it disagrees when
    any of the case's checks decided differently. Sampled cases are not
    part of it: they differ by design and are compared as distributions.
    """
    per_case: dict[str, list[CaseOutcome]] = {}
    for cells in outcomes.values():
        for outs in cells.values():
            for o in outs:
                if not o.sampled:
                    per_case.setdefault(o.case_id, []).append(o)
    return _floor_of(per_case.values(), source)


def can_regress(o: CaseOutcome, partial: bool, flaky: bool) -> bool:
    """Whether a greedy case counts among those that could regress (the E of `regression_allowance`).

    It passes on the baseline. With the baseline asked again only where the
    candidate diverged (`partial`), it is one of the cases asked again, flaky
    ones included: the A/A pairs and the regressions then come from one
    population. Otherwise it is any case the baseline agrees with itself on.
    """
    return o.b_rate > 0.5 and (bool(o.control_pairs) if partial else not flaky)


def regression_allowance(eligible: int, floor: NoiseFloor, alpha: float = ALPHA) -> int:
    """The most regressions among `eligible` cases that the measured noise alone explains at level `alpha`.

    Noise flips a passing case to failing at some rate q; the A/A pairs see
    disagreements at rate 2q (either direction). Comparing the two counts as
    Poisson rates, conditionally on their sum the regressions R are
    Binomial(R + D, E / (E + 2P)) under "no regression beyond noise"
    (E eligible cases, P A/A pairs, D disagreements). The allowance is the
    largest R this exact test does not reject, so it is calibrated even
    when the control saw no disagreement at all, and shrinks as the control
    grows (more repeats, more pairs). Without a measured floor it is 0.
    """
    if floor.measured_by is None or eligible <= 0 or floor.pairs <= 0:
        return 0

    def compute() -> int:
        from scipy import stats as sps

        p0 = eligible / (eligible + 2 * floor.pairs)
        allowed = 0
        for r in range(1, eligible + 1):
            if sps.binomtest(r, r + floor.disagreements, p0, alternative="greater").pvalue < alpha:
                break
            allowed = r
        return allowed

    return remembered("allowance", (eligible, floor.pairs, floor.disagreements, alpha), compute)


def supported_allowance(eligible: int, floor: NoiseFloor, alpha: float = ALPHA) -> int:
    """The most regressions the floor's measured rate itself explains: a Poisson count at that rate, at level `alpha`.

    `regression_allowance` also tolerates what a floor measured on few pairs
    cannot rule out: with 0 disagreements over 8 pairs it still allows a
    regression or two, because 8 pairs do not show the noise to be small.
    That is a lack of evidence, not noise: regressions tolerated only for it
    leave their route undecided (`verdict._status`). Here the rate is the
    one the pairs show at the least (the one-sided Clopper–Pearson lower
    bound of D / P at level `alpha`, halved: a pair's disagreement is a flip
    either way), so a floor that never disagreed supports none and one
    disagreement in two pairs supports little.
    """
    if floor.measured_by is None or eligible <= 0 or floor.pairs <= 0 or floor.disagreements <= 0:
        return 0

    def compute() -> int:
        from scipy import stats as sps

        low = float(sps.beta.ppf(alpha, floor.disagreements, floor.pairs - floor.disagreements + 1))
        lam = eligible * low / 2
        r = 0
        while sps.poisson.sf(r, lam) >= alpha:  # P(X ≥ r + 1) still plausible
            r += 1
        return r

    return remembered("supported_low", (eligible, floor.pairs, floor.disagreements, alpha), compute)


@dataclass(frozen=True)
class RouteQuality:
    """One route's greedy regressions weighed against the deployment's pooled floor."""

    route: str
    regressions: tuple[str, ...]
    """Greedy cases that regressed on some check (not flaky on it), each once."""
    eligible: int
    """Greedy cases that could regress: passing on the baseline, not flaky (with the baseline asked again
    only where the candidate diverged: the re-asked cases, flaky ones included)."""
    allowance: int
    """The most regressions the pooled floor explains at level alpha (`regression_allowance`)."""
    supported: int
    """The most the floor's measured rate itself explains (`supported_allowance`); below `allowance` when the
    floor rests on few pairs."""
