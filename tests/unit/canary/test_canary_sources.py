"""Metric sources: SGLang's and llama-server's pages, a Prometheus server's HTTP API, histogram quantiles, /qc/metrics."""

from __future__ import annotations

import asyncio
import json
import math
import urllib.request
from pathlib import Path

import pytest
from aiohttp import web

from qualitycheck.canary._serve import CanaryMetrics, serve
from qualitycheck.canary._sources import Histogram, parse_page
from qualitycheck.canary._window import History, histogram_quantile, window_delta
from tests.helpers import raw_server
from tests.unit.canary.canary_helpers import FIXTURES, Clock, Page, config, records, scripted_page, sglang_page, vllm_page, watcher

STEP = 10.0


def test_sglang_page_reads_its_own_names() -> None:
    snap = parse_page(
        sglang_page(
            token_usage=0.42,
            accept_length=2.1,
            accept_rate=0.37,
            generation_tokens=1000,
            requests=40,
            aborted=2,
            itl_sum=12.0,
            itl_le_10ms=100,
            itl_le_20ms=900,
        ),
        0.0,
    )
    assert snap.engine == "sglang"
    assert snap.gauges == {"spec_accept_rate": 0.37, "spec_accept_length": 2.1, "kv_cache_usage": 0.42}
    assert snap.counters == {"requests": 42.0, "errors": 2.0, "generation_tokens": 1000.0}  # finished + aborted
    assert snap.histograms["tpot"].buckets[0.02] == 900.0


def test_sglang_acceptance_from_its_gauges_while_tokens_are_generated(tmp_path: Path) -> None:
    clock = Clock()
    values = {"token_usage": 0.3, "accept_length": 3.4, "accept_rate": 0.8, "generation_tokens": 0, "requests": 0, "aborted": 0}
    values |= {"itl_sum": 0, "itl_le_10ms": 0, "itl_le_20ms": 0}
    page = Page(sglang_page(**values))
    with scripted_page(page) as url:
        w = watcher(config(candidate_metrics=url + "/metrics", window=f"{2 * STEP}s", trip_after=1), tmp_path / "out", clock)
        asyncio.run(w.scrape())
        values |= {"accept_rate": 0.3, "accept_length": 1.6, "generation_tokens": 500, "requests": 20}
        page.text = sglang_page(**values)
        clock.advance(STEP)
        asyncio.run(w.scrape())
        values |= {"accept_rate": 0.9}  # a stale gauge of an idle server: no tokens generated since
        page.text = sglang_page(**values)
        rec = asyncio.run(_step(w, clock))
    g = rec.guardrails[0]
    assert g.result.name == "min_acceptance_rate" and g.result.observed == 0.3 and g.result.passed is False
    assert g.evidence == {"requests": 20}
    assert rec.acceptance == {"rate": 0.3, "mean_accepted_length": 1.6}
    assert rec.sources[0].engine == "sglang"
    assert rec.tripped_now == ["default"]


def test_llama_server_page_reads_its_spec_decode_counters_and_nothing_it_lacks() -> None:
    snap = parse_page((FIXTURES / "llama_server_metrics_after.txt").read_text(), 0.0)
    assert snap.engine == "llamacpp"
    assert snap.counters == {"drafts": 24.0, "draft_tokens": 70.0, "accepted_tokens": 70.0, "generation_tokens": 96.0}
    assert snap.per_position == {"0": 24.0, "1": 24.0, "2": 22.0}
    assert snap.histograms == {}  # it keeps no latency histogram, and counts no finished or failed requests


def test_llama_server_acceptance_is_gated_and_what_it_cannot_give_is_not_evaluated(tmp_path: Path) -> None:
    clock = Clock()
    page = Page((FIXTURES / "llama_server_metrics_start.txt").read_text())
    guardrails = {"min_acceptance_rate": 0.55, "max_error_rate": "1%", "fallback_action": "disable_speculative_decoding_for_route"}
    with scripted_page(page) as url:
        cfg = config(candidate_metrics=url + "/metrics", window=f"{STEP}s", trip_after=1, guardrails=guardrails)
        w = watcher(cfg, tmp_path / "out", clock)
        asyncio.run(w.scrape())
        page.text = (FIXTURES / "llama_server_metrics_after.txt").read_text()
        rec = asyncio.run(_step(w, clock))
    got = {g.result.name: g for g in rec.guardrails}
    acc = got["min_acceptance_rate"]
    assert acc.result.passed is True and acc.result.observed == 1.0 and acc.evidence == {"drafts": 24.0, "draft_tokens": 70.0}
    assert got["max_error_rate"].result.passed is None  # not evaluated, never a pass
    assert rec.sources[0].engine == "llamacpp" and not rec.tripped_now


def test_a_page_counting_requests_but_no_failed_ones_leaves_the_error_rate_not_evaluated(tmp_path: Path) -> None:
    """A vLLM page read with `engine: llamacpp` forced: the run's reader finds vLLM's finished requests, but nothing
    counts failures under llama-server's names, and an error rate of 0 from no data would be a pass without evidence."""
    clock = Clock()
    page = Page(vllm_page())
    with scripted_page(page) as url:
        cfg = config(candidate_metrics=url + "/metrics", window=f"{STEP}s", engine="llamacpp", guardrails={"max_error_rate": "5%"})
        w = watcher(cfg, tmp_path / "out", clock)
        asyncio.run(w.scrape())
        page.text = vllm_page(requests=100, errors=2)
        rec = asyncio.run(_step(w, clock))
    g = next(g for g in rec.guardrails if g.result.name == "max_error_rate")
    assert g.result.passed is None and "no failed ones" in (g.result.message or ""), g


async def _step(w: object, clock: Clock) -> object:
    from qualitycheck.canary._watch import Watcher

    assert isinstance(w, Watcher)
    clock.advance(STEP)
    return await w.step()


def _prom_handler(values: dict[str, str | None], seen: list[str]) -> object:
    vector = (FIXTURES / "prometheus_query_vector.json").read_text()
    error = (FIXTURES / "prometheus_query_error.json").read_text()

    async def handler(request: web.Request) -> web.Response:
        assert request.path == "/api/v1/query"
        q = request.query["query"]
        seen.append(q)
        for needle, value in values.items():
            if needle in q:
                if value is None:
                    return web.Response(status=400, text=error, content_type="application/json")
                return web.Response(text=vector.replace("{value}", value), content_type="application/json")
        return web.Response(
            text=json.dumps({"status": "success", "data": {"resultType": "vector", "result": []}}), content_type="application/json"
        )

    return handler


def test_prometheus_http_api_with_promql_per_guardrail(tmp_path: Path) -> None:
    seen: list[str] = []
    values: dict[str, str | None] = {
        "spec_decode_num_accepted_tokens_total": "0.25",
        "spec_decode_num_drafts_total": "480",
        "custom_errors": "3",
    }
    values |= {"custom_requests": "200", "kv_cache_usage_perc": "0.5", "DCGM_FI_DEV_GPU_UTIL": "91"}
    with raw_server(_prom_handler(values, seen)) as prom:  # type: ignore[arg-type]
        cfg = config(
            prometheus=prom,
            window="5m",
            trip_after=1,
            promql={"errors": "sum(increase(custom_errors[$window]))", "requests": "sum(increase(custom_requests[$window]))"},
            guardrails={"min_acceptance_rate": 0.55, "max_error_rate": "1%"},
        )
        w = watcher(cfg, tmp_path / "out", Clock())
        rec = asyncio.run(w.step())
    by_name = {g.result.name: g for g in rec.guardrails}
    assert by_name["min_acceptance_rate"].result.observed == 0.25 and by_name["min_acceptance_rate"].result.passed is False
    assert by_name["min_acceptance_rate"].evidence == {"drafts": 480}
    assert by_name["max_error_rate"].result.observed == 0.015 and by_name["max_error_rate"].result.passed is False
    assert any("[300s]" in q for q in seen)  # $window is the window
    assert rec.gpu["candidate"].kv_cache_usage == 0.5 and rec.gpu["candidate"].gpu_utilization == 91
    assert rec.status == "tripped" and rec.sources[-1].name == "prometheus" and rec.sources[-1].ok


def test_prometheus_errors_and_empty_answers_are_not_evaluated(tmp_path: Path) -> None:
    seen: list[str] = []
    values: dict[str, str | None] = {"spec_decode_num_accepted_tokens_total": None}  # the server refuses the query
    with raw_server(_prom_handler(values, seen)) as prom:  # type: ignore[arg-type]
        cfg = config(prometheus=prom, window="5m", trip_after=1)
        rec = asyncio.run(watcher(cfg, tmp_path / "out", Clock()).step())
    g = rec.guardrails[0]
    assert g.result.passed is None and "Prometheus" in g.result.message and "parse error" in g.result.message
    assert rec.status == "not_evaluated"


def test_prometheus_down_alerts(tmp_path: Path) -> None:
    cfg = config(prometheus="http://127.0.0.1:9", window="5m")
    rec = asyncio.run(watcher(cfg, tmp_path / "out", Clock()).step())
    assert rec.guardrails[0].result.passed is None
    assert rec.sources[-1].ok is False and any(a.startswith("prometheus") for a in rec.alerts)
    assert records(tmp_path / "out")[0]["status"] == "not_evaluated"


def test_histogram_quantile_interpolates_like_prometheus() -> None:
    h = Histogram({0.1: 50.0, 0.2: 90.0, 0.4: 100.0, math.inf: 100.0}, 100.0)
    assert histogram_quantile(0.5, h) == 0.1
    assert histogram_quantile(0.95, h) == 0.2 + 0.2 * 0.5
    assert histogram_quantile(0.95, Histogram({0.1: 0.0, math.inf: 10.0}, 10.0)) == 0.1  # beyond the last bound: the bound
    assert histogram_quantile(0.95, Histogram({0.1: 0.0, math.inf: 0.0}, 0.0)) is None


def test_window_needs_two_good_scrapes_and_reads_increases() -> None:
    hist = History()
    snap = parse_page("# TYPE vllm:spec_decode_num_drafts_total counter\nvllm:spec_decode_num_drafts_total 5\n", 0.0)
    hist.add(snap, 30.0)
    assert not window_delta(hist, 0.0, 30.0).ok
    for t, v in ((10.0, 8), (20.0, 2), (30.0, 7)):  # a restart between 10 and 20
        hist.add(parse_page(f"# TYPE vllm:spec_decode_num_drafts_total counter\nvllm:spec_decode_num_drafts_total {v}\n", t), 30.0)
    d = window_delta(hist, 30.0, 30.0)
    assert d.ok and d.counters["drafts"] == 3 + 2 + 5 and d.resets == 1


def test_qc_metrics_serves_the_watchers_state(tmp_path: Path) -> None:
    from qualitycheck.canary._record import CanaryRecord, GuardrailWindow, RouteState, SourceStatus
    from qualitycheck.verdict._gate import GuardrailResult

    rec = CanaryRecord(
        t=123.0,
        status="tripped",
        guardrails=[GuardrailWindow(result=GuardrailResult("min_acceptance_rate", 0.55, 0.25, False, "low", "chat"), streak=3)],
        sources=[SourceStatus(name="candidate", url="http://x/metrics", ok=False, error="down")],
        routes=[RouteState(route="chat", state="tripped", tripped_by="min_acceptance_rate")],
        acceptance={"rate": 0.25},
        alerts=["x"],
    )
    metrics = CanaryMetrics()
    metrics.update(rec)

    async def fetch() -> str:
        runner, url = await serve(metrics, lambda: pytest.fail("/qc/status not asked here"), "127.0.0.1:0", lambda _: None)
        try:
            return await asyncio.to_thread(lambda: urllib.request.urlopen(url + "/qc/metrics", timeout=10).read().decode())
        finally:
            await runner.cleanup()

    text = asyncio.run(fetch())
    assert 'qc_canary_route_tripped{route="chat"} 1.0' in text
    assert 'qc_canary_guardrail_passed{guardrail="min_acceptance_rate",route="chat"} 0.0' in text
    assert 'qc_canary_guardrail_failing_windows{guardrail="min_acceptance_rate",route="chat"} 3.0' in text
    assert 'qc_canary_source_up{source="candidate"} 0.0' in text
    assert 'qc_canary_windows_total{status="tripped"} 1.0' in text
    assert "qc_canary_acceptance_rate 0.25" in text


def test_slow_prometheus_queries_are_an_alert_like_slow_pages(tmp_path: Path) -> None:
    seen: list[str] = []
    answer = _prom_handler({"spec_decode_num_drafts_total": "480"}, seen)

    async def slow(request: web.Request) -> web.Response:
        if not seen:
            await asyncio.sleep(3.2)  # one query slower than the interval below (3s)
        return await answer(request)  # type: ignore[operator, no-any-return]

    with raw_server(slow) as prom:
        cfg = config(prometheus=prom, window="5m", interval="3s")
        rec = asyncio.run(watcher(cfg, tmp_path / "out", Clock()).step())
    assert any(a.startswith("scraping prometheus took ") and "interval of 3s" in a for a in rec.alerts), rec.alerts
