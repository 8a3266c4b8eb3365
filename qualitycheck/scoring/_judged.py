"""The `judge` family: declared here so cases validate and list it, scored by the judge stage.

A judge calls an endpoint, so it is not a deterministic scorer: the family
has no scorer factory, `build_scorers` skips it, and `score_store` leaves
the `judge` scores the judge stage wrote.
"""

from __future__ import annotations

from typing import Any

from pydantic import model_validator

from qualitycheck.scoring._base import CheckSpec, declare_family

__all__ = ["JudgeCheck"]


class JudgeCheck(CheckSpec):
    """`judge: "pairwise"` names the mode with the defaults."""

    mode: str = "pairwise"
    """A judge definition in judges/: pairwise, rubric, reference, or a user's own."""
    rubric: str | None = None
    reference: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        return {"mode": data} if isinstance(data, str) else data


declare_family("judge", spec=JudgeCheck, names=("judge",), origin=__name__)
