"""Keep-alive: a finished stream hands its connection back, so the next TTFT holds no handshake; an old idle one is not reused.

Servers such as vLLM write `data: [DONE]` and the end of the chunked body
separately. A client that stops reading at [DONE] closes the connection,
and every later request then measures a new TCP (and TLS) handshake as
part of its time to first token.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from aiohttp import web

from qualitycheck.core import _http
from qualitycheck.core._cases import Case
from qualitycheck.core._config import RunOptions, Target
from qualitycheck.core._records import Response
from qualitycheck.generation import _client
from qualitycheck.generation._client import Endpoint
from qualitycheck.testserver import TestServer
from tests.unit.test_client import case

END_AFTER_S = 1.5
"""How long after [DONE] the test server ends the body: far past any stall of a busy machine, well within the drain."""


def test_sequential_streams_share_one_connection_when_the_end_follows_done(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_client, "_DRAIN_S", END_AFTER_S + 3.5)  # the client waits for the end: the connection is reused
    peers: list[int] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        peers.append(request.transport.get_extra_info("peername")[1])  # type: ignore[union-attr]
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b'data: {"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]}\n\n')
        await resp.write(b"data: [DONE]\n\n")
        await asyncio.sleep(END_AFTER_S)  # the body's end comes in a later write
        await resp.write_eof()
        return resp

    async def go() -> list[tuple[float, float]]:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", handler)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        ep = Endpoint("baseline", Target(url=f"http://127.0.0.1:{port}", model="m"), RunOptions(concurrency=1))
        e2e = []
        try:
            for i in range(4):
                t0 = time.perf_counter()
                r = await ep.send(Case(id=f"c{i}", category="x", messages=[{"role": "user", "content": "x"}]))
                assert r.ok and r.text == "hi", r.error
                e2e.append((r.e2e_s, time.perf_counter() - t0))
        finally:
            await ep.aclose()
            await runner.cleanup()
        return e2e

    e2e = asyncio.run(go())
    assert len(peers) == 4 and len(set(peers)) == 1, f"{len(set(peers))} connections for 4 requests"
    # the answer ends at [DONE], not when the body's end arrives: its time leaves out most of the wait for the end
    assert all(wall - t >= END_AFTER_S / 2 for t, wall in e2e), e2e


def test_a_connection_idle_past_the_reuse_bound_is_replaced_not_reused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Servers close idle connections (vLLM after 5 s); a POST written into one they are closing is lost, so the pool stops reusing them first."""
    monkeypatch.setattr(_http, "IDLE_REUSE_S", 3.0)
    with TestServer() as srv:
        ep = Endpoint("candidate", Target(url=srv.url, model="m"), RunOptions(retries=0))

        async def go() -> list[Response]:
            try:
                got = [await ep.send(case())]
                got.append(await ep.send(case()))  # at once: the same connection
                await asyncio.sleep(3.5)
                got.append(await ep.send(case()))  # idle past the bound: a new one
                return got
            finally:
                await ep.aclose()

        assert all(r.ok for r in asyncio.run(go()))
        peers = [e["peer"] for e in srv.log]
    assert peers[0] == peers[1] != peers[2]
