"""The sink of a gateway's mirror: every request answered at once and empty, the pair asked and recorded after."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from qualitycheck.core._records import NoiseFloorRecord, ShadowPeriods
from qualitycheck.core._store import RunStore
from qualitycheck.pipeline._merge import merge_runs
from qualitycheck.testserver import Fault, TestServer

from .conftest import shadow_config
from .test_faults import free_port_url, stored
from .test_forwarding import call, chat


def sink_config(baseline: str, candidate: str, **shadow: Any) -> Any:
    return shadow_config(baseline, candidate, sink=True, **shadow)


def test_the_gateway_gets_an_empty_success_at_once_while_both_targets_are_still_answering(proxy_for: Any) -> None:
    """Both targets hang: every mirrored request is answered all the same, two pairs wait, the rest are dropped and counted."""
    with TestServer(faults=[Fault("hang", times=None)]) as base, TestServer(faults=[Fault("hang", times=None)]) as cand:
        p = proxy_for(sink_config(base.url, cand.url, max_inflight=2, drain_timeout_s=0.5, run={"timeout_s": 30.0}))
        for i in range(5):
            status, _, raw = call(p.url, "/v1/chat/completions", chat(f"q{i}", stream=True))
            assert (status, raw) == (204, b"")
        p.wait_for(lambda: len(base.requests("/chat/completions")) == 2 and len(cand.requests("/chat/completions")) == 2, "both asked")
        assert p.metrics.inflight._value.get() == 2
        assert p.counter("qc_shadow_mirrored_total") == 2
        assert p.counter("qc_shadow_dropped_total", reason="max_inflight") == 3
        assert p.counter("qc_shadow_requests_total", endpoint="chat") == 5
        drain = p.stop()
    assert drain.cancelled == 2 and p.counter("qc_shadow_dropped_total", reason="stopped") == 2


def test_each_pair_asks_both_targets_with_their_own_keys_and_is_stored_as_the_proxy_stores_it(
    proxy_for: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mirrored copy carries the caller's key and an Envoy-style `-shadow` authority: neither matters, tags come from headers."""
    with TestServer(default="the same answer") as base, TestServer(default="the same answer") as cand:
        cfg = sink_config(base.url, cand.url)
        cfg = cfg.model_copy(
            update={
                "baseline": cfg.baseline.model_copy(update={"api_key_env": "QC_SINK_BASE"}),  # type: ignore[union-attr]
                "candidate": cfg.candidate.model_copy(update={"api_key_env": "QC_SINK_CAND"}),  # type: ignore[union-attr]
            }
        )
        monkeypatch.setenv("QC_SINK_BASE", "sk-base-own")
        monkeypatch.setenv("QC_SINK_CAND", "sk-cand-own")
        p = proxy_for(cfg)
        headers = {"Authorization": "Bearer sk-the-callers", "Host": "api.example.com-shadow", "X-Route": "billing", "X-Tenant": "t1"}
        for stream in (True, False):
            assert call(p.url, "/v1/chat/completions", chat("what is due?", temperature=0, stream=stream), headers)[0] == 204
        assert (
            call(p.url, "/v1/completions", {"model": "test-model", "prompt": "Once upon", "max_tokens": 3, "temperature": 0}, headers)[0]
            == 204
        )
        p.settled()
        p.stop()
        assert {e["auth"] for e in base.requests()} == {"Bearer sk-base-own"}
        assert {e["auth"] for e in cand.requests()} == {"Bearer sk-cand-own"}
    with RunStore.open(p.out) as store:
        cases = store.cases()
        responses = list(store.responses())
        periods = store.record(ShadowPeriods)
    assert len(cases) == 3 and {(c.route, c.tags.get("tenant")) for c in cases} == {("billing", "t1")}
    assert all(c.checks.exact is not None for c in cases)  # greedy requests: identity is the check, as replay derives it
    assert sorted(r.target for r in responses) == ["baseline"] * 3 + ["candidate"] * 3
    assert all(r.ok and r.text and r.e2e_s for r in responses)
    assert any(len(r.chunk_times) > 1 for r in responses if r.target == "baseline")  # a streamed answer, timed chunk by chunk
    assert periods is not None and periods.periods[0].mode == "sink" and periods.periods[0].stored == 3
    assert periods.periods[0].requests == 3 and periods.periods[0].compared == periods.periods[0].identical == 3


def test_paths_that_are_not_generation_are_answered_and_never_mirrored(servers: Any, proxy_for: Any) -> None:
    base, cand = servers
    p = proxy_for(sink_config(base.url, cand.url))
    assert call(p.url, "/v1/models")[0] == 204
    assert call(p.url, "/v1/embeddings", {"model": "test-model", "input": "x"})[0] == 204
    p.settled()
    assert base.requests("/models") == [] and cand.requests("/embeddings") == []
    assert p.counter("qc_shadow_requests_total", endpoint="other") == 2
    health = json.loads(call(p.url, "/qc/health")[2])
    assert health["status"] == "ok" and health["inflight"] == 0
    assert b"qc_shadow_requests_total" in call(p.url, "/qc/metrics")[2]


def test_a_candidate_that_is_down_and_a_baseline_5xx_are_recorded_as_errors(proxy_for: Any) -> None:
    with TestServer(default="fine", faults=[Fault("status", match="broken", status=500, times=None)]) as base:
        p = proxy_for(sink_config(base.url, free_port_url()))
        assert call(p.url, "/v1/chat/completions", chat("a fine question"))[0] == 204
        assert call(p.url, "/v1/chat/completions", chat("a broken question"))[0] == 204
        p.settled()
        assert p.counter("qc_shadow_candidate_errors_total", kind="connection") == 2
        assert p.counter("qc_shadow_baseline_errors_total", kind="http_status") == 1
        p.stop()
    rs = stored(p)
    base_errors = [r.error for (_, t), r in rs.items() if t == "baseline" and r.error is not None]
    assert len(base_errors) == 1 and base_errors[0].status == 500
    assert all(r.error is not None and r.error.kind == "connection" for (_, t), r in rs.items() if t == "candidate")


def test_differing_answers_ask_the_baseline_again_for_the_noise_floor(proxy_for: Any) -> None:
    with TestServer(default="one two three") as base, TestServer(default="one two four") as cand:
        p = proxy_for(sink_config(base.url, cand.url))
        call(p.url, "/v1/chat/completions", chat("q", temperature=0))
        p.settled()
        p.stop()
        assert len(base.requests("/chat/completions")) == 2  # the pair's baseline, then the re-ask
    with RunStore.open(p.out) as store:
        assert {r.target for r in store.responses()} == {"baseline", "candidate", "control"}
        assert store.record(NoiseFloorRecord) == NoiseFloorRecord(cases=1, requests=1, of_cases=1)


def test_several_sinks_write_their_own_folders_and_merge_makes_one_verdict(servers: Any, proxy_for: Any, tmp_path: Path) -> None:
    """How the sink scales out: several behind the gateway's mirror cluster, one folder each, merged."""
    base, cand = servers
    sinks = [proxy_for(sink_config(base.url, cand.url), out=tmp_path / f"sink{i}") for i in range(2)]
    for i in range(6):
        assert call(sinks[i % 2].url, "/v1/chat/completions", chat(f"question {i}", temperature=0))[0] == 204
    for s in sinks:
        s.settled()
        s.stop()
    merged = tmp_path / "merged"
    assert merge_runs([s.out for s in sinks], merged) == 0
    summary = json.loads((merged / "summary.json").read_text())
    assert summary["cases"] == 6 and summary["verdict"] == "pass"
    with RunStore.open(merged) as store:
        periods = store.record(ShadowPeriods)
    assert periods is not None and sorted(p.replica for p in periods.periods) == sorted(s.recorder.replica for s in sinks)
    assert all(p.mode == "sink" and p.stored == 3 for p in periods.periods)
