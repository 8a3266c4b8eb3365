"""`exact`: byte equality against the baseline, stripped references, every other step opt-in and named in the detail."""

from __future__ import annotations

from typing import Any

import pytest

from qualitycheck.core._cases import Case
from qualitycheck.scoring import ExactCheck
from tests.unit.scoring.conftest import check_row


def _row(output: str, exact: Any, status: str, *, baseline: str | None = None, **detail: Any) -> dict[str, Any]:
    row: dict[str, Any] = {"output": output, "checks": {"exact": exact}, "expect": {"exact": status}}
    if baseline is not None:
        row["baseline"] = baseline
    if detail:
        row["detail"] = {"exact": detail}
    return row


def test_same_as_baseline_is_byte_equal_a_lost_trailing_newline_fails() -> None:
    check_row(_row("Paris", True, "fail", baseline="Paris\n", against="baseline", normalisation=[], position=5))


def test_same_as_baseline_with_strip_ignores_the_trailing_newline() -> None:
    check_row(_row("Paris", {"strip": True}, "pass", baseline="Paris\n", against="baseline", normalisation=["strip"]))


@pytest.mark.parametrize(
    ("candidate", "baseline"),
    [
        ("Paris ", "Paris"),  # a trailing space
        ("Paris\r\n", "Paris\n"),  # a changed line ending
        (" Paris", "Paris"),  # a leading space
        ("paris", "Paris"),  # letter case
        ("a  b", "a b"),  # inner whitespace
        ("Paris.", "Paris"),  # trailing punctuation
    ],
)
def test_same_as_baseline_normalises_nothing_by_default(candidate: str, baseline: str) -> None:
    check_row(_row(candidate, True, "fail", baseline=baseline, normalisation=[]))


@pytest.mark.parametrize(
    ("option", "candidate", "baseline"),
    [
        ("ignore_case", "paris", "Paris"),
        ("collapse_whitespace", "a  b\n", "a b"),
        ("strip_trailing_punctuation", "Paris.", "Paris"),
    ],
)
def test_same_as_baseline_each_step_is_opt_in(option: str, candidate: str, baseline: str) -> None:
    check_row(_row(candidate, {option: True}, "pass", baseline=baseline, normalisation=[option]))


def test_a_reference_strips_surrounding_whitespace_and_says_so() -> None:
    check_row(_row("Paris\n", "Paris", "pass", against="reference", normalisation=["strip"]))
    check_row(_row(" Paris", {"expected": "Paris"}, "pass", normalisation=["strip"]))


def test_a_reference_with_strip_false_is_byte_equal() -> None:
    check_row(_row("Paris\n", {"expected": "Paris", "strip": False}, "fail", normalisation=[], position=5))
    check_row(_row("Paris", {"expected": "Paris", "strip": False}, "pass", normalisation=[]))


def test_the_detail_lists_every_step_applied_in_order() -> None:
    spec = {"expected": "order #123 is shipped", "strip_trailing_punctuation": True, "ignore_case": True, "collapse_whitespace": True}
    check_row(
        _row(
            "ORDER  #123\n is shipped.",
            spec,
            "pass",
            normalisation=["strip", "collapse_whitespace", "ignore_case", "strip_trailing_punctuation"],
        )
    )


def test_the_baseline_itself_and_a_missing_baseline_carry_the_normalisation() -> None:
    check_row(
        {
            "output": "x",
            "target": "baseline",
            "checks": {"exact": True},
            "expect": {"exact": "pass"},
            "detail": {"exact": {"normalisation": [], "is_baseline": True}},
        }
    )
    check_row(
        {
            "output": "x",
            "target": "candidate",
            "checks": {"exact": {"strip": True}},
            "expect": {"exact": "error"},
            "detail": {"exact": {"normalisation": ["strip"]}},
        }
    )


def test_the_spec_states_the_resolved_default() -> None:
    assert ExactCheck.model_validate(True).strip is False
    assert ExactCheck.model_validate({}).strip is False
    assert ExactCheck.model_validate("Paris").strip is True
    assert ExactCheck.model_validate({"expected": "Paris", "strip": False}).strip is False
    assert ExactCheck.model_validate({"strip": True}).strip is True


def test_a_stored_case_rescored_applies_what_its_spec_says() -> None:
    """The store keeps the dumped spec: a case read back compares exactly as it was written."""
    for checks, strip in (({"exact": True}, False), ({"exact": "Paris"}, True), ({"exact": {"strip": True}}, True)):
        case = Case(id="c", category="qa", prompt="p", checks=checks)
        back = Case.model_validate(case.model_dump(mode="json", by_alias=True, exclude_none=True))
        assert back.checks["exact"] == case.checks["exact"] and back.checks["exact"].strip is strip  # type: ignore[attr-defined]
