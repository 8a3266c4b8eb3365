"""What every check family builds on: `Outcome`, the `Scorer` protocol and the declaration API.

This module imports no family, and families import only this module (plus
`core`), so the registry can import every family without a cycle.

Declaring a family is one decorator on its scorer factory::

    class Shout(CheckSpec):
        min_exclamations: int = 1

    @check_family("shout", spec=Shout, names=("shout",))
    def shout(spec: Shout, case: Case) -> list[Scorer]:
        return [ShoutScorer(spec)]

After that a case may write `"checks": {"shout": {"min_exclamations": 2}}`:
the key is validated against `Shout`, `Case.check_names()` lists `shout`,
and `score_store` scores it. An installed package makes its module known to
every run through the entry-point group `qualitycheck.checks`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from pydantic import BaseModel

from qualitycheck.core._checks import CheckFamily, CheckSpec, LoadContext, check_registry
from qualitycheck.core._records import Response, ScoreStatus

if TYPE_CHECKING:
    from qualitycheck.core._cases import Case

__all__ = ["BASELINE", "NOT_FOR_SAMPLED", "BrokenScorer", "CheckSpec", "LoadContext", "Outcome", "Scorer", "check_family", "declare_family"]

BASELINE = "baseline"
"""Target that pairwise checks (`exact: true`, same-as-baseline) compare against."""
NOT_FOR_SAMPLED = (
    "a check against the baseline's answer (identity, the judge's comparison) does not apply to a sampled case "
    "(temperature > 0): two samples differ by design; its other checks' pass rates are compared instead"
)
"""The reason an identity check, or the judge, scores `skipped` on a sampled case."""


@dataclass(frozen=True)
class Outcome:
    """What a scorer decided about one answer, before it is tied to a response."""

    status: ScoreStatus
    value: Any = None
    detail: dict[str, Any] = field(default_factory=dict)


class Scorer(Protocol):
    """One check, configured from a case; `score` is called once per response.

    `baseline` is the baseline target's answer for the same repeat, or None
    when there is none (or when `answer` is the baseline's own). A scorer
    whose verdict is identity with that answer (`exact: true`, the same tool
    calls) says so with a class attribute `against_baseline = True`: such a
    check does not apply to a sampled case, whose samples differ by design,
    and `score_case` skips it there.
    """

    check: str

    def score(self, answer: Response, baseline: Response | None) -> Outcome: ...


class BrokenScorer:
    """Stands in for a check whose spec cannot be turned into a scorer.

    Every response then scores `error` with the reason, so a bad fixture
    shows up in the report instead of silently dropping a check.
    """

    def __init__(self, check: str, reason: str):
        self.check = check
        self.reason = reason

    def score(self, answer: Response, baseline: Response | None) -> Outcome:
        return Outcome("error", None, {"reason": self.reason})


S = TypeVar("S", bound=BaseModel)


def declare_family(
    key: str,
    *,
    spec: type[S],
    names: Sequence[str],
    produces: Callable[[S], Sequence[str]] | None = None,
    build: Callable[[S, Case], Sequence[Scorer]] | None = None,
    load: Callable[[S, LoadContext], S] | None = None,
    origin: str = "",
) -> CheckFamily:
    """Register a family in the process's registry and return it (`build` None: another stage scores it)."""
    return check_registry.register(
        CheckFamily(key=key, spec=spec, names=tuple(names), produces=produces, build=build, load=load, origin=origin)
    )


def check_family(
    key: str,
    *,
    spec: type[S],
    names: Sequence[str],
    produces: Callable[[S], Sequence[str]] | None = None,
    load: Callable[[S, LoadContext], S] | None = None,
) -> Callable[[Callable[[S, Case], Sequence[Scorer]]], Callable[[S, Case], Sequence[Scorer]]]:
    """Decorate a scorer factory `(spec, case) -> scorers` to declare the family `key` (see the module doc).

    `names`: every check name the family can produce (reserved: a custom
    check may not take one); `produces(spec)`: the ones this spec produces,
    in order (default: all); `load(spec, ctx)`: checks and resolves a spec
    while its suite file is read (paths relative to `ctx.folder`; problems
    through `ctx.problem(field, message)`).
    """

    def decorate(factory: Callable[[S, Case], Sequence[Scorer]]) -> Callable[[S, Case], Sequence[Scorer]]:
        declare_family(
            key, spec=spec, names=names, produces=produces, build=factory, load=load, origin=f"{factory.__module__}.{factory.__qualname__}"
        )
        return factory

    return decorate
