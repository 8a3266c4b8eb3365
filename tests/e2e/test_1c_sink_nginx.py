"""Debian's nginx mirrors production traffic to `qualitycheck shadow --sink`; callers never pay for it.

The main test puts nginx in front of the real fp32 vLLM server that answers
production, with its `mirror` directive pointing at the sink, which asks a
second fp32 server (a replica of production) and the real ngram candidate:
callers (streaming and not, on a keep-alive connection) get answers
byte-identical to direct requests but for vLLM's per-request id and
timestamp, the sink's folder holds every pair and `qualitycheck gate DIR`
gives a verdict. Production's server answers callers one at a time, as it
answered the direct requests: vLLM CPU's fp32 kernels are not
batch-invariant, and a caller's answer batched with another request can
differ in a late token (seen here when the sink asked production itself),
which would say nothing about the gateway.

The fault tests use nginx with the scripted test server as the baseline, so
each fault is exact: the sink down, a mirror target that answers slowly (what
nginx does then: it holds the caller's connection, which is why the sink
answers before any work), the candidate hanging or down, and a baseline 5xx.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from aiohttp import web

from qualitycheck.core._records import ShadowPeriods
from qualitycheck.core._store import RunStore
from qualitycheck.testserver import Fault, TestServer
from tests.e2e.e2e_helpers import MODEL, SUITES, answer_of, explain, qc, summary_of, write_config
from tests.e2e.gateway import free_port, need_nginx, nginx_gateway, sink_process

pytestmark = [pytest.mark.e2e, pytest.mark.engines("fp32", "fp32-ngram", "fp32-replica")]

MAX_TOKENS = 40
_PER_REQUEST = re.compile(rb'"id":"[^"]*"|"created":\d+')
"""vLLM's fields that differ on every request by design: everything else in an answer must be the same bytes."""


def _normalised(raw: bytes) -> bytes:
    return _PER_REQUEST.sub(b"", raw)


def _same_answer(got: bytes, want: bytes, stream: bool, what: str) -> None:
    """Unstreamed: the same bytes but for the per-request fields. Streamed: the same answer, however vLLM broke it into
    events (`answer_of` says why the breaks are its timing)."""
    if stream:
        assert answer_of(got, True) == answer_of(want, True), what
    else:
        assert _normalised(got) == _normalised(want), what


class Caller:
    """One client on one keep-alive connection, as an SDK's connection pool holds it."""

    def __init__(self, url: str):
        u = urlsplit(url)
        self.conn = http.client.HTTPConnection(u.hostname, u.port, timeout=300)

    def post(self, body: dict[str, Any], path: str = "/v1/chat/completions", headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        self.conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json", **(headers or {})})
        resp = self.conn.getresponse()
        return resp.status, resp.read()

    def close(self) -> None:
        self.conn.close()


def _post(url: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    c = Caller(url)
    try:
        return c.post(body, headers=headers)
    finally:
        c.close()


def _requests() -> list[dict[str, Any]]:
    """The fp32 suite's chat prompts, each once streamed and once not, greedy (the two fp32 servers agree on greedy)."""
    out = []
    for line in (SUITES / "fp32.jsonl").read_text(encoding="utf-8").splitlines():
        case = json.loads(line)
        if not case.get("messages"):
            continue
        for stream in (True, False):
            body = {"model": MODEL, "messages": case["messages"], "temperature": 0, "max_tokens": MAX_TOKENS, "stream": stream}
            if stream:
                body["stream_options"] = {"include_usage": True}
            out.append({"route": case["category"], "body": body})
    return out[:16]


@pytest.fixture(scope="module")
def mirrored(engines: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    need_nginx()
    servers = engines.use("fp32", "fp32-ngram", "fp32-replica")
    production, replica, candidate = servers["fp32"].url, servers["fp32-replica"].url, servers["fp32-ngram"].url
    work = tmp_path_factory.mktemp("sink-nginx")
    requests = _requests()
    direct = [_post(production, r["body"]) for r in requests]  # one at a time, before any load
    cfg = write_config(work / "qualitycheck.yaml")
    args = ("-c", str(cfg), "--baseline", replica, "--candidate", candidate, "--model", MODEL, "--sample", "1.0")
    with sink_process(work, *args) as sink, nginx_gateway(work / "nginx", production, sink.url) as gateway:
        caller = Caller(gateway)  # one after another on one keep-alive connection, as the direct requests were sent
        try:
            through = [caller.post(r["body"], headers={"X-Route": r["route"], "Authorization": "Bearer sk-caller"}) for r in requests]
        finally:
            caller.close()
        sink.wait_metric("qc_shadow_stored_total", len(requests))
        code = sink.stop()
        log = sink.log.read_text(errors="replace")
        out = sink.out
    return {"requests": requests, "direct": direct, "through": through, "out": out, "code": code, "log": log}


def test_callers_through_nginx_get_the_bytes_a_direct_request_gets(mirrored: dict[str, Any]) -> None:
    assert mirrored["code"] in (0, 1), mirrored["log"][-4000:]
    for r, (d_status, d_raw), (n_status, n_raw) in zip(mirrored["requests"], mirrored["direct"], mirrored["through"], strict=True):
        assert n_status == d_status == 200
        _same_answer(n_raw, d_raw, r["body"]["stream"], r["body"]["messages"][-1]["content"])


def test_the_sinks_folder_holds_every_pair_and_gate_gives_a_verdict(mirrored: dict[str, Any]) -> None:
    out: Path = mirrored["out"]
    with RunStore.open(out) as store:
        cases = store.cases()
        responses = list(store.responses())
        periods = store.record(ShadowPeriods)
    n = len(mirrored["requests"])
    assert len(cases) == n and {c.route for c in cases} == {r["route"] for r in mirrored["requests"]}
    assert sorted(r.target for r in responses if r.target != "control") == ["baseline"] * n + ["candidate"] * n
    incomplete = [
        (r.case_id, r.target, r.error, len(r.text), r.e2e_s, r.finish_reason) for r in responses if not (r.ok and r.text and r.e2e_s)
    ]
    assert not incomplete, f"{incomplete}\n{mirrored['log'][-4000:]}"
    assert any(len(r.chunk_times) > 1 for r in responses if r.target == "baseline")
    assert periods is not None and periods.periods[-1].mode == "sink" and periods.periods[-1].stored == n
    proc = qc("gate", str(out))
    assert proc.returncode == 0, explain(proc)
    s = summary_of(out)
    assert s["verdict"] == "pass" and s["cases"] == n
    assert s["acceptance"]["rate"] is not None and s["acceptance"]["draft_tokens"] > 0
    assert b"sk-caller" not in b"".join(f.read_bytes() for f in out.rglob("*") if f.is_file())


# ---------------------------------------------------------------- faults, with the scripted test server as the baseline
def _chat(content: str, stream: bool) -> dict[str, Any]:
    return {"model": "test-model", "messages": [{"role": "user", "content": content}], "temperature": 0, "stream": stream}


def _down_url() -> str:
    return f"http://127.0.0.1:{free_port()}"


def _callers_get_what_direct_gets(gateway: str, base: str, prompts: list[str]) -> None:
    """Each prompt streamed and not, all on one keep-alive connection: the answer direct gets (the same bytes unstreamed), every one answered."""
    caller = Caller(gateway)
    try:
        for p in prompts:
            for stream in (False, True):
                got = caller.post(_chat(p, stream))
                want = _post(base, _chat(p, stream))
                assert got[0] == want[0], p
                _same_answer(got[1], want[1], stream, p)
    finally:
        caller.close()


def test_the_sink_down_changes_nothing_for_callers(tmp_path: Path) -> None:
    with TestServer(default="one two three") as base, nginx_gateway(tmp_path / "nginx", base.url, _down_url()) as gateway:
        _callers_get_what_direct_gets(gateway, base.url, [f"question {i}" for i in range(4)])
    assert "connect() failed" in (tmp_path / "nginx" / "error.log").read_text()  # the mirror was tried, and failed


@contextmanager
def _held_mirror() -> Iterator[tuple[str, threading.Event, list[float]]]:
    """A mirror target that answers each request only once `release` is set (what a sink that did its work first would be)."""
    release = threading.Event()
    seen: list[float] = []
    port = free_port()
    ready = threading.Event()
    stop: list[Any] = []

    async def handle(request: web.Request) -> web.Response:
        await request.read()
        seen.append(time.monotonic())
        while not release.is_set():
            await asyncio.sleep(0.01)
        return web.Response(status=204)

    def serve() -> None:
        async def main() -> None:
            app = web.Application()
            app.router.add_route("*", "/{tail:.*}", handle)
            runner = web.AppRunner(app)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", port).start()
            done = asyncio.Event()
            stop.append((asyncio.get_running_loop(), done))
            ready.set()
            await done.wait()
            await runner.cleanup()

        asyncio.run(main())

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    ready.wait(10)
    try:
        yield f"http://127.0.0.1:{port}", release, seen
    finally:
        release.set()
        loop, done = stop[0]
        loop.call_soon_threadsafe(done.set)
        t.join(10)


def test_nginx_holds_the_callers_connection_until_the_mirror_answers(tmp_path: Path) -> None:
    """Why the sink answers before any work: the answer arrives, but the caller's next request waits for the mirror.

    Measured here on nginx 1.22 (docs/stages/shadow.md): the first answer on a
    connection is delivered at once, and the next request on that keep-alive
    connection is not read until the mirror subrequest of the first has its
    answer.
    """
    with (
        TestServer(default="one two three") as base,
        _held_mirror() as (mirror, release, seen),
        nginx_gateway(tmp_path / "nginx", base.url, mirror) as gateway,
    ):
        caller = Caller(gateway)
        first = caller.post(_chat("first", stream=False))
        assert first[0] == 200 and b"one two three" in first[1] and not release.is_set()  # answered while the mirror is held
        deadline = time.monotonic() + 10  # nginx sends the mirror subrequest beside the main one: it may land just after
        while not seen and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(seen) == 1
        second: list[Any] = []
        t = threading.Thread(target=lambda: second.append(caller.post(_chat("second", stream=False))), daemon=True)
        t.start()
        t.join(2.0)
        held = t.is_alive()  # still waiting: nginx has not read the second request, the baseline has not seen it
        asked = len(base.requests("/chat/completions"))
        release.set()
        t.join(30)
        caller.close()
    assert held and asked == 1, "nginx answered the next request on the connection before the mirror's answer"
    assert second and second[0][0] == 200


def test_a_hanging_candidate_costs_callers_nothing_and_the_drops_are_counted(tmp_path: Path) -> None:
    with (
        TestServer(default="one two three") as base,
        TestServer(faults=[Fault("hang", times=None)]) as cand,
        sink_process(
            tmp_path, "--baseline", base.url, "--candidate", cand.url, "--sample", "1", "--max-inflight", "2", "--drain-timeout", "1"
        ) as sink,
        nginx_gateway(tmp_path / "nginx", base.url, sink.url) as gateway,
    ):
        _callers_get_what_direct_gets(gateway, base.url, [f"question {i}" for i in range(5)])  # 10 mirrored, 2 may wait
        sink.wait_metric("qc_shadow_dropped_total", 8, timeout=30, reason="max_inflight")
        assert sink.metric("qc_shadow_mirrored_total") == 2 and sink.metric("qc_shadow_inflight") == 2
        sink.stop()
    period = json.loads((sink.out / "shadow.json").read_text())
    assert period["dropped"] == {"max_inflight": 8, "stopped": 2} and period["requests"] == 10 and period["stored"] == 0


def test_a_candidate_that_is_down_costs_callers_nothing_and_its_errors_are_counted(tmp_path: Path) -> None:
    with (
        TestServer(default="one two three") as base,
        sink_process(tmp_path, "--baseline", base.url, "--candidate", _down_url(), "--sample", "1") as sink,
        nginx_gateway(tmp_path / "nginx", base.url, sink.url) as gateway,
    ):
        _callers_get_what_direct_gets(gateway, base.url, [f"question {i}" for i in range(3)])
        sink.wait_metric("qc_shadow_stored_total", 6, timeout=60)
        assert sink.metric("qc_shadow_candidate_errors_total", kind="connection") == 6
        assert sink.stop() in (0, 1)
    with RunStore.open(sink.out) as store:
        rs = list(store.responses())
    assert all(r.error is not None and r.error.kind == "connection" for r in rs if r.target == "candidate")
    assert all(r.ok for r in rs if r.target == "baseline")


def test_a_baseline_5xx_passes_through_nginx_and_the_pair_is_recorded_as_an_error(tmp_path: Path) -> None:
    fault = Fault("status", match="broken", status=500, times=None)
    with (
        TestServer(default="one two three", faults=[fault]) as base,
        TestServer(default="one two three") as cand,
        sink_process(tmp_path, "--baseline", base.url, "--candidate", cand.url, "--sample", "1") as sink,
        nginx_gateway(tmp_path / "nginx", base.url, sink.url) as gateway,
    ):
        status, raw = _post(gateway, _chat("a broken question", stream=False))
        assert (status, raw) == _post(base.url, _chat("a broken question", stream=False))
        assert status == 500
        sink.wait_metric("qc_shadow_stored_total", 1, timeout=60)
        assert sink.metric("qc_shadow_baseline_errors_total", kind="http_status") == 1
        sink.stop()
    with RunStore.open(sink.out) as store:
        rs = {r.target: r for r in store.responses()}
    assert rs["baseline"].error is not None and rs["baseline"].error.status == 500
    assert rs["candidate"].ok
