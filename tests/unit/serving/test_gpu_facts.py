"""GPU facts of an offline run: sampled during generation, summarised per side, rendered in the sign-off's section 1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from qualitycheck.cli._main import main
from qualitycheck.core._records import GpuSample
from qualitycheck.generation import _measure
from qualitycheck.serving import gpu_from_samples
from qualitycheck.testserver import TestServer
from tests.helpers import qa_cases, run_argv, write_suite


def test_samples_summarise_per_side() -> None:
    samples = [
        GpuSample(t=1.0, side="candidate", kv_cache_usage=0.2),
        GpuSample(t=6.0, side="candidate", kv_cache_usage=0.6),
        GpuSample(t=6.0, side="candidate", gpu_utilization=80.0, gpu_memory_used_mib=20000.0, gpu_memory_free_mib=4000.0),
        GpuSample(t=11.0, side="candidate", gpu_utilization=60.0, gpu_memory_used_mib=21000.0, gpu_memory_free_mib=3000.0),
        GpuSample(t=1.0, side="baseline", kv_cache_usage=0.1),
    ]
    out = gpu_from_samples(samples)
    assert out["candidate"] == {
        "kv_cache_usage": 0.4,
        "kv_cache_usage_max": 0.6,
        "gpu_utilization": 70.0,
        "gpu_memory_used_mib": 21000.0,
        "gpu_memory_free_mib": 3000.0,
        "samples": 4,
    }
    assert out["baseline"]["kv_cache_usage"] == 0.1 and out["baseline"]["gpu_utilization"] is None


def test_a_run_records_kv_cache_usage_sampled_during_generation_and_the_signoff_shows_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_measure, "GPU_FIRST_SAMPLE_S", 0.05)  # sampled early: a loaded machine's slow scrape still lands in the run
    suite = write_suite(tmp_path / "s.jsonl", qa_cases(4))
    with TestServer(default="a b c", ttft_s=0.5) as b, TestServer(default="a b c", ttft_s=0.5) as c:
        b.counters["kv_cache_usage"] = 0.25  # a busy server's gauge, as vLLM exposes it
        c.counters["kv_cache_usage"] = 0.5
        assert main(run_argv(b.url, c.url, suite, tmp_path / "run", "--concurrency", "1")) == 0
    s = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert s["gpu"]["candidate"]["kv_cache_usage"] == 0.5 and s["gpu"]["baseline"]["kv_cache_usage_max"] == 0.25
    assert s["gpu"]["candidate"]["samples"] >= 1
    signoff = (tmp_path / "run" / "signoff.md").read_text()
    section1 = signoff.split("## 1. Baseline performance")[1].split("## 2.")[0]
    assert "- GPU, candidate: KV-cache usage 50.0% mean, 50.0% max" in section1
    assert "GPU utilisation and memory: not recorded" in section1


def test_a_short_run_without_samples_writes_no_gpu_key(tmp_path: Path) -> None:
    suite = write_suite(tmp_path / "s.jsonl", qa_cases(2))
    with TestServer() as b, TestServer() as c:
        assert main(run_argv(b.url, c.url, suite, tmp_path / "run")) == 0
    assert "gpu" not in json.loads((tmp_path / "run" / "summary.json").read_text())


def test_a_resumed_run_keeps_the_samples_its_earlier_windows_took(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_measure, "GPU_FIRST_SAMPLE_S", 0.05)  # sampled early: a loaded machine's slow scrape still lands in the run
    from qualitycheck.core._records import GpuSamples
    from qualitycheck.core._store import RunStore
    from qualitycheck.testserver import Fault

    suite = write_suite(tmp_path / "s.jsonl", qa_cases(4))
    with (
        TestServer(default="a b c", ttft_s=0.4) as b,
        TestServer(default="a b c", ttft_s=0.4, faults=[Fault("status", status=500, times=None)]) as c,
    ):
        c.counters["kv_cache_usage"] = 0.5
        main(run_argv(b.url, c.url, suite, tmp_path / "run", "--concurrency", "1", "--retries", "0"))
        with RunStore.open(tmp_path / "run") as store:  # what the first run sampled, marked so it can be told apart
            first = store.record(GpuSamples)
            assert first is not None and first.samples
            store.put_record(GpuSamples(samples=[GpuSample(t=1.0, side="baseline", kv_cache_usage=0.99), *first.samples]))
        c.faults.clear()
        assert main(run_argv(b.url, c.url, suite, tmp_path / "run", "--concurrency", "1", "--retries", "0")) == 0
        assert len(c.requests("/chat/completions")) == 8  # the resume sent the four that failed again
    with RunStore.open(tmp_path / "run") as store:
        samples = (store.record(GpuSamples) or GpuSamples()).samples
    assert samples[: len(first.samples) + 1] == [GpuSample(t=1.0, side="baseline", kv_cache_usage=0.99), *first.samples]
    assert len(samples) > len(first.samples) + 1  # and the resumed window's own samples after them
