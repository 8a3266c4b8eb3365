"""score_store: everything recomputed from the store, the judge's scores kept, errors never pass."""

from __future__ import annotations

from pathlib import Path

import pytest

from qualitycheck.core._cases import Case
from qualitycheck.core._records import ErrorInfo, Response, Score
from qualitycheck.core._store import RunStore
from qualitycheck.scoring import build_scorers, score_store


def _resp(case_id: str, target: str, text: str, repeat: int = 0, **kw: object) -> Response:
    return Response(case_id=case_id, target=target, repeat=repeat, fingerprint="f", text=text, **kw)  # type: ignore[arg-type]


def _store(tmp_path: Path) -> RunStore:
    cases = [
        Case(id="q1", category="qa", prompt="Capital of France?", checks={"exact": "Paris", "judge": "pairwise"}),
        Case(
            id="j1", category="json", prompt="Give JSON", checks={"json": {"schema": {"type": "object", "required": ["a"]}}, "exact": True}
        ),
    ]
    store = RunStore.create(tmp_path, {"suite_fingerprint": "x", "targets": {}, "repeats": 2}, cases)
    for rp in (0, 1):
        store.put_response(_resp("q1", "baseline", "Paris", rp))
        store.put_response(_resp("q1", "candidate", "Paris" if rp == 0 else "Lyon", rp))
        store.put_response(_resp("j1", "baseline", '{"a": 1}', rp))
    store.put_response(_resp("j1", "candidate", '```json\n{"a": 1}\n```', 0))
    store.put_response(_resp("j1", "candidate", "", 1, error=ErrorInfo(kind="timeout", message="no reply in 60 s")))
    return store


def test_scores_every_response_and_check_and_keeps_the_judge(tmp_path: Path) -> None:
    store = _store(tmp_path)
    judge = Score(case_id="q1", target="candidate", repeat=0, check="judge", status="pass", value=1.0)
    store.replace_scores([judge], checks=["judge"])
    n = score_store(store, workers=2)
    scores = {(s.case_id, s.target, s.repeat, s.check): s for s in store.scores()}
    assert n == len(scores) - 1 == 4 + 4 * 3 - 0  # q1: 4 responses × exact; j1: 4 × (json_parse, json_schema, exact)
    assert scores[("q1", "candidate", 0, "judge")] == judge
    assert scores[("q1", "candidate", 0, "exact")].status == "pass"
    assert scores[("q1", "candidate", 1, "exact")].status == "fail"
    # exact: true compares against the baseline's answer of the same repeat
    assert scores[("j1", "candidate", 0, "exact")].status == "fail"
    assert scores[("j1", "candidate", 0, "json_parse")].detail["same_as_baseline"] is True
    assert scores[("j1", "candidate", 0, "json_parse")].detail["strict"] is False
    for check in ("exact", "json_parse", "json_schema"):
        s = scores[("j1", "candidate", 1, check)]
        assert s.status == "error" and "timeout" in s.detail["reason"]
    # rescoring replaces, never duplicates
    assert score_store(store) == n
    store.close()


def test_judge_is_left_to_its_own_stage() -> None:
    case = Case(id="q", category="qa", prompt="p", checks={"judge": "pairwise", "regex": "x"})
    assert [s.check for s in build_scorers(case)] == ["regex"]


def test_streams_case_by_case_without_the_whole_suite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Holding every Case cost ~2.6 KB each (+53 MB at 20,000 cases): the stage must read them with their answers."""
    store = _store(tmp_path)
    n_before = score_store(store, workers=2)
    before = sorted(s.model_dump_json() for s in store.scores())

    def whole_suite(*a: object, **k: object) -> object:
        raise AssertionError("score_store must not load every case at once")

    monkeypatch.setattr(RunStore, "cases", whole_suite)
    monkeypatch.setattr(RunStore, "responses", whole_suite)
    assert score_store(store, workers=2) == n_before
    monkeypatch.undo()
    assert sorted(s.model_dump_json() for s in store.scores()) == before
    store.close()


def test_cases_without_answers_get_no_scores(tmp_path: Path) -> None:
    cases = [Case(id="a", category="qa", prompt="p", checks={"exact": "x"}), Case(id="b", category="qa", prompt="p", checks={"exact": "x"})]
    store = RunStore.create(tmp_path, {"suite_fingerprint": "x", "targets": {}, "repeats": 1}, cases)
    store.put_response(_resp("b", "baseline", "x"))
    assert score_store(store, workers=1) == 1
    assert [(s.case_id, s.status) for s in store.scores()] == [("b", "pass")]
    store.close()
