"""Text checks: exact match (against a reference or the baseline), regex, contains.

Normalisation is opt-in per case and applied identically to both sides, so a
reference written by hand and an answer are compared on the same terms.
"""

from __future__ import annotations

import re

from qualitycheck.core._cases import ContainsCheck, ExactCheck, RegexCheck
from qualitycheck.core._records import Response
from qualitycheck.scoring._registry import Outcome

__all__ = ["ContainsScorer", "ExactScorer", "RegexScorer", "normalise"]

_TRAILING_PUNCT = ".,;:!?。！？"
_SNIPPET = 60


def normalise(text: str, spec: ExactCheck) -> str:
    """Apply the case's options in a fixed order: strip, collapse, case, punctuation.

    `strip` removes surrounding whitespace; `collapse_whitespace` turns every
    run of whitespace into one space (and strips); `ignore_case` casefolds
    (so "Straße" equals "STRASSE"); `strip_trailing_punctuation` drops
    trailing `.,;:!?` (and their CJK forms) after the other steps.
    """
    if spec.strip:
        text = text.strip()
    if spec.collapse_whitespace:
        text = " ".join(text.split())
    if spec.ignore_case:
        text = text.casefold()
    if spec.strip_trailing_punctuation:
        text = text.rstrip().rstrip(_TRAILING_PUNCT).rstrip()
    return text


def _first_difference(a: str, b: str) -> dict[str, object]:
    i = 0
    for i, (x, y) in enumerate(zip(a, b)):  # noqa: B007 - i is used after the loop
        if x != y:
            break
    else:
        i = min(len(a), len(b))
    lo = max(0, i - 20)
    return {"position": i, "answer_near": a[lo : i + _SNIPPET], "expected_near": b[lo : i + _SNIPPET]}


class ExactScorer:
    """`exact`: equal to the reference, or (no reference) to the baseline's answer.

    Without a reference the baseline passes by definition and every other
    target passes when its normalised text equals the baseline's for the same
    repeat; with no baseline answer to compare to, the check cannot decide
    and scores `error`.
    """

    check = "exact"

    def __init__(self, spec: ExactCheck):
        self.spec = spec
        self._expected = None if spec.expected is None else normalise(spec.expected, spec)

    def score(self, answer: Response, baseline: Response | None) -> Outcome:
        got = normalise(answer.text, self.spec)
        if self._expected is not None:
            want, against = self._expected, "reference"
        elif answer.target == "baseline":
            return Outcome("pass", True, {"against": "baseline", "is_baseline": True})
        elif baseline is None or baseline.error is not None:
            return Outcome("error", None, {"against": "baseline", "reason": "the baseline has no answer for this repeat"})
        else:
            want, against = normalise(baseline.text, self.spec), "baseline"
        if got == want:
            return Outcome("pass", True, {"against": against})
        return Outcome("fail", False, {"against": against, **_first_difference(got, want)})


class RegexScorer:
    """`regex`: `search` anywhere in the answer, or `fullmatch` of the stripped answer."""

    check = "regex"

    def __init__(self, spec: RegexCheck):
        flags = (re.IGNORECASE if spec.ignore_case else 0) | (re.MULTILINE if spec.multiline else 0)
        self.spec = spec
        self._re = re.compile(spec.pattern, flags)

    def score(self, answer: Response, baseline: Response | None) -> Outcome:
        if self.spec.mode == "fullmatch":
            m = self._re.fullmatch(answer.text.strip())
        else:
            m = self._re.search(answer.text)
        if m is None:
            return Outcome("fail", None, {"pattern": self.spec.pattern, "mode": self.spec.mode})
        return Outcome("pass", m.group(0)[:200], {"pattern": self.spec.pattern, "mode": self.spec.mode, "span": list(m.span())})


class ContainsScorer:
    """`contains`: every `all` string, at least one `any` string, no `none` string."""

    check = "contains"

    def __init__(self, spec: ContainsCheck):
        self.spec = spec

    def score(self, answer: Response, baseline: Response | None) -> Outcome:
        fold = (lambda s: s.casefold()) if self.spec.ignore_case else (lambda s: s)
        text = fold(answer.text)
        missing = [s for s in self.spec.all if fold(s) not in text]
        any_found = [s for s in self.spec.any if fold(s) in text]
        forbidden = [s for s in self.spec.none if fold(s) in text]
        detail: dict[str, object] = {}
        if missing:
            detail["missing"] = missing
        if self.spec.any and not any_found:
            detail["none_of_any"] = list(self.spec.any)
        if forbidden:
            detail["forbidden_found"] = forbidden
        return Outcome("fail" if detail else "pass", not detail, detail)
