"""Scorers are built once per case from its `checks`, then called per response.

Each family (one key of `checks`) is declared once, in its own module, with
`check_family` (spec, check names, scorer factory); importing this module
imports the built-in families, and that registers them. A family turns its
spec into one scorer per check name (`json` → `json_parse` + `json_schema`).
Because everything a scorer needs is in the stored case, `qualitycheck score
DIR` rebuilds the same scorers from the run store and never calls an
endpoint.

The judge family is declared but has no factory: it calls an endpoint and
is scored by its own stage.
"""

from __future__ import annotations

import traceback
from collections.abc import Iterable, Iterator
from typing import Any

# isort: off
# The built-in families, in the order a case's checks are listed and scored
# (importing a module declares its families, in the order they are written).
import qualitycheck.scoring._exact  # exact, regex, contains
import qualitycheck.scoring._structured  # json, yaml
import qualitycheck.scoring._sql
import qualitycheck.scoring._code  # unit_tests
import qualitycheck.scoring._tools  # tool_calls
import qualitycheck.scoring._judged  # judge
import qualitycheck.scoring._python  # noqa: F401

# isort: on
from qualitycheck.core._cases import Case
from qualitycheck.core._checks import check_registry
from qualitycheck.core._progress import Progress
from qualitycheck.core._records import Response, Score
from qualitycheck.scoring._base import BASELINE, NOT_FOR_SAMPLED, BrokenScorer, Outcome, Scorer

__all__ = [
    "build_scorers",
    "score_case",
    "score_store",
]


def build_scorers(case: Case) -> list[Scorer]:
    """Every deterministic scorer the case asks for, in `check_names()` order.

    A family whose factory raises, or builds scorers other than the names
    it declares for this spec, becomes one `error` scorer per declared name:
    the case's other checks still run, and the summary's check names always
    match `Case.check_names()`.
    """
    out: list[Scorer] = []
    for key, spec in case.checks.items():
        fam = check_registry[key]
        if fam.build is None:  # scored by its own stage (the judge)
            continue
        names = fam.names_of(spec)
        try:
            built = list(fam.build(spec, case))
        except Exception as exc:  # a fixture that will not load must not stop the other checks
            reason = f"cannot set up the {key} check: {type(exc).__name__}: {exc}"
            out.extend(BrokenScorer(n, reason) for n in names)
            continue
        got = [s.check for s in built]
        if sorted(got) != sorted(names):
            reason = f"the {key} family ({fam.origin}) built scorers {got} but declares {names} for this spec"
            out.extend(BrokenScorer(n, reason) for n in names)
            continue
        order = {n: i for i, n in enumerate(names)}
        out.extend(sorted(built, key=lambda s: order[s.check]))
    return out


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
    sampled = case.sampled
    baselines = {r.repeat: r for r in responses if r.target == BASELINE}
    out: list[Score] = []
    for r in responses:
        base = baselines.get(r.repeat) if r.target != BASELINE else None
        for s in scorers:
            if sampled and getattr(s, "against_baseline", False):
                oc = Outcome("skipped", None, {"reason": NOT_FOR_SAMPLED})
            elif r.error is not None:
                oc = Outcome("error", None, {"reason": f"no answer ({r.error.kind}): {r.error.message}"})
            else:
                try:
                    oc = s.score(r, base)
                except Exception as exc:
                    last = traceback.format_exception_only(exc)[-1].strip()
                    oc = Outcome("error", None, {"reason": f"scorer failed: {last}"})
            out.append(
                Score(
                    case_id=r.case_id, target=r.target, repeat=r.repeat, check=s.check, status=oc.status, value=oc.value, detail=oc.detail
                )
            )
    return out


def score_store(store: Any, *, workers: int | None = None, progress: Progress | None = None) -> int:
    """Recompute every deterministic score of a run from its stored cases and responses.

    Cases are scored in parallel (threads; the unit-test sandboxes are
    subprocesses, so threads are enough to keep every core busy) through a
    bounded window. Cases are read with their answers one at a time
    (`by_case`) and scores stream into the store as they are made, so only
    the window is in memory however large the run. The judge's scores are
    left in place. Returns how many scores were written. `progress` hears of
    each case as its scores are taken.
    """
    import os

    weak: set[str] = set()
    shown = progress or Progress()
    shown.start({"scoring": store.case_count()})

    def scored() -> Iterator[Score]:
        from collections import deque
        from concurrent.futures import Future, ThreadPoolExecutor

        n = workers or os.cpu_count() or 1
        pending: deque[Future[list[Score]]] = deque()
        with ThreadPoolExecutor(max_workers=n, thread_name_prefix="qc-score") as pool:
            for rec in store.by_case(scores=False):  # one case and its answers at a time, never the whole suite
                if rec.responses:
                    pending.append(pool.submit(score_case, rec.case, rec.responses))
                else:
                    shown.advance("scoring", True)
                while len(pending) > 4 * n or (pending and pending[0].done()):
                    yield from _noting_isolation(pending.popleft().result(), weak)
                    shown.advance("scoring", True)
            while pending:
                yield from _noting_isolation(pending.popleft().result(), weak)
                shown.advance("scoring", True)

    try:
        written = int(store.replace_scores(scored(), exclude=["judge"]))
    finally:
        shown.stop()
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
        print(
            f"qualitycheck: WARNING: unit tests ran with weaker isolation than a network-less namespace "
            f"sandbox ({', '.join(sorted(weak))}); see the scores' detail",
            file=sys.stderr,
        )
