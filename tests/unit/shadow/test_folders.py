"""Run folders a shadow proxy writes: rotation, merge, /metrics windows, and the verdict `gate` reads from them."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from qualitycheck.core._config import parse_rotation
from qualitycheck.core._errors import StoreError
from qualitycheck.core._records import MetricsWindows, NoiseFloorRecord, ShadowPeriods
from qualitycheck.core._store import RunStore
from qualitycheck.pipeline._merge import merge_runs
from qualitycheck.pipeline._run import redo
from qualitycheck.testserver import TestServer

from .conftest import Proxy, shadow_config
from .test_forwarding import call, chat


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("100000", (100000, None)),
        ("90s", (None, 90.0)),
        ("30m", (None, 1800.0)),
        ("6h", (None, 21600.0)),
        ("1d", (None, 86400.0)),
        ("1w", (None, 604800.0)),
    ],
)
def test_rotation_is_a_number_of_pairs_or_a_duration(text: str, parsed: tuple[int | None, float | None]) -> None:
    assert parse_rotation(text) == parsed


@pytest.mark.parametrize("bad", ["0", "-5", "5x", "m", "1.5", ""])
def test_other_rotations_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="number of pairs"):
        parse_rotation(bad)


def test_rotation_by_pairs_closes_each_folder_and_merge_makes_one_verdict(servers: Any, proxy_for: Any, tmp_path: Path) -> None:
    base, cand = servers
    p = proxy_for(shadow_config(base.url, cand.url, rotate_every="3", summarize_rotated=False), out=tmp_path / "week")
    for i in range(7):
        assert call(p.url, "/v1/chat/completions", chat(f"question {i}", temperature=0))[0] == 200
        p.settled()
        want = 1 + (i + 1) // 3
        p.wait_for(lambda: len(p.recorder.folders) == want, "the rotation")  # noqa: B023  (called before the loop moves on)
    p.stop()
    folders = sorted((tmp_path / "week").iterdir())
    assert [f.name for f in folders] == [f.name for f in p.recorder.folders]
    counts = []
    for f in folders:
        with RunStore.open(f) as store:
            counts.append(store.case_count())
            assert store.manifest["cases"] == counts[-1]
            assert len(store.record_or_empty(MetricsWindows).windows) >= 1  # each folder has its own acceptance window
        period = json.loads((f / "shadow.json").read_text())
        assert period["stored"] == counts[-1]
    assert counts == [3, 3, 1]
    assert [json.loads((f / "shadow.json").read_text())["closed_because"] for f in folders] == ["rotation", "rotation", "stopped"]
    for f in folders:
        assert redo(f, "gate", None) in (0, 1)
        assert json.loads((f / "summary.json").read_text())["cases"] == json.loads((f / "shadow.json").read_text())["stored"]
    merged = tmp_path / "merged"
    assert merge_runs(folders, merged) == 0
    summary = json.loads((merged / "summary.json").read_text())
    assert summary["cases"] == 7 and summary["verdict"] == "pass"
    with RunStore.open(merged) as store:
        periods = store.record(ShadowPeriods)
    assert periods is not None and [x.closed_because for x in periods.periods] == ["rotation", "rotation", "stopped"]  # every period


def test_rotation_by_duration_opens_the_next_folder_while_idle(servers: Any, proxy_for: Any, tmp_path: Path) -> None:
    base, cand = servers
    p = proxy_for(shadow_config(base.url, cand.url, rotate_every="1s", summarize_rotated=False), out=tmp_path / "series")
    call(p.url, "/v1/chat/completions", chat("first"))
    p.settled()
    p.wait_for(lambda: len(p.recorder.folders) >= 2, "a second folder", timeout=30)
    call(p.url, "/v1/chat/completions", chat("second"))
    p.settled()
    p.stop()
    total = 0
    for f in p.recorder.folders:
        with RunStore.open(f) as store:
            total += store.case_count()
    assert total == 2


def test_a_rotated_folder_is_summarised_by_a_child_process(servers: Any, proxy_for: Any, tmp_path: Path) -> None:
    base, cand = servers
    p = proxy_for(shadow_config(base.url, cand.url, rotate_every="1"), out=tmp_path / "series")
    call(p.url, "/v1/chat/completions", chat("only one", temperature=0))
    p.settled()
    p.wait_for(lambda: len(p.recorder.folders) == 2, "the rotation")
    first = p.recorder.folders[0]
    p.wait_for(lambda: (first / "summary.json").is_file() and (first / "report.html").is_file(), "the child's summary", timeout=120)
    p.stop()
    assert json.loads((first / "summary.json").read_text())["cases"] == 1


def test_acceptance_windows_from_the_candidates_metrics_reach_the_gauge_and_the_summary(proxy_for: Any, tmp_path: Path) -> None:
    with (
        TestServer(default="one two three four five six") as base,
        TestServer(default="one two three four five six", speculative={"k": 3, "acceptance": 0.5}) as cand,
    ):
        p = proxy_for(shadow_config(base.url, cand.url, scrape_every_s=0.2))
        for i in range(4):
            call(p.url, "/v1/chat/completions", chat(f"spec {i}", stream=True, temperature=0))
        p.settled()
        p.wait_for(lambda: not math.isnan(p.metrics.acceptance_rate._value.get()), "the acceptance gauge")
        assert p.metrics.acceptance_rate._value.get() == pytest.approx(0.5, abs=0.1)
        assert p.metrics.identical_rate._value.get() == 1.0
        p.stop()
    with RunStore.open(p.out) as store:
        windows = store.record_or_empty(MetricsWindows).windows
        assert sum(w.sent["candidate"].requests for w in windows) == 4
    assert redo(p.out, "gate", None) in (0, 1)
    summary = json.loads((p.out / "summary.json").read_text())
    assert summary["acceptance"]["rate"] == pytest.approx(0.5, abs=0.1)
    assert summary["latency"]["candidate"]["ttft_ms"]["p50"] is not None


def test_differing_answers_ask_the_baseline_again_for_the_noise_floor(proxy_for: Any) -> None:
    with TestServer(default="the baseline's words") as base, TestServer(default="other words") as cand:
        p = proxy_for(shadow_config(base.url, cand.url))
        for i in range(3):
            call(p.url, "/v1/chat/completions", chat(f"greedy {i}", temperature=0))
        p.settled()
        p.stop()
        assert [e["auth"] for e in base.requests("/chat/completions")].count("Bearer EMPTY") == 3  # the proxy's key, not a caller's
    with RunStore.open(p.out) as store:
        targets = sorted(r.target for r in store.responses())
        floor = store.record(NoiseFloorRecord)
    assert targets.count("control") == 3 and floor == NoiseFloorRecord(cases=3, requests=3, of_cases=3)
    assert redo(p.out, "score", None) == 1  # never summarised by a stop: scored here, as `qualitycheck score DIR` does
    summary = json.loads((p.out / "summary.json").read_text())
    assert summary["noise_floor"]["source"] == "baseline_again"
    assert summary["categories"]["qa"]["checks"]["exact"]["regressions"]  # greedy answers changed: exact flips, beyond the floor


def test_a_restarted_proxy_counts_its_noise_floor_on_and_reads_the_record_only_when_it_uses_it(proxy_for: Any, tmp_path: Path) -> None:
    out = tmp_path / "one"
    with TestServer(default="the baseline's words") as base, TestServer(default="other words") as cand:
        cfg = shadow_config(base.url, cand.url)
        for i in range(2):  # two proxies, one after the other, on the same folder: 2 + 1 differing greedy answers
            p = proxy_for(cfg, out=out)
            for j in range(2 - i):
                call(p.url, "/v1/chat/completions", chat(f"greedy {i} {j}", temperature=0))
            p.settled()
            p.stop()
        with RunStore.open(out) as store:
            assert store.record(NoiseFloorRecord) == NoiseFloorRecord(cases=3, requests=3, of_cases=3)
            store.put_artifact("noise_floor", {"source": "baseline_again", "cases": "3", "requests": 3, "of_cases": 3})
        with pytest.raises(StoreError, match="artifact 'noise_floor' is not a valid NoiseFloorRecord: cases"):
            Proxy(cfg, out).recorder.open()  # a proxy that would count on from it refuses the damaged record
        p = proxy_for(cfg, out=out, noise_floor=False)  # one that never asks the baseline again does not read it
        call(p.url, "/v1/chat/completions", chat("greedy 3", temperature=0))
        p.settled()
        p.stop()
    with RunStore.open(out) as store:
        assert store.case_count() == 4
        assert len(store.record_or_empty(MetricsWindows).windows) >= 3  # each proxy's windows kept, not replaced


def test_a_restarted_proxy_appends_to_its_folder(servers: Any, proxy_for: Any, tmp_path: Path) -> None:
    base, cand = servers
    out = tmp_path / "one"
    cfg = shadow_config(base.url, cand.url)
    for i in range(2):
        p = proxy_for(cfg, out=out)
        call(p.url, "/v1/chat/completions", chat(f"run {i}"))
        p.settled()
        p.stop()
    with RunStore.open(out) as store:
        assert store.case_count() == 2 and len(store.record_or_empty(ShadowPeriods).periods) == 2
