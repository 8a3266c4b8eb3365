"""`run` records the preflight and /metrics windows; the serving summaries read them back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from qualitycheck.cli._main import main
from qualitycheck.core._records import MetricsWindows
from qualitycheck.core._store import RunStore
from qualitycheck.serving import acceptance_summary, latency_summary, slices_summary
from qualitycheck.testserver import TestServer
from tests.helpers import qa_cases, run_argv, write_suite


def _run(b: TestServer, c: TestServer, suite: Path, out: Path, *extra: str) -> int:
    return main(run_argv(b.url, c.url, suite, out, *extra, preflight=True))


def test_run_records_preflight_windows_per_category_and_summaries(tmp_path: Path) -> None:
    cases = qa_cases(3) + qa_cases(2, "json", tags={"tenant": "acme"})
    cases[0]["messages"].insert(0, {"role": "system", "content": "Be brief."})
    suite = write_suite(tmp_path / "s.jsonl", cases)
    with (
        TestServer(default="one two three") as b,
        TestServer(default="one two three", speculative={"k": 3, "acceptance": 0.5}, tokens_per_chunk=2) as c,
    ):
        _run(b, c, suite, tmp_path / "run", "--acceptance-by-category")
        spec = dict(c.counters)
    with RunStore.open(tmp_path / "run") as store:
        pre = store.artifact("preflight")
        windows = (store.record(MetricsWindows) or MetricsWindows()).windows
        acc = acceptance_summary(store)
        lat = latency_summary(store)
        sl = slices_summary(store)
    assert pre["ok"] is True and {ch["name"] for ch in pre["checks"]} >= {"tokenize", "served_model", "engine_version"}
    assert [w.category for w in windows] == ["qa", "json"]
    assert windows[0].sent["candidate"].requests == 3
    assert acc["draft_tokens"] == spec["draft_tokens"] and acc["accepted_tokens"] == spec["accepted"]
    assert set(acc["by_category"]) == {"qa", "json"}
    assert acc["speculating"] and not acc["baseline_speculating"] and acc["warnings"] == []
    assert lat["baseline"]["error_rate"] == 0.0 and lat["candidate"]["ttft_ms"]["p50"] is not None
    assert set(lat["per_category"]) == {"qa", "json"}
    assert sl["system_prompt"]["yes"]["cases"] == 1 and sl["system_prompt"]["no"]["cases"] == 4
    assert sl["tag:tenant"]["acme"]["cases"] == 2 and sl["route"]["qa"]["identical_rate"] == 1.0
    assert sl["output_length"]["1-32"]["cases"] == 5
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["acceptance"]["rate"] == pytest.approx(acc["rate"]) and summary["acceptance"]["baseline_speculating"] is False
    assert set(summary["latency"]["candidate"]["tpot_ms"]) == {"p50", "p95", "p99"}
    assert summary["slices"]["tag:tenant"]["acme"]["cases"] == 2
    assert summary["preflight"]["ok"] is True


def test_preflight_mismatch_is_recorded_but_does_not_stop_the_run(tmp_path: Path) -> None:
    suite = write_suite(tmp_path / "s.jsonl", qa_cases(2))
    with TestServer() as b, TestServer(chat_template="[{role}] {content}\n") as c:
        _run(b, c, suite, tmp_path / "run")
    with RunStore.open(tmp_path / "run") as store:
        pre = store.artifact("preflight")
        assert len(list(store.responses())) == 4
        acc = acceptance_summary(store)
    assert pre["ok"] is False and pre["mismatches"] == ["tokenize"]
    assert acc["rate"] is None and any("not active" in w for w in acc["warnings"])


def test_no_preflight_flag_skips_it(tmp_path: Path) -> None:
    suite = write_suite(tmp_path / "s.jsonl", qa_cases(1))
    with TestServer() as b, TestServer() as c:
        _run(b, c, suite, tmp_path / "run", "--no-preflight", "--no-likelihood")  # the likelihood stage tokenizes too
        assert not b.requests("/tokenize")
    with RunStore.open(tmp_path / "run") as store:
        assert store.artifact("preflight") is None
        assert len((store.record(MetricsWindows) or MetricsWindows()).windows) == 1


def test_resume_with_nothing_to_send_keeps_acceptance(tmp_path: Path) -> None:
    suite = write_suite(tmp_path / "s.jsonl", qa_cases(2))
    with TestServer() as b, TestServer(speculative={"k": 2, "acceptance": 1.0}) as c:
        _run(b, c, suite, tmp_path / "run", "--no-preflight")
        _run(b, c, suite, tmp_path / "run", "--no-preflight")
    with RunStore.open(tmp_path / "run") as store:
        assert len((store.record(MetricsWindows) or MetricsWindows()).windows) == 2
        assert acceptance_summary(store)["rate"] == pytest.approx(1.0)


def test_resume_by_category_asks_only_for_what_failed_in_each_window(tmp_path: Path) -> None:
    """Windows share one read of what is stored (their cases are disjoint); each still skips what is done."""
    from qualitycheck.testserver import Fault

    suite = write_suite(tmp_path / "s.jsonl", qa_cases(3) + qa_cases(2, "json"))
    with TestServer() as b, TestServer(faults=[Fault("status", match="json 1?", status=500, times=None)]) as c:
        _run(b, c, suite, tmp_path / "run", "--no-preflight", "--acceptance-by-category", "--retries", "0")
        c.faults.clear()
        _run(b, c, suite, tmp_path / "run", "--no-preflight", "--acceptance-by-category", "--retries", "0")
        assert len(b.requests("/chat/completions")) == 5
        assert len(c.requests("/chat/completions")) == 6
    with RunStore.open(tmp_path / "run") as store:
        windows = (store.record(MetricsWindows) or MetricsWindows()).windows
        assert all(r.ok for r in store.responses()) and len(list(store.responses())) == 10
    assert [w.category for w in windows] == ["qa", "json", "qa", "json"]
    assert [w.sent["candidate"].requests for w in windows] == [3, 2, 0, 1]
    assert [w.sent["baseline"].requests for w in windows] == [3, 2, 0, 0]
