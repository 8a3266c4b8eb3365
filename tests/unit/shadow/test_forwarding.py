"""Callers see the baseline's answer, byte for byte; a sample is mirrored to the candidate and stored as a pair."""

from __future__ import annotations

import http.client
import json
import socket
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from qualitycheck.core import _http
from qualitycheck.core._config import RunOptions, Target
from qualitycheck.core._store import RunStore
from qualitycheck.generation._client import AnswerReader, Endpoint, RequestPlan
from qualitycheck.shadow._proxy import HOP_BY_HOP
from qualitycheck.testserver import TestServer, ToolReply

from .conftest import shadow_config

VARYING = {"date"}
"""Set by the server per answer: the proxy passes the baseline's own, which may tick between two calls."""


def call(
    base: str, path: str, body: dict[str, Any] | None = None, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    u = urlsplit(base)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    try:
        data = json.dumps(body).encode() if body is not None else None
        conn.request(
            "POST" if body is not None else "GET", path, body=data, headers={"Content-Type": "application/json", **(headers or {})}
        )
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def chat(content: str, **params: Any) -> dict[str, Any]:
    return {"model": "test-model", "messages": [{"role": "user", "content": content}], **params}


def end_to_end_headers(h: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in h.items() if k not in HOP_BY_HOP and k not in VARYING}


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", chat("hello there", stream=True, stream_options={"include_usage": True})),
        ("/v1/chat/completions", chat("hello there", temperature=0)),
        ("/v1/completions", {"model": "test-model", "prompt": "Once upon", "stream": True}),
        ("/v1/completions", {"model": "test-model", "prompt": "Once upon", "max_tokens": 3}),
    ],
)
def test_callers_get_the_baselines_bytes_status_and_headers(servers: Any, proxy_for: Any, path: str, body: dict[str, Any]) -> None:
    base, cand = servers
    p = proxy_for(shadow_config(base.url, cand.url))
    direct = call(base.url, path, body)
    proxied = call(p.url, path, body)
    assert proxied[0] == direct[0] == 200
    assert proxied[2] == direct[2]  # the body, byte for byte (a stream: every event, in order)
    assert end_to_end_headers(proxied[1]) == end_to_end_headers(direct[1])
    p.settled()
    assert p.counter("qc_shadow_stored_total") == 1 and p.counter("qc_shadow_mirrored_total") == 1


def test_models_and_other_paths_pass_through_without_a_mirror(servers: Any, proxy_for: Any) -> None:
    base, cand = servers
    p = proxy_for(shadow_config(base.url, cand.url))
    direct, proxied = call(base.url, "/v1/models"), call(p.url, "/v1/models")
    assert proxied[0] == 200 and proxied[2] == direct[2]
    assert call(p.url, "/health")[0] == 200
    assert call(p.url, "/no/such/path")[0] == direct_status(base.url, "/no/such/path")
    assert p.counter("qc_shadow_mirrored_total") == 0 and cand.requests() == []
    assert p.counter("qc_shadow_requests_total", endpoint="other") == 3


def direct_status(url: str, path: str) -> int:
    return call(url, path)[0]


def test_the_callers_key_goes_to_the_baseline_only_and_the_candidate_uses_its_own(
    servers: Any, proxy_for: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    base, cand = servers
    monkeypatch.setenv("QC_TEST_CANDIDATE_KEY", "sk-candidate-own-key-123456")
    p = proxy_for(shadow_config(base.url, cand.url, candidate_target={"api_key_env": "QC_TEST_CANDIDATE_KEY"}))
    call(p.url, "/v1/chat/completions", chat("hi", stream=True), headers={"Authorization": "Bearer sk-caller-key-abcdef123456"})
    p.settled()
    assert [e["auth"] for e in base.requests("/chat/completions")] == ["Bearer sk-caller-key-abcdef123456"]
    assert [e["auth"] for e in cand.requests("/chat/completions")] == ["Bearer sk-candidate-own-key-123456"]


def test_each_pair_is_a_case_with_replays_category_checks_and_header_tags(servers: Any, proxy_for: Any, tmp_path: Path) -> None:
    base, cand = servers
    p = proxy_for(shadow_config(base.url, cand.url))
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    call(p.url, "/v1/chat/completions", chat("greedy one", temperature=0, stream=True), headers={"X-Route": "billing", "X-Tenant": "acme"})
    call(
        p.url,
        "/v1/chat/completions",
        chat("give json", temperature=0.7, response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}),
    )
    p.settled()
    p.stop()
    with RunStore.open(p.out) as store:
        cases = store.cases()
        responses = list(store.responses())
    assert [c.category for c in cases] == ["qa", "json"]
    greedy, js = cases
    assert greedy.tags == {"route": "billing", "tenant": "acme"} and greedy.route == "billing"
    assert greedy.checks.exact is not None and greedy.params["temperature"] == 0
    assert js.checks.json_ is not None if hasattr(js.checks, "json_") else "json" in js.model_dump(by_alias=True)["checks"]
    assert {(r.case_id, r.target) for r in responses} == {(c.id, t) for c in cases for t in ("baseline", "candidate")}
    for r in responses:
        assert r.ok and r.text == "one two three four five"
        assert r.e2e_s is not None and r.e2e_s > 0 and r.started_at > 0


def test_streamed_answers_are_timed_at_the_proxy_chunk_by_chunk(proxy_for: Any) -> None:
    with TestServer(default="a b c d e f", itl_s=0.02) as base, TestServer(default="a b c d e f", itl_s=0.02) as cand:
        p = proxy_for(shadow_config(base.url, cand.url))
        call(p.url, "/v1/chat/completions", chat("time me", stream=True))
        p.settled()
        p.stop()
    with RunStore.open(p.out) as store:
        by_target = {r.target: r for r in store.responses()}
    for r in by_target.values():
        assert r.text == "a b c d e f" and len(r.chunk_times) == 6
        assert r.ttft_s == r.chunk_times[0] and r.chunk_times == sorted(r.chunk_times)
        assert r.chunk_times[-1] - r.chunk_times[0] > 0.05  # five gaps the server put between the chunks


def test_tool_call_answers_are_recorded_from_the_forwarded_stream(proxy_for: Any) -> None:
    reply = ToolReply(calls=(("get_weather", '{"city": "Paris"}'),))
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    with TestServer(default=reply) as base, TestServer(default=reply) as cand:
        p = proxy_for(shadow_config(base.url, cand.url))
        body = chat("weather?", tools=tools, stream=True, temperature=0)
        assert call(p.url, "/v1/chat/completions", body)[2] == call(base.url, "/v1/chat/completions", body)[2]
        p.settled()
        p.stop()
    with RunStore.open(p.out) as store:
        (case,) = store.cases()
        rs = list(store.responses())
    assert case.category == "tool_call"
    for r in rs:
        assert r.tool_calls is not None and [(c.name, c.arguments) for c in r.tool_calls] == [("get_weather", '{"city": "Paris"}')]


def test_sampling_mirrors_a_share_and_forwards_every_request(servers: Any, proxy_for: Any) -> None:
    base, cand = servers
    p = proxy_for(shadow_config(base.url, cand.url, sample=0.0))
    for i in range(5):
        assert call(p.url, "/v1/chat/completions", chat(f"q{i}"))[0] == 200
    assert len(base.requests("/chat/completions")) == 5 and cand.requests("/chat/completions") == []
    assert p.counter("qc_shadow_requests_total", endpoint="chat") == 5


def test_the_answer_reader_parses_forwarded_bytes_as_the_client_parses_its_own() -> None:
    """Fed the same bytes a read at a time, the reader records what `Endpoint.send` records for its own request."""
    import asyncio
    import time

    body = chat("compare me", stream=True, stream_options={"include_usage": True})
    with TestServer(default="alpha beta gamma", tokens_per_chunk=1) as srv:
        raw = call(srv.url, "/v1/chat/completions", body)[2]
        ep = Endpoint("baseline", Target(url=srv.url, model="test-model"), RunOptions(return_token_ids=False))

        async def direct() -> Any:
            try:
                return await ep.send_plan("c1", RequestPlan("chat", body, "fp"))
            finally:
                await ep.aclose()

        own = asyncio.run(direct())
    reader = AnswerReader("chat", sse=True, t0=time.perf_counter())
    for i in range(0, len(raw), 7):
        reader.feed(raw[i : i + 7], time.perf_counter())
    got = reader.response(case_id="c1", target="baseline", fingerprint="fp", started_at=1.0, now=time.perf_counter())
    assert got.ok and (got.text, got.finish_reason, got.usage, len(got.chunk_times)) == (
        own.text,
        own.finish_reason,
        own.usage,
        len(own.chunk_times),
    )
    cut = AnswerReader("chat", sse=True, t0=time.perf_counter())
    cut.feed(raw[: raw.rindex(b"\n\n", 0, len(raw) // 2) + 2], time.perf_counter())  # whole events, then nothing
    assert (
        cut.response(case_id="c1", target="baseline", fingerprint="fp", started_at=1.0, now=time.perf_counter()).error.kind == "stream_cut"
    )  # type: ignore[union-attr]
    failed = AnswerReader("chat", sse=False, t0=0.0, status=503)
    failed.feed(b'{"error": {"message": "overloaded"}}', 1.0)
    err = failed.response(case_id="c1", target="baseline", fingerprint="fp", started_at=1.0, now=2.0).error
    assert err is not None and (err.kind, err.status, err.message) == ("http_status", 503, "HTTP 503: overloaded")


def test_health_and_prometheus_metrics_are_served_by_the_proxy_itself(servers: Any, proxy_for: Any) -> None:
    base, cand = servers
    p = proxy_for(shadow_config(base.url, cand.url))
    call(p.url, "/v1/chat/completions", chat("count me", temperature=0))
    p.settled()
    status, _, raw = call(p.url, "/qc/health")
    health = json.loads(raw)
    assert status == 200 and health["status"] == "ok" and health["folder"] == str(p.out) and health["inflight"] == 0
    status, _, raw = call(p.url, "/qc/ready")
    assert status == 200 and json.loads(raw) == {"status": "ready"}
    status, headers, raw = call(p.url, "/qc/metrics")
    text = raw.decode()
    assert status == 200 and headers["content-type"].startswith("text/plain")
    for line in (
        'qc_shadow_requests_total{endpoint="chat"} 1.0',
        "qc_shadow_mirrored_total 1.0",
        'qc_shadow_dropped_total{reason="max_inflight"} 0.0',
        "qc_shadow_stored_total 1.0",
        'qc_shadow_candidate_errors_total{kind="timeout"} 0.0',
        "qc_shadow_identical_rate 1.0",
        "qc_shadow_acceptance_rate NaN",
        "qc_shadow_inflight 0.0",
    ):
        assert line in text.splitlines(), line
    assert base.requests("/qc") == []  # the proxy's own paths never reach the baseline


def test_a_body_over_max_body_mb_is_refused_with_413_and_not_forwarded(servers: Any, proxy_for: Any) -> None:
    base, cand = servers
    p = proxy_for(shadow_config(base.url, cand.url, max_body_mb=0.01))
    status, _, _ = call(p.url, "/v1/chat/completions", chat("x" * 20_000))
    assert status == 413 and base.requests() == []
    status, _, body = call(p.url, "/v1/chat/completions", chat("small enough"))
    assert status == 200 and json.loads(body)["choices"]
    p.settled()
    assert p.counter("qc_shadow_requests_total", endpoint="chat") == 1


def test_expect_100_continue_is_answered_before_the_body_is_sent(servers: Any, proxy_for: Any) -> None:
    """curl sends `Expect: 100-continue` with a large body and waits for the interim answer before sending it."""
    base, cand = servers
    p = proxy_for(shadow_config(base.url, cand.url))
    parts = urlsplit(p.url)
    body = json.dumps(chat("hello")).encode()
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\nExpect: 100-continue\r\n\r\n".encode()
        )
        assert sock.recv(64).startswith(b"HTTP/1.1 100 Continue\r\n\r\n")  # before the body: the caller would wait otherwise
        sock.sendall(body)
        got = b""
        while b"\r\n\r\n" not in got:
            got += sock.recv(65536)
    assert got.startswith(b"HTTP/1.1 200")
    assert [r["body"]["messages"] for r in base.requests("/chat/completions")] == [chat("hello")["messages"]]
    status, _, _ = call(p.url, "/v1/chat/completions", chat("x"), headers={"Expect": "something-else"})
    assert status == 417 and len(base.requests("/chat/completions")) == 1


def test_connections_to_both_targets_idle_past_the_reuse_bound_are_replaced(
    monkeypatch: pytest.MonkeyPatch, servers: Any, proxy_for: Any
) -> None:
    """A caller's request written into a connection the baseline is closing would be answered 502: neither side reuses one that old."""
    monkeypatch.setattr(_http, "IDLE_REUSE_S", 3.0)
    base, cand = servers
    p = proxy_for(shadow_config(base.url, cand.url), noise_floor=False)
    for pause in (0.0, 0.0, 3.5):
        time.sleep(pause)
        assert call(p.url, "/v1/chat/completions", chat("hi"))[0] == 200
        p.settled()  # the candidate's answer has ended: its connection is back in the pool
    for srv in (base, cand):
        peers = [e["peer"] for e in srv.log]
        assert peers[0] == peers[1] != peers[2], peers
