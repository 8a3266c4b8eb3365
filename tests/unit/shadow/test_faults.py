"""A candidate that is down, slow or cut off, a failing baseline, a caller that leaves: callers see only the baseline."""

from __future__ import annotations

import http.client
import json
import socket
from typing import Any
from urllib.parse import urlsplit

from qualitycheck.core._store import RunStore
from qualitycheck.testserver import Fault, TestServer

from .conftest import shadow_config
from .test_forwarding import call, chat


def free_port_url() -> str:
    """A loopback URL nothing listens on: a candidate that is down."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}"


def stored(p: Any) -> dict[tuple[str, str], Any]:
    with RunStore.open(p.out) as store:
        return {(r.case_id, r.target): r for r in store.responses()}


def test_a_candidate_that_is_down_changes_nothing_for_callers_and_is_counted(proxy_for: Any) -> None:
    with TestServer(default="fine answer") as base:
        p = proxy_for(shadow_config(base.url, free_port_url()))
        body = chat("q", stream=True)
        direct = call(base.url, "/v1/chat/completions", body)
        proxied = call(p.url, "/v1/chat/completions", body)
        assert proxied[0] == 200 and proxied[2] == direct[2]
        p.settled()
        assert p.counter("qc_shadow_candidate_errors_total", kind="connection") == p.counter("qc_shadow_mirrored_total") > 0
        p.stop()
    rs = stored(p)
    cand = [r for (_, t), r in rs.items() if t == "candidate"]
    assert cand and all(r.error is not None and r.error.kind == "connection" for r in cand)
    assert all(r.ok for (_, t), r in rs.items() if t == "baseline")


def test_a_hanging_candidate_never_delays_the_caller_and_its_mirrors_are_bounded(proxy_for: Any) -> None:
    """max_inflight=2 against a candidate that never answers: every caller is served, two mirrors wait, the rest drop."""
    with TestServer(default="quick") as base, TestServer(faults=[Fault("hang", times=None)]) as cand:
        p = proxy_for(shadow_config(base.url, cand.url, max_inflight=2, drain_timeout_s=0.5, run={"timeout_s": 30.0}))
        for i in range(5):
            status, _, raw = call(p.url, "/v1/chat/completions", chat(f"q{i}"))
            assert status == 200 and b"quick" in raw
        # every caller has its answer while the first two mirrors are still waiting on the candidate
        assert p.metrics.inflight._value.get() == 2
        assert p.counter("qc_shadow_mirrored_total") == 2
        assert p.counter("qc_shadow_dropped_total", reason="max_inflight") == 3
        assert len(base.requests("/chat/completions")) == 5
        drain = p.stop()
    assert drain.in_flight == 2 and drain.cancelled == 2
    assert p.counter("qc_shadow_dropped_total", reason="stopped") == 2


def test_a_slow_candidate_is_recorded_with_its_own_timing(proxy_for: Any) -> None:
    # 3 s before the candidate's first token: the caller's answer and a counter read fit in it on a busy machine
    with TestServer(default="same words here") as base, TestServer(default="same words here", ttft_s=3.0) as cand:
        p = proxy_for(shadow_config(base.url, cand.url, run={"timeout_s": 30.0}))
        status, _, _ = call(p.url, "/v1/chat/completions", chat("slow?", stream=True))
        assert status == 200 and p.counter("qc_shadow_stored_total") == 0  # answered before the candidate was
        p.settled()
        p.stop()
    rs = stored(p)
    (b,) = [r for (_, t), r in rs.items() if t == "baseline"]
    (c,) = [r for (_, t), r in rs.items() if t == "candidate"]
    assert b.ok and c.ok and c.ttft_s is not None and b.ttft_s is not None and c.ttft_s >= 2.9 > b.ttft_s


def test_a_candidate_stream_reset_is_a_stored_error_and_the_caller_has_its_whole_answer(proxy_for: Any) -> None:
    with (
        TestServer(default="a b c d e") as base,
        TestServer(default="a b c d e", faults=[Fault("reset", times=None, after_chunks=2)]) as cand,
    ):
        p = proxy_for(shadow_config(base.url, cand.url))
        body = chat("reset me", stream=True)
        assert call(p.url, "/v1/chat/completions", body)[2] == call(base.url, "/v1/chat/completions", body)[2]
        p.settled()
        assert p.counter("qc_shadow_candidate_errors_total", kind="stream_cut") == 1
        p.stop()
    (c,) = [r for (_, t), r in stored(p).items() if t == "candidate"]
    assert c.error is not None and c.error.kind == "stream_cut"


def test_a_baseline_5xx_passes_through_unchanged_and_the_pair_keeps_it(proxy_for: Any) -> None:
    with (
        TestServer(faults=[Fault("status", status=503, times=None, retry_after="7")]) as base,
        TestServer(default="candidate fine") as cand,
    ):
        p = proxy_for(shadow_config(base.url, cand.url))
        body = chat("fail", stream=True)
        direct = call(base.url, "/v1/chat/completions", body)
        proxied = call(p.url, "/v1/chat/completions", body)
        assert proxied[0] == direct[0] == 503 and proxied[2] == direct[2] and proxied[1]["retry-after"] == "7"
        p.settled()
        assert p.counter("qc_shadow_baseline_errors_total", kind="http_status") == 1
        p.stop()
    rs = stored(p)
    (b,) = [r for (_, t), r in rs.items() if t == "baseline"]
    assert b.error is not None and b.error.status == 503 and b.error.message == "HTTP 503: injected 503"
    assert [r.ok for (_, t), r in rs.items() if t == "candidate"] == [True]


def test_a_baseline_that_is_down_gets_the_caller_a_502(proxy_for: Any) -> None:
    with TestServer(default="x") as cand:
        p = proxy_for(shadow_config(free_port_url(), cand.url))
        status, _, raw = call(p.url, "/v1/chat/completions", chat("anyone?"))
        assert status == 502 and json.loads(raw)["error"]["code"] == 502
        p.settled()
        assert p.counter("qc_shadow_baseline_errors_total", kind="connection") == 1


def test_a_baseline_cut_mid_stream_cuts_the_caller_too(proxy_for: Any) -> None:
    """A reset is not turned into a clean end: the caller's read fails as it would talking to the baseline."""
    with (
        TestServer(default="a b c d e", faults=[Fault("reset", times=None, after_chunks=2)]) as base,
        TestServer(default="a b c d e") as cand,
    ):
        p = proxy_for(shadow_config(base.url, cand.url))
        u = urlsplit(p.url)
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
        conn.request(
            "POST", "/v1/chat/completions", body=json.dumps(chat("cut", stream=True)), headers={"Content-Type": "application/json"}
        )
        resp = conn.getresponse()
        try:
            raw = resp.read()
            complete = True
        except http.client.IncompleteRead:
            raw, complete = b"", False
        conn.close()
        assert not complete or b"[DONE]" not in raw
        p.settled()
        assert p.counter("qc_shadow_baseline_errors_total", kind="stream_cut") == 1
        # the proxy goes on serving
        assert call(p.url, "/v1/models")[0] == 200


def test_a_caller_leaving_mid_stream_drops_its_pair_and_nothing_else(proxy_for: Any) -> None:
    with TestServer(default="one two three four five six seven eight", itl_s=0.2) as base, TestServer(default="x", itl_s=0.2) as cand:
        p = proxy_for(shadow_config(base.url, cand.url))
        u = urlsplit(p.url)
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
        conn.request(
            "POST", "/v1/chat/completions", body=json.dumps(chat("leave", stream=True)), headers={"Content-Type": "application/json"}
        )
        resp = conn.getresponse()
        assert resp.status == 200 and resp.fp is not None
        resp.fp.readline()  # the first event is here; then the caller hangs up
        conn.sock.shutdown(socket.SHUT_RDWR)  # type: ignore[union-attr]
        conn.close()
        p.wait_for(lambda: p.counter("qc_shadow_dropped_total", reason="client_disconnected") == 1, "the drop to be counted")
        p.settled()
        assert p.counter("qc_shadow_stored_total") == 0
        body = chat("next caller", stream=True)
        base.itl_s = cand.itl_s = 0.0
        assert call(p.url, "/v1/chat/completions", body)[2] == call(base.url, "/v1/chat/completions", body)[2]
        p.settled()
        assert p.counter("qc_shadow_stored_total") == 1


def test_a_body_that_is_not_json_is_forwarded_and_not_mirrored(servers: Any, proxy_for: Any) -> None:
    base, cand = servers
    p = proxy_for(shadow_config(base.url, cand.url))
    u = urlsplit(p.url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    conn.request("POST", "/v1/chat/completions", body=b"not json", headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    direct = http.client.HTTPConnection(urlsplit(base.url).hostname, urlsplit(base.url).port, timeout=10)
    direct.request("POST", "/v1/chat/completions", body=b"not json", headers={"Content-Type": "application/json"})
    d = direct.getresponse()
    assert (resp.status, resp.read()) == (d.status, d.read())
    p.settled()
    assert p.counter("qc_shadow_dropped_total", reason="not_json") == 1 and cand.requests("/chat/completions") == []
