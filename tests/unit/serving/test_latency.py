"""Latency maths: exact on synthetic timings, within loose bounds against injected server delays."""

from __future__ import annotations

import asyncio
import statistics

import pytest

from qualitycheck.core._cases import Case
from qualitycheck.core._config import RunOptions, Target
from qualitycheck.core._records import ErrorInfo, Response, Usage
from qualitycheck.generation._client import Endpoint
from qualitycheck.serving import cost_per_1k, itl_per_token, side_latency, tpot_s
from qualitycheck.testserver import TestServer


def _resp(**kw: object) -> Response:
    base: dict[str, object] = {"case_id": "c", "target": "candidate", "fingerprint": "f"}
    base.update(kw)
    return Response.model_validate(base)


def test_tpot_excludes_first_token():
    r = _resp(ttft_s=0.1, e2e_s=1.0, usage=Usage(completion_tokens=10), chunk_times=[0.1, 1.0])
    assert tpot_s(r) == pytest.approx(0.9 / 9)


def test_tpot_undefined_for_single_token_or_missing_usage():
    assert tpot_s(_resp(ttft_s=0.1, e2e_s=0.2, usage=Usage(completion_tokens=1))) is None
    assert tpot_s(_resp(ttft_s=0.1, e2e_s=0.2)) is None


def test_itl_divides_gap_by_tokens_in_chunk():
    # chunks of 3, 3, 1 tokens 60 ms apart: the 3-token chunk's tokens arrived 20 ms apart each
    r = _resp(chunk_times=[0.1, 0.16, 0.22], chunk_tokens=[3, 3, 1], usage=Usage(completion_tokens=7))
    assert itl_per_token(r) == pytest.approx([0.02, 0.02, 0.02, 0.06])


def test_itl_spreads_usage_evenly_without_token_ids():
    r = _resp(chunk_times=[0.1, 0.2, 0.3, 0.4], usage=Usage(completion_tokens=8))
    # 2 tokens per chunk on average: three gaps of 100 ms, two tokens each
    assert itl_per_token(r) == pytest.approx([0.05] * 6)


def test_itl_skips_chunks_without_tokens():
    r = _resp(chunk_times=[0.1, 0.15, 0.3], chunk_tokens=[1, 0, 2], usage=Usage(completion_tokens=3))
    assert itl_per_token(r) == pytest.approx([0.1, 0.1])


def test_side_summary_percentiles_throughput_errors_and_cost():
    rs = [
        _resp(
            case_id=f"c{i}",
            ttft_s=0.1 * (i + 1),
            e2e_s=1.0,
            started_at=100.0 + i,
            usage=Usage(completion_tokens=11),
            chunk_times=[0.1 * (i + 1), 1.0],
        )
        for i in range(4)
    ]
    rs.append(_resp(case_id="bad", started_at=101.0, error=ErrorInfo(kind="timeout", message="x")))
    s = side_latency(rs, gpu_hour_usd=3.6)["candidate"]
    assert s["ttft_ms"]["p50"] == pytest.approx(250.0)
    assert s["ttft_ms"]["p99"] == pytest.approx(397.0)
    assert s["e2e_ms"] == {"p50": 1000.0, "p95": 1000.0, "p99": 1000.0}
    # wall clock: first start 100, last end 103 + 1.0 → 4 s; 44 tokens, 4 good requests
    assert s["wall_s"] == pytest.approx(4.0)
    assert s["output_tokens_per_s"] == pytest.approx(11.0)
    assert s["requests_per_s"] == pytest.approx(1.0)
    assert s["error_rate"] == pytest.approx(0.2)
    # 3.6 $/h for 4 s = 0.004 $, over 44 tokens → 0.0909 $ per 1k
    assert s["cost_per_1k_output_tokens_usd"] == pytest.approx(0.004 / 0.044)
    assert cost_per_1k(1.0, None, 10) is None


def test_empty_side_has_null_percentiles():
    s = side_latency([_resp(error=ErrorInfo(kind="timeout", message="x"))])["candidate"]
    assert s["tpot_ms"] == {"p50": None, "p95": None, "p99": None}
    assert s["error_rate"] == 1.0 and s["output_tokens_per_s"] is None


def _measure(server: TestServer, n: int = 6, ids: bool = True) -> list[Response]:
    target = Target(url=server.url, model="test-model")
    opts = RunOptions(return_token_ids=ids, timeout_s=30)

    async def go() -> list[Response]:
        ep = Endpoint("candidate", target, opts)
        try:
            return [await ep.send(Case(id=f"c{i}", category="x", messages=[{"role": "user", "content": f"q{i}"}])) for i in range(n)]
        finally:
            await ep.aclose()

    return asyncio.run(go())


@pytest.mark.parametrize("ids", [True, False])
def test_injected_delays_with_multi_token_chunks(ids: bool):
    # 10 tokens in chunks of 3,3,3,1; 60 ms between chunks → 20 ms per token in full chunks
    answer = " ".join(f"w{i}" for i in range(10))
    with TestServer(default=answer, ttft_s=0.08, itl_s=0.06, tokens_per_chunk=3) as srv:
        rs = _measure(srv, ids=ids)
    assert all(r.ok and r.usage.completion_tokens == 10 and len(r.chunk_times) == 4 for r in rs)
    assert (rs[0].chunk_tokens == [3, 3, 3, 1]) is ids
    ttft = statistics.median(r.ttft_s for r in rs)  # type: ignore[misc]
    assert 0.08 <= ttft < 0.08 + 0.5
    # TPOT: three 60 ms gaps over 9 tokens after the first ≈ 20 ms, whatever the chunking
    tpot = statistics.median(tpot_s(r) for r in rs)  # type: ignore[misc]
    assert 0.015 <= tpot < 0.02 + 0.15
    itl = statistics.median(x for r in rs for x in itl_per_token(r))
    # per-chunk gaps would give 60 ms; normalised per token it is near 20 ms (25 ms spread evenly)
    assert 0.015 <= itl < 0.045
    summary = side_latency(rs)["candidate"]
    assert summary["ttft_ms"]["p50"] >= 80.0
    assert summary["error_rate"] == 0.0
