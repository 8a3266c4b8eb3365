"""Everything after scoring reads the run store in one walk: each case is parsed once (issue #13)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from qualitycheck.core._config_file import Config
from qualitycheck.core._store import RunStore
from qualitycheck.pipeline._run import finish
from qualitycheck.report import REPORT_NAME
from qualitycheck.verdict._summary import SUMMARY_NAME
from tests.unit.verdict.verdict_builders import make_store

READERS = (
    "by_case",
    "responses_by_case",
    "comparisons_by_case",
    "comparisons_with_inputs",
    "comparison_bodies",
    "responses",
    "scores",
    "iter_cases",
)
"""Every RunStore method that reads cases, responses, scores or comparisons one at a time."""


def _rows(n: int) -> list[dict[str, Any]]:
    return [
        {
            "id": f"c{i}",
            "category": "qa" if i % 2 else "code",
            "texts": {"baseline": "Yes.", "candidate": "Yes." if i % 3 else "No."},
            "checks": {"exact": {"baseline": "pass", "candidate": "pass" if i % 3 else "fail"}},
        }
        for i in range(n)
    ]


def _counting(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    calls: dict[str, int] = {name: 0 for name in READERS}
    for name in READERS:
        original = getattr(RunStore, name)

        def wrapped(self: RunStore, *a: Any, _name: str = name, _original: Any = original, **k: Any) -> Iterator[Any]:
            if not (_name == "iter_cases" and k.get("by_id")):  # by_case reads its cases through iter_cases(by_id=True)
                calls[_name] += 1
            return _original(self, *a, **k)  # type: ignore[no-any-return]

        monkeypatch.setattr(RunStore, name, wrapped)
    return calls


@pytest.mark.parametrize("report", [True, False])
def test_finish_walks_the_store_once_after_scoring(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, report: bool) -> None:
    with make_store(tmp_path, _rows(12)) as store:
        calls = _counting(monkeypatch)
        finish(store, Config(), score=False, report=report)
        # the stored comparisons are merged into the same walk: a case whose rows did not change keeps its records
        assert calls == {**{name: 0 for name in READERS}, "by_case": 1, "comparisons_with_inputs": 1}, calls
        assert (tmp_path / SUMMARY_NAME).is_file() and (tmp_path / REPORT_NAME).is_file() == report


def test_scoring_then_one_walk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Scoring reads the answers in a pass of its own (it replaces the scores in one transaction); then one walk."""
    with make_store(tmp_path, _rows(6)) as store:
        calls = _counting(monkeypatch)
        finish(store, Config())
        assert calls["by_case"] == 2 and calls["comparisons_with_inputs"] == 1 and sum(calls.values()) == 3, calls


def test_the_report_of_the_walk_is_the_report_of_the_written_summary(tmp_path: Path) -> None:
    """`finish` ranks the report's rows during the summary's walk; `qualitycheck report` on the folder reads the same."""
    from qualitycheck.report import collect
    from qualitycheck.report._data import RowCollector
    from qualitycheck.verdict._summary import build_summary

    with make_store(tmp_path, _rows(30)) as store:
        for cap in (0, 2, 5, 100):
            rows = RowCollector(store, max_cases=cap)
            summary = build_summary(store, also=[rows.add])
            walked, again = rows.result(summary), collect(store, summary, max_cases=cap)
            assert [r.compact() for r in walked.rows] == [r.compact() for r in again.rows]
            assert (walked.flag_counts, walked.omitted, walked.category_flags) == (again.flag_counts, again.omitted, again.category_flags)


def test_finish_leaves_the_garbage_collector_as_it_found_it(tmp_path: Path) -> None:
    """The walk collects cycles less often (`core._process.few_collections`); a process that calls `finish` gets its settings back."""
    import gc

    before = (gc.get_threshold(), gc.get_freeze_count(), gc.isenabled())
    with make_store(tmp_path, _rows(4)) as store:
        finish(store, Config(), score=False)
    assert (gc.get_threshold(), gc.get_freeze_count(), gc.isenabled()) == before
