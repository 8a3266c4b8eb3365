"""The compare stage keeps the records of cases whose stored rows did not change, and redoes the rest."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from qualitycheck.core._store import RunStore
from qualitycheck.pipeline._run import summarize
from qualitycheck.verdict import _compare
from qualitycheck.verdict._compare import compare_run
from tests.unit.verdict.summary_scenarios import SCENARIOS, drift_features


def _records(store: RunStore) -> list[tuple[str, int, str]]:
    return list(store._db.execute("SELECT case_id, repeat, body FROM comparisons ORDER BY case_id, repeat"))


@pytest.fixture
def compared(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The ids of the cases `compare_case` is called for."""
    seen: list[str] = []
    real = _compare.compare_case

    def spy(rec: Any, features: Any = None) -> Any:
        seen.append(rec.case.id)
        return real(rec, features)

    monkeypatch.setattr(_compare, "compare_case", spy)
    return seen


@pytest.mark.parametrize("name", ["repeats", "control", "errors"])
def test_an_unchanged_run_is_not_compared_again_and_summarises_the_same(name: str, tmp_path: Path, compared: list[str]) -> None:
    store, cfg = SCENARIOS[name](tmp_path / name)
    with store:
        first = summarize(store, cfg).to_json_text()
        records = _records(store)
        assert compared and records
        compared.clear()
        assert summarize(store, cfg).to_json_text() == first
        assert compared == [] and _records(store) == records


def test_only_the_changed_case_is_compared_and_the_table_is_what_a_full_compare_writes(tmp_path: Path, compared: list[str]) -> None:
    store, cfg = SCENARIOS["control"](tmp_path / "run")
    with store:
        summarize(store, cfg)
        changed = [s.model_copy(update={"status": "fail"}) if (s.case_id, s.target) == ("q5", "candidate") else s for s in store.scores()]
        store.replace_scores(changed)
        compared.clear()
        after = summarize(store, cfg).to_json_text()
        assert compared == ["q5"]
        records = _records(store)
    shutil.copytree(tmp_path / "run", tmp_path / "fresh")
    with RunStore.open(tmp_path / "fresh") as fresh:
        fresh._db.execute("DELETE FROM compared")  # nothing kept: every case is compared
        compared.clear()
        assert summarize(fresh, cfg).to_json_text() == after
        assert len(compared) == fresh.case_count() and _records(fresh) == records
    assert '"q5"' in after  # the changed score is in the verdict


def test_other_comparison_code_compares_every_case_again(tmp_path: Path, compared: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    store, _ = SCENARIOS["plain"](tmp_path / "run")
    with store:
        compare_run(store)
        assert any('"uppercase_share"' in body for _, _, body in _records(store))
        compared.clear()
        monkeypatch.setattr("qualitycheck.scoring._format.format_features", drift_features)  # the features the records hold change
        compare_run(store)
        assert len(compared) == store.case_count()
        assert not any('"uppercase_share"' in body for _, _, body in _records(store))
