"""Text checks: exact match (against a reference or the baseline), regex, contains.

Normalisation is applied identically to both sides, so a reference written by
hand and an answer are compared on the same terms. Against the baseline
(`exact: true`) nothing is normalised unless the case asks: for speculative
decoding a changed trailing newline is a changed output. Against a reference
(`exact: "Paris"`) surrounding whitespace is stripped unless `strip: false`:
a reference typed by a person has no trailing newline, so keeping it would
fail every answer on a byte nobody meant to check. Every other step is opt-in
in both cases, and the score's detail lists the steps applied.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from qualitycheck.core._cases import Case
from qualitycheck.core._records import Response
from qualitycheck.scoring._base import CheckSpec, Outcome, Scorer, check_family

__all__ = ["ContainsCheck", "ContainsScorer", "ExactCheck", "ExactScorer", "RegexCheck", "RegexScorer", "normalise"]

_STEPS = ("strip", "collapse_whitespace", "ignore_case", "strip_trailing_punctuation")
"""The normalisation options of `exact`, in the order `normalise` applies them."""


class ExactCheck(CheckSpec):
    """`expected` None means "candidate must equal baseline" (`exact: true`); `exact: "Paris"` sets it.

    `strip` left out is resolved while validating (False against the
    baseline, True against a reference), so the stored spec says what was
    applied and rescoring a stored run applies the same.
    """

    expected: str | None = None
    strip: bool = False
    """Remove surrounding whitespace. Default: True with a reference, False against the baseline."""
    ignore_case: bool = False
    collapse_whitespace: bool = False
    strip_trailing_punctuation: bool = False

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        if isinstance(data, str):
            data = {"expected": data}
        elif data is True:
            data = {}
        if isinstance(data, dict) and "strip" not in data:
            data = {**data, "strip": data.get("expected") is not None}
        return data

    def steps(self) -> list[str]:
        """The normalisation steps this spec applies, in the order `normalise` applies them."""
        return [name for name in _STEPS if getattr(self, name)]


class RegexCheck(CheckSpec):
    """`regex: "..."` is the pattern with the defaults."""

    pattern: str
    mode: Literal["search", "fullmatch"] = "search"
    ignore_case: bool = False
    multiline: bool = False

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        return {"pattern": data} if isinstance(data, str) else data

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, v: str) -> str:
        try:
            re.compile(v)
        except re.error as exc:
            raise ValueError(f"not a valid regular expression: {exc}") from None
        return v


class ContainsCheck(CheckSpec):
    """`contains: "x"` and `contains: [..]` mean every one of them (`all`)."""

    all: list[str] = Field(default_factory=list)
    any: list[str] = Field(default_factory=list)
    none: list[str] = Field(default_factory=list)
    ignore_case: bool = True

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        if isinstance(data, str):
            return {"all": [data]}
        return {"all": data} if isinstance(data, list) else data


_TRAILING_PUNCT = ".,;:!?。！？"
_SNIPPET = 60


def normalise(text: str, spec: ExactCheck) -> str:
    """Apply the case's options in a fixed order: strip, collapse, case, punctuation.

    `strip` removes surrounding whitespace; `collapse_whitespace` turns every
    run of whitespace into one space (and strips); `ignore_case` casefolds
    (so "Straße" equals "STRASSE"); `strip_trailing_punctuation` drops
    trailing `.,;:!?` (and their CJK forms) after the other steps, with the
    whitespace before and after them (so "Paris.\n" ends as "Paris"). With
    every option off the text is returned unchanged: byte equality.
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
    for i, (x, y) in enumerate(zip(a, b, strict=False)):  # noqa: B007 - i is used after the loop
        if x != y:
            break
    else:
        i = min(len(a), len(b))
    lo = max(0, i - 20)
    return {"position": i, "answer_near": a[lo : i + _SNIPPET], "expected_near": b[lo : i + _SNIPPET]}


class ExactScorer:
    """`exact`: equal to the reference, or (no reference) to the baseline's answer.

    Without a reference the baseline passes by definition and every other
    target passes when its normalised answer (`Response.answer`: the text and
    its tool calls) equals the baseline's for the same repeat; with no baseline answer to compare to, the check cannot decide
    and scores `error`. Every detail carries `normalisation`, the steps
    applied to both sides (empty: byte equality), so a report reader sees
    why two different-looking answers were judged equal.
    """

    check = "exact"

    def __init__(self, spec: ExactCheck):
        self.spec = spec
        self._expected = None if spec.expected is None else normalise(spec.expected, spec)
        self._steps = spec.steps()
        self.against_baseline = spec.expected is None
        """Without a reference the check is identity with the baseline's answer: not for sampled cases."""

    def score(self, answer: Response, baseline: Response | None) -> Outcome:
        # against the baseline the whole answer counts, tool calls included; a reference is text
        got = normalise(answer.text if self._expected is not None else answer.answer, self.spec)
        if self._expected is not None:
            want, against = self._expected, "reference"
        elif answer.target == "baseline":
            return Outcome("pass", True, {"against": "baseline", "normalisation": list(self._steps), "is_baseline": True})
        elif baseline is None or baseline.error is not None:
            return Outcome(
                "error",
                None,
                {"against": "baseline", "normalisation": list(self._steps), "reason": "the baseline has no answer for this repeat"},
            )
        else:
            want, against = normalise(baseline.answer, self.spec), "baseline"
        if got == want:
            return Outcome("pass", True, {"against": against, "normalisation": list(self._steps)})
        return Outcome("fail", False, {"against": against, "normalisation": list(self._steps), **_first_difference(got, want)})


class RegexScorer:
    """`regex`: `search` anywhere in the answer, or `fullmatch` of the stripped answer."""

    check = "regex"

    def __init__(self, spec: RegexCheck):
        flags = (re.IGNORECASE if spec.ignore_case else 0) | (re.MULTILINE if spec.multiline else 0)
        self.spec = spec
        self._re = re.compile(spec.pattern, flags)

    def score(self, answer: Response, baseline: Response | None) -> Outcome:
        m = self._re.fullmatch(answer.text.strip()) if self.spec.mode == "fullmatch" else self._re.search(answer.text)
        if m is None:
            return Outcome("fail", None, {"pattern": self.spec.pattern, "mode": self.spec.mode})
        return Outcome("pass", m.group(0)[:200], {"pattern": self.spec.pattern, "mode": self.spec.mode, "span": list(m.span())})


class ContainsScorer:
    """`contains`: every `all` string, at least one `any` string, no `none` string."""

    check = "contains"

    def __init__(self, spec: ContainsCheck):
        self.spec = spec

    def score(self, answer: Response, baseline: Response | None) -> Outcome:
        fold: Callable[[str], str] = str.casefold if self.spec.ignore_case else str
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


@check_family("exact", spec=ExactCheck, names=("exact",))
def exact_family(spec: ExactCheck, case: Case) -> Sequence[Scorer]:
    return [ExactScorer(spec)]


@check_family("regex", spec=RegexCheck, names=("regex",))
def regex_family(spec: RegexCheck, case: Case) -> Sequence[Scorer]:
    return [RegexScorer(spec)]


@check_family("contains", spec=ContainsCheck, names=("contains",))
def contains_family(spec: ContainsCheck, case: Case) -> Sequence[Scorer]:
    return [ContainsScorer(spec)]
