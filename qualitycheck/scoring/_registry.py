"""Scorers are built once per case from its `checks`, then called per response.

A family (one key of `Checks`) turns its spec into one or more scorers, one
per check name (`json` → `json_parse` + `json_schema`). Because everything a
scorer needs is in the stored case, `qualitycheck score DIR` rebuilds the
same scorers from the run store and never calls an endpoint.

The judge family is scored by its own stage (it calls an endpoint), so it is
deliberately absent here.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from qualitycheck.core._cases import Case
from qualitycheck.core._records import Response, Score, ScoreStatus

__all__ = [
    "BASELINE",
    "FAMILIES",
    "Outcome",
    "Scorer",
    "build_scorers",
    "score_case",
    "score_store",
]

BASELINE = "baseline"
"""Target that pairwise checks (`exact: true`, same-as-baseline) compare against."""


@dataclass(frozen=True)
class Outcome:
    """What a scorer decided about one answer, before it is tied to a response."""

    status: ScoreStatus
    value: Any = None
    detail: dict[str, Any] = field(default_factory=dict)


class Scorer(Protocol):
    """One check, configured from a case; `score` is called once per response.

    `baseline` is the baseline target's answer for the same repeat, or None
    when there is none (or when `answer` is the baseline's own).
    """

    check: str

    def score(self, answer: Response, baseline: Response | None) -> Outcome: ...


class _Broken:
    """Stands in for a family whose spec cannot be turned into a scorer.

    Every response then scores `error` with the reason, so a bad fixture
    shows up in the report instead of silently dropping a check.
    """

    def __init__(self, check: str, reason: str):
        self.check = check
        self.reason = reason

    def score(self, answer: Response, baseline: Response | None) -> Outcome:
        return Outcome("error", None, {"reason": self.reason})


def _exact(case: Case) -> list[Scorer]:
    from qualitycheck.scoring._exact import ExactScorer

    return [ExactScorer(case.checks.exact)]  # type: ignore[arg-type]


def _json(case: Case) -> list[Scorer]:
    from qualitycheck.scoring._structured import JsonParseScorer, JsonSchemaScorer

    spec = case.checks.json_
    out: list[Scorer] = [JsonParseScorer()]
    if spec is not None and spec.schema_ is not None:
        out.append(JsonSchemaScorer(spec.schema_))
    return out


def _config_formats(case: Case) -> list[Scorer]:
    from qualitycheck.scoring._structured import ConfigParseScorer

    return [ConfigParseScorer(case.checks.yaml_)]  # type: ignore[arg-type]


def _sql(case: Case) -> list[Scorer]:
    from qualitycheck.scoring._sql import SqlParseScorer, SqlResultScorer

    spec = case.checks.sql
    assert spec is not None
    out: list[Scorer] = [SqlParseScorer(spec)]
    if spec.db and spec.reference:
        try:
            out.append(SqlResultScorer(spec))
        except Exception as exc:  # the fixture or reference is broken; parsing can still be judged
            out.append(_Broken("sql_result", f"cannot set up the sql_result check: {type(exc).__name__}: {exc}"))
    return out


def _unit_tests(case: Case) -> list[Scorer]:
    from qualitycheck.scoring._code import UnitTestsScorer

    return [UnitTestsScorer(case.checks.unit_tests)]  # type: ignore[arg-type]


def _regex(case: Case) -> list[Scorer]:
    from qualitycheck.scoring._exact import RegexScorer

    return [RegexScorer(case.checks.regex)]  # type: ignore[arg-type]


def _contains(case: Case) -> list[Scorer]:
    from qualitycheck.scoring._exact import ContainsScorer

    return [ContainsScorer(case.checks.contains)]  # type: ignore[arg-type]


FAMILIES: dict[str, Callable[[Case], list[Scorer]]] = {
    "exact": _exact,
    "json_": _json,
    "sql": _sql,
    "unit_tests": _unit_tests,
    "yaml_": _config_formats,
    "regex": _regex,
    "contains": _contains,
}
"""`Checks` attribute → factory of that family's scorers (judge has its own stage)."""

_CHECKS_OF = {
    "exact": ("exact",),
    "json_": ("json_parse", "json_schema"),
    "sql": ("sql_parse", "sql_result"),
    "unit_tests": ("unit_tests",),
    "regex": ("regex",),
    "contains": ("contains",),
}


def build_scorers(case: Case) -> list[Scorer]:
    """Every deterministic scorer the case asks for, in `check_names()` order."""
    wanted = [n for n in case.check_names() if n != "judge"]
    out: list[Scorer] = []
    for attr, factory in FAMILIES.items():
        if getattr(case.checks, attr) is None:
            continue
        try:
            out.extend(factory(case))
        except Exception as exc:  # a fixture that will not load must not stop the other checks
            names = _CHECKS_OF.get(attr) or (f"{case.checks.yaml_.format}_parse",)  # type: ignore[union-attr]
            reason = f"cannot set up the {attr.rstrip('_')} check: {type(exc).__name__}: {exc}"
            out.extend(_Broken(n, reason) for n in names if n in wanted)
    order = {n: i for i, n in enumerate(wanted)}
    return sorted(out, key=lambda s: order.get(s.check, len(order)))


def score_case(case: Case, responses: Iterable[Response], scorers: list[Scorer] | None = None) -> list[Score]:
    """Score every response of one case (all targets and repeats).

    A response that carries an error scores `error` on every check: there is
    no answer to judge, and counting it as a fail would blame the model for
    the transport. A scorer that raises scores `error` with the traceback's
    last line, so one bad answer never aborts a run.
    """
    responses = list(responses)
    if scorers is None:
        scorers = build_scorers(case)
    baselines = {r.repeat: r for r in responses if r.target == BASELINE}
    out: list[Score] = []
    for r in responses:
        base = baselines.get(r.repeat) if r.target != BASELINE else None
        for s in scorers:
            if r.error is not None:
                oc = Outcome("error", None, {"reason": f"no answer ({r.error.kind}): {r.error.message}"})
            else:
                try:
                    oc = s.score(r, base)
                except Exception as exc:
                    last = traceback.format_exception_only(exc)[-1].strip()
                    oc = Outcome("error", None, {"reason": f"scorer failed: {last}"})
            out.append(Score(case_id=r.case_id, target=r.target, repeat=r.repeat, check=s.check,
                             status=oc.status, value=oc.value, detail=oc.detail))
    return out


def score_store(store: Any, *, workers: int | None = None) -> int:
    """Recompute every deterministic score of a run from its stored cases and responses.

    Cases are scored in parallel (threads; the unit-test sandboxes are
    subprocesses, so threads are enough to keep every core busy) through a
    bounded window. Cases are read with their answers one at a time
    (`by_case`) and scores stream into the store as they are made, so only
    the window is in memory however large the run. The judge's scores are
    left in place. Returns how many scores were written.
    """
    import os

    weak: set[str] = set()

    def scored() -> Iterator[Score]:
        from collections import deque
        from concurrent.futures import Future, ThreadPoolExecutor

        n = workers or os.cpu_count() or 1
        pending: deque[Future[list[Score]]] = deque()
        with ThreadPoolExecutor(max_workers=n, thread_name_prefix="qc-score") as pool:
            for rec in store.by_case(scores=False):  # one case and its answers at a time, never the whole suite
                if rec.responses:
                    pending.append(pool.submit(score_case, rec.case, rec.responses))
                while len(pending) > 4 * n or (pending and pending[0].done()):
                    yield from _noting_isolation(pending.popleft().result(), weak)
            while pending:
                yield from _noting_isolation(pending.popleft().result(), weak)

    written = int(store.replace_scores(scored(), exclude=["judge"]))
    _warn_weak_isolation(weak)
    return written


def _noting_isolation(batch: list[Score], weak: set[str]) -> list[Score]:
    for s in batch:
        if s.check == "unit_tests" and s.detail.get("isolation_weak") and s.detail.get("isolation"):
            weak.add(str(s.detail["isolation"]))
    return batch


def _warn_weak_isolation(weak: set[str]) -> None:
    import sys

    if weak:
        print(f"qualitycheck: WARNING: unit tests ran with weaker isolation than a network-less namespace "
              f"sandbox ({', '.join(sorted(weak))}); see the scores' detail", file=sys.stderr)
