"""Every tally of the walk merges in case order: the first part merged with the rest is the tally of the whole.

What the split walk (`compare_run` over two processes) relies on, checked
for every place the walk could be cut, with the order-sensitive figures
(per-case outcomes in order, paired feature values in row order, first error
messages, rubric deltas) compared directly rather than through the summary.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from qualitycheck.core._records import ErrorInfo, Response, Score
from qualitycheck.core._store import CaseRecords
from qualitycheck.serving._errors import ErrorTally
from qualitycheck.verdict._compare import CaseComparison, compare_case
from qualitycheck.verdict._drift import DriftTally
from qualitycheck.verdict._judge_figures import JudgeTally
from qualitycheck.verdict._summary import _Tallies
from tests.unit.verdict.summary_scenarios import drift_features
from tests.unit.verdict.test_split_walk import mixed


@pytest.fixture(scope="module")
def walked(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[tuple[CaseRecords, list[CaseComparison]]]]:
    folder = tmp_path_factory.mktemp("mixed")
    store, _ = mixed(folder, n=40)
    with store:
        cases = [(rec, compare_case(rec, drift_features)) for rec in store.by_case()]
    return folder, cases


def _figures(t: _Tallies) -> dict[str, Any]:
    d = t.digest
    return {
        "outcomes": d.outcomes,
        "text": {cat: d.text_json(cat) for cat in d.text},
        "text_order": list(d.text),
        "similarity": {cat: list(x.similarity) for cat, x in d.text.items()},
        "drift": {cat: {n: (list(s.b), list(s.c), list(s.kb), list(s.k)) for n, s in x.samples().items()} for cat, x in d.drift.items()},
        "route_errors": d.route_errors,
        "latency": t.latency.summary(),
        "slices": t.slices.summary(),
        "judge": t.judge.summary(),
        "bias": t.judge.position_bias(),
    }


def test_the_summary_tallies_merge_at_any_cut(walked: tuple[Path, list[tuple[CaseRecords, list[CaseComparison]]]]) -> None:
    from qualitycheck.core._store import RunStore

    folder, cases = walked
    with RunStore.open(folder) as store:
        whole = _Tallies(store)
        for rec, comps in cases:
            whole.add(rec, comps)
        expected = _figures(whole)
        for cut in (1, 7, len(cases) // 2, len(cases) - 1):
            first, rest = _Tallies(store), _Tallies(store)
            for rec, comps in cases[:cut]:
                first.add(rec, comps)
            for rec, comps in cases[cut:]:
                rest.add(rec, comps)
            first.merge(pickle.loads(pickle.dumps(rest.part())))  # as the fork sends it
            assert _figures(first) == expected, cut


def _rows() -> Iterator[tuple[dict[str, Any], dict[str, Any], dict[str, Any] | None]]:
    """Paired features in three layouts, with loose rows (a string, a None) between them."""
    for i in range(30):
        if i % 5 == 0:
            yield {"a": float(i), "b": "x"}, {"a": i + 1.0, "b": "y"}, None  # not all numbers: a loose row
        elif i % 3 == 0:
            yield {"b": i, "a": True}, {"b": i * 2, "a": False}, {"b": 1, "a": True}
        else:
            yield {"a": i, "b": float("nan") if i == 7 else 0.5}, {"a": i + 2, "b": 0.25}, None


def test_drift_rows_merge_in_row_order() -> None:
    rows = list(_rows())
    whole = DriftTally()
    for r in rows:
        whole.add(*r)
    for cut, second_cut in ((1, 2), (5, 13), (13, 29), (0, 30)):  # three parts: a merged tally goes on numbering after both
        first, rest, last = DriftTally(), DriftTally(), DriftTally()
        for r in rows[:cut]:
            first.add(*r)
        for r in rows[cut:second_cut]:
            rest.add(*r)
        for r in rows[second_cut:]:
            last.add(*r)
        first.merge(pickle.loads(pickle.dumps(rest)))
        first.merge(pickle.loads(pickle.dumps(last)))
        got, want = first.samples(), whole.samples()
        assert list(got) == list(want), cut
        for name in want:
            for side in ("b", "c", "kb", "k"):
                np.testing.assert_array_equal(getattr(got[name], side), getattr(want[name], side), err_msg=f"{cut} {name} {side}")


def _failed(i: int, kind: str) -> Response:
    return Response(case_id=f"c{i}", target="candidate", fingerprint="f", error=ErrorInfo(kind=kind, message=f"{kind} #{i}"))


def test_error_kinds_merge_keeping_each_kinds_first_message() -> None:
    responses = [_failed(i, "timeout" if i % 3 else "connection") for i in range(2, 12)]
    whole = ErrorTally.of(responses)
    for cut in (1, 2, 5):
        first, rest = ErrorTally.of(responses[:cut]), ErrorTally.of(responses[cut:])
        first.merge(pickle.loads(pickle.dumps(rest)))
        assert first.kinds() == whole.kinds(), cut


def test_judge_figures_merge_with_their_deltas_in_order() -> None:
    scores = [
        Score(
            case_id=f"c{i}",
            target="candidate",
            check="judge",
            status="pass",
            value=("win", "loss", "tie")[i % 3],
            detail={"kind": "single", "rubric_delta": float(i % 4) - 1.5, "positions": ["a", "b"][:: 1 if i % 2 else -1]},
        )
        for i in range(24)
    ]
    whole = JudgeTally(seed=3)
    for s in scores:
        whole.add_score(s, "cat" if s.case_id < "c2" else "other")
    for cut in (1, 9, 20):
        first, rest = JudgeTally(seed=3), JudgeTally(seed=3)
        for s in scores[:cut]:
            first.add_score(s, "cat" if s.case_id < "c2" else "other")
        for s in scores[cut:]:
            rest.add_score(s, "cat" if s.case_id < "c2" else "other")
        first.merge(pickle.loads(pickle.dumps(rest)))
        assert first.summary() == whole.summary(), cut
        assert first._acc == whole._acc, cut  # the rubric deltas in order (the CI's bootstrap reads them in order)
