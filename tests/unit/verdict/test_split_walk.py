"""The walk of the store over two processes writes what one walk writes (`compare_run`, `SplitTally`).

Each run is built twice, byte for byte alike, and walked once by one process
and once split over two (the second process forked, its tallies merged):
summary.json, signoff.md, report.html and the terminal output must be the
same, on the first summary (every comparison made afresh, half of them by the
fork) and on a report of the finished run (every record read back).
"""

from __future__ import annotations

import gc
import os
import re
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from qualitycheck.core._config_file import Config
from qualitycheck.core._records import ErrorInfo, Response, Score, Usage
from qualitycheck.core._store import RunStore
from qualitycheck.pipeline._run import finish, summarize
from qualitycheck.report._data import RowCollector, _mixed, _Reservoir, _Spill
from qualitycheck.report._html import render_html
from qualitycheck.verdict import _compare
from tests.unit.verdict.summary_scenarios import SCENARIOS, drift_features
from tests.unit.verdict.verdict_builders import make_store

Make = Callable[[Path], tuple[RunStore, Config]]


def mixed(folder: Path, n: int = 90) -> tuple[RunStore, Config]:
    """Every kind of case in one run: a control, two repeats, errors of two kinds, streamed timings, judge scores, routes."""
    rows: list[dict[str, Any]] = []
    for i in range(n):
        differs, broken = i % 7 == 0, i % 11 == 0
        row: dict[str, Any] = {
            "id": f"m{i:03d}",
            "category": f"cat{i % 4}",
            "texts": {
                "baseline": f"answer {i}",
                "candidate": [f"answer {i}", f"answer {i} changed" if differs else f"answer {i}"],
                "control": [f"answer {i}", f"answer {i}!" if i % 13 == 0 else f"answer {i}"],
            },
            "checks": {
                "exact": {
                    "baseline": "pass",
                    "candidate": ["pass", "fail" if differs else "pass"],
                    "control": ["pass", "fail" if i % 13 == 0 else "pass"],
                },
                "contains": {"baseline": "fail" if i % 5 == 0 else "pass", "candidate": "pass", "control": "pass"},
            },
        }
        if i % 3 == 0:
            row["route"] = f"r{i % 2}"
        if broken:
            row["texts"]["candidate"] = [None, f"answer {i}"]
            row["checks"]["exact"]["candidate"] = ["error", "pass"]
        rows.append(row)
    store = make_store(folder, rows, targets=("baseline", "candidate", "control"), repeats=2)
    for i, row in enumerate(rows):  # streamed timings: gaps of every length, some chunks carrying several tokens
        for target in ("baseline", "candidate"):
            n_chunks = 2 + (i * 7 + len(target)) % 9
            times = [0.05 + 0.003 * k * (1 + (i % 3)) for k in range(n_chunks)]
            kind = "timeout" if i % 17 == 0 else "http_status"
            error = ErrorInfo(kind=kind, message=f"{kind} on {i}", status=None if kind == "timeout" else 500) if i % 23 == 5 else None
            store.put_response(
                Response(
                    case_id=row["id"],
                    target=target,
                    repeat=0,
                    fingerprint="f",
                    text="" if error else f"answer {i}",
                    finish_reason="stop",
                    usage=Usage(prompt_tokens=10 + i, completion_tokens=n_chunks * (2 if target == "candidate" else 1)),
                    ttft_s=times[0],
                    chunk_times=times,
                    chunk_tokens=[2] * n_chunks if target == "candidate" and i % 2 else None,
                    e2e_s=times[-1] + 0.001,
                    started_at=1.7e9 + i,
                    error=error,
                )
            )
    judged = [
        Score(
            case_id=f"m{i:03d}",
            target="candidate",
            check="judge",
            status="pass" if i % 4 else "fail",
            value="win" if i % 4 else "loss",
            detail={"kind": "pairwise", "position_consistent": i % 3 != 0, "positions": ["a", "b"]},
        )
        for i in range(0, n, 2)
    ]
    store.replace_scores(
        [*judged, *(Score(case_id=s.case_id, target="baseline", check="judge", status="pass") for s in judged)], checks=["judge"]
    )
    return store, Config()


RUNS: dict[str, Make] = {**SCENARIOS, "mixed": mixed}


@pytest.fixture
def forced(monkeypatch: pytest.MonkeyPatch) -> Callable[[bool], list[bool]]:
    """`forced(split)`: every walk from now on splits (or not); the list returned records whether each fork finished."""
    finished: list[bool] = []
    original = _compare._SecondHalf.finished

    def spy(self: Any, **kwargs: Any) -> bool:
        finished.append(original(self, **kwargs))
        return finished[-1]

    monkeypatch.setattr(_compare._SecondHalf, "finished", spy)

    def force(split: bool) -> list[bool]:
        monkeypatch.setattr(_compare, "_may_split", lambda store, workers: split)
        return finished

    return force


def _outputs(folder: Path, err: str) -> dict[str, str]:
    html = (folder / "report.html").read_text(encoding="utf-8")
    html = re.sub(r"nonce-[A-Za-z0-9_+/=-]+|nonce=\"[^\"]*\"", "NONCE", html)
    return {
        "summary": (folder / "summary.json").read_text(encoding="utf-8"),
        "signoff": (folder / "signoff.md").read_text(encoding="utf-8"),
        "html": html.replace(str(folder), "RUN"),
        "terminal": err.replace(str(folder), "RUN"),
        "comparisons": repr(_table(folder, "SELECT * FROM comparisons ORDER BY case_id, repeat")),
        "compared": repr(_table(folder, "SELECT * FROM compared ORDER BY case_id")),
    }


def _table(folder: Path, query: str) -> list[Any]:
    with RunStore.open(folder) as store:
        return store._db.execute(query).fetchall()


def _finished(make: Make, folder: Path, capsys: pytest.CaptureFixture[str]) -> tuple[dict[str, str], dict[str, str]]:
    """The outputs of the first summary of a run (compared afresh) and of a report of it afterwards (records read back)."""
    store, cfg = make(folder)
    store.set_meta("created_at", 1.7e9)
    got = []
    with store:
        for _ in range(2):
            capsys.readouterr()
            finish(store, cfg, score=False)
            got.append(_outputs(folder, capsys.readouterr().err))
    return got[0], got[1]


@pytest.mark.parametrize("name", sorted(RUNS))
def test_two_processes_write_what_one_writes(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, forced: Callable[[bool], list[bool]], capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("qualitycheck.scoring._format.format_features", drift_features)  # the golden files' features
    forced(False)
    one = _finished(RUNS[name], tmp_path / "one", capsys)
    finished = forced(True)
    two = _finished(RUNS[name], tmp_path / "two", capsys)
    assert finished == [True, True]  # both walks were split, and the fork's half was merged
    for first, second in zip(one, two):
        for key in first:
            assert second[key] == first[key], f"{name}: {key} differs when the walk is split"


def test_a_failed_fork_is_walked_again_by_the_parent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, forced: Callable[[bool], list[bool]], capsys: pytest.CaptureFixture[str]
) -> None:
    forced(False)
    one = _finished(mixed, tmp_path / "one", capsys)
    finished = forced(True)

    def fail(*args: Any) -> None:
        import os

        os._exit(3)

    monkeypatch.setattr(_compare, "_walk_second", fail)
    two = _finished(mixed, tmp_path / "two", capsys)
    assert finished == [False, False]
    assert two == one


@pytest.fixture
def own_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A temporary folder of this test's for every temporary file the walk makes, to see what it leaves behind."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def test_a_fork_the_system_refuses_leaves_the_walk_in_one_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, forced: Callable[[bool], list[bool]], capsys: pytest.CaptureFixture[str], own_tmp: Path
) -> None:
    forced(False)
    one = _finished(mixed, tmp_path / "one", capsys)
    finished = forced(True)

    def refuse() -> int:
        raise BlockingIOError(11, "Resource temporarily unavailable")  # fork's EAGAIN at a process limit

    monkeypatch.setattr(os, "fork", refuse)
    two = _finished(mixed, tmp_path / "two", capsys)
    assert finished == []  # never forked
    assert two == one
    assert list(own_tmp.iterdir()) == []


def test_a_stuck_fork_is_stopped_and_its_half_walked_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, forced: Callable[[bool], list[bool]], capsys: pytest.CaptureFixture[str], own_tmp: Path
) -> None:
    forced(False)
    one = _finished(mixed, tmp_path / "one", capsys)
    finished = forced(True)

    def hang(*args: Any) -> None:
        time.sleep(3600)
        os._exit(0)

    monkeypatch.setattr(_compare, "_walk_second", hang)
    monkeypatch.setattr(_compare, "SECOND_HALF_GRACE_S", 0.2)
    two = _finished(mixed, tmp_path / "two", capsys)
    assert finished == [False, False]
    assert two == one
    assert list(own_tmp.iterdir()) == []  # the stuck fork's folder went with it


def test_a_split_walk_leaves_no_temporary_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, forced: Callable[[bool], list[bool]], own_tmp: Path
) -> None:
    finished = forced(True)
    _summary_and_report(mixed, tmp_path / "run", max_cases=0, itl_sample=5)  # both processes spill their waiting rows to files
    assert finished == [True]
    assert list(own_tmp.iterdir()) == []


@dataclass
class _Row:
    id: str


def test_a_spill_dropped_without_close_deletes_its_file(own_tmp: Path) -> None:
    spill = _Spill(limit=0)
    spill.put(_Row("a"))  # type: ignore[arg-type]
    assert len(list(own_tmp.iterdir())) == 1
    spill._db.close()
    del spill
    gc.collect()
    assert list(own_tmp.iterdir()) == []


def test_a_reservoir_of_size_zero_keeps_nothing() -> None:
    r = _Reservoir(0)
    r.add(np.arange(5.0), _keys(5, 1))
    assert r.seen == 5 and r.values().tolist() == []


def _summary_and_report(make: Make, folder: Path, *, max_cases: int, itl_sample: int) -> tuple[str, str]:
    store, cfg = make(folder)
    store.set_meta("created_at", 1.7e9)
    with store:
        rows = RowCollector(store, max_cases=max_cases, itl_sample=itl_sample)
        summary = summarize(store, cfg, also=[rows])
        html = str(render_html(rows.result(summary)))
    return summary.to_json_text(), re.sub(r"nonce-[A-Za-z0-9_+/=-]+|nonce=\"[^\"]*\"", "NONCE", html).replace(str(folder), "RUN")


@pytest.mark.parametrize(("max_cases", "itl_sample"), [(3, 40), (0, 5), (40, 100_000)])
def test_the_merged_rows_and_samples_are_one_walks(
    max_cases: int, itl_sample: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, forced: Callable[[bool], list[bool]]
) -> None:
    """A tiny cap (the rows kept and those waiting for the statistics spill to a file in each process) and a tiny ITL bound."""
    forced(False)
    one = _summary_and_report(mixed, tmp_path / "one", max_cases=max_cases, itl_sample=itl_sample)
    finished = forced(True)
    two = _summary_and_report(mixed, tmp_path / "two", max_cases=max_cases, itl_sample=itl_sample)
    assert finished == [True]
    assert two[0] == one[0]
    assert two[1] == one[1]
    if itl_sample == 40:
        assert "histogram of a uniform random sample: baseline 40 of" in one[1]


def test_latency_bucketed_past_its_bound_is_bucketed_alike(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, forced: Callable[[bool], list[bool]]
) -> None:
    """A side past `EXACT_SAMPLES` (held by both processes together, neither alone) is bucketed in the merge as in one walk."""
    monkeypatch.setattr("qualitycheck.serving._latency.EXACT_RESPONSES", 10)
    monkeypatch.setattr("qualitycheck.serving._latency.EXACT_SAMPLES", 700)
    forced(False)
    one = _summary_and_report(mixed, tmp_path / "one", max_cases=10, itl_sample=1000)
    forced(True)
    two = _summary_and_report(mixed, tmp_path / "two", max_cases=10, itl_sample=1000)
    assert '"percentiles": "approximate' in one[0]
    assert two == one


def _threads_from_now(monkeypatch: pytest.MonkeyPatch) -> None:
    """Count only the threads started from here on, plus this one (a test runner may run threads of its own)."""
    before = len(threading.enumerate())
    monkeypatch.setattr(threading, "active_count", lambda: len(threading.enumerate()) - before + 1)


def test_one_process_when_threads_run_or_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _threads_from_now(monkeypatch)
    store, _ = mixed(tmp_path, n=4)
    with store:
        assert _compare._may_split(store, workers=2)
        assert not _compare._may_split(store, workers=1)
        assert not _compare._may_split(store, workers=None)  # 4 cases: below SPLIT_MIN_CASES
        stop = threading.Event()
        thread = threading.Thread(target=stop.wait)
        thread.start()
        try:
            assert not _compare._may_split(store, workers=2)  # a fork would copy only this thread
        finally:
            stop.set()
            thread.join()


def test_a_large_run_splits_only_with_a_core_free(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    _threads_from_now(monkeypatch)
    store, _ = mixed(tmp_path, n=4)
    monkeypatch.setattr(_compare, "SPLIT_MIN_CASES", 4)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    with store:
        monkeypatch.setattr(_compare, "others_running", lambda: 0)
        monkeypatch.setattr(os, "getloadavg", lambda: (1.9, 1.9, 1.9))  # a run that ended seconds ago: the lagging average does not decide
        assert _compare._may_split(store, workers=None)
        monkeypatch.setattr(_compare, "others_running", lambda: 1)  # the second core is busy: one process is faster
        monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))
        assert not _compare._may_split(store, workers=None)
        assert _compare._may_split(store, workers=2)  # asked for: split whatever the load
        monkeypatch.setattr(_compare, "others_running", lambda: None)  # no count from the kernel: the 1-minute average
        assert _compare._may_split(store, workers=None)
        monkeypatch.setattr(os, "getloadavg", lambda: (1.6, 0.3, 0.3))
        assert not _compare._may_split(store, workers=None)
        monkeypatch.setattr(_compare, "others_running", lambda: 0)
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
        assert not _compare._may_split(store, workers=None)  # one core


def _keys(n: int, seed: int) -> np.ndarray:
    return _mixed(np.arange(n, dtype=np.uint64) + np.uint64(seed << 32))


@pytest.mark.parametrize("n", [7, 300, 5_000])
def test_the_gap_sample_does_not_depend_on_where_the_stream_is_cut(n: int) -> None:
    values, keys = np.random.default_rng(1).random(n), _keys(n, 5)
    whole = _Reservoir(100)
    for v, k in zip(np.array_split(values, 13), np.array_split(keys, 13)):
        whole.add(v, k)
    for cut in (0, 1, n // 3, n - 1, n):
        first, second = _Reservoir(100), _Reservoir(100)
        first.add(values[:cut], keys[:cut])
        for v, k in zip(np.array_split(values[cut:], 5), np.array_split(keys[cut:], 5)):
            second.add(v, k)
        first.merge(second)
        assert first.seen == whole.seen == n
        assert first.values().tolist() == whole.values().tolist()
    if n <= 100:
        assert whole.values().tolist() == values.tolist()  # under the bound: every value in arrival order
    else:
        assert sorted(whole.values().tolist()) == sorted(values[np.argsort(keys)[:100]].tolist())  # the smallest keys
