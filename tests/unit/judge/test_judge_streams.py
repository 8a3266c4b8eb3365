"""The judge stage streams: it reads only the judged cases, one at a time, and judges them a window at a time."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from qualitycheck.core._cases import Case
from qualitycheck.core._records import Response
from qualitycheck.core._store import CaseRecords, RunStore
from qualitycheck.judge import _judge
from qualitycheck.judge._judge import score_judge
from qualitycheck.testserver import TestServer
from tests.unit.judge.conftest import judge_stage, prefer


def _store(folder: Path, judged: int, plain: int) -> RunStore:
    cases = [
        Case(id=f"j{i}", category="s", messages=[{"role": "user", "content": f"item {i}"}], checks={"judge": {"mode": "pairwise"}})
        for i in range(judged)
    ]
    cases += [
        Case(id=f"p{i}", category="s", messages=[{"role": "user", "content": f"plain {i}"}], checks={"exact": "x"}) for i in range(plain)
    ]
    store = RunStore.create(folder, {"targets": {}, "repeats": 1, "suite_fingerprint": "t"}, cases)
    for c in cases:
        store.put_response(Response(case_id=c.id, target="baseline", fingerprint="f", text="meh"))
        store.put_response(Response(case_id=c.id, target="candidate", fingerprint="f", text="GOOD answer"))
    return store


def test_the_judge_reads_judged_cases_one_at_a_time_and_judges_a_window_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = _store(tmp_path / "run", judged=7, plain=5)
    walked: list[str] = []
    started: list[int] = []  # how many judged cases the walk had read when each pair went to the judge
    by_case, judge_pair = RunStore.by_case, _judge._judge_pair

    def spy_walk(self: RunStore, **k: Any) -> Iterator[CaseRecords]:
        assert k.get("judged_only"), "the judge walked cases that ask for no judge"
        for rec in by_case(self, **k):
            walked.append(rec.case.id)
            yield rec

    def spy_pair(*a: Any) -> Any:
        started.append(len(walked))
        return judge_pair(*a)

    monkeypatch.setattr(RunStore, "by_case", spy_walk)
    monkeypatch.setattr(RunStore, "cases", lambda self: pytest.fail("the judge listed every case"))
    monkeypatch.setattr(_judge, "_judge_pair", spy_pair)
    monkeypatch.setattr(_judge, "JUDGE_WINDOW", 3)
    with TestServer(default=prefer("GOOD", "[[B]]")) as srv, store:
        stage = score_judge(store, *judge_stage(srv.url))
        scores = {s.case_id for s in store.scores() if s.check == "judge"}
    assert walked == [f"j{i}" for i in range(7)]
    assert started == [3, 3, 3, 6, 6, 6, 7]  # the first window left before the walk read a fourth case
    assert scores == {f"j{i}" for i in range(7)} and stage["pairs"] == 7
