"""The shadow proxy: clients get the baseline's answer; a sample is handed to the mirror side, which asks the candidate.

Every request is forwarded to the baseline and its answer is passed back as
the baseline sent it: status, headers (less the hop-by-hop ones, which belong
to each connection) and body bytes, a stream chunk by chunk as each read
arrives, never buffered. The caller's `Authorization` goes to the baseline
and nowhere else.

This loop does only that, plus a bounded hand-off (`shadow._handoff`) of each
sampled chat or completions request, at once (so the candidate is asked at
the same moment as the baseline), and of the baseline's answer as forwarded:
its reads and their arrival times, appended as they pass. Everything else,
the candidate's request, parsing, the noise floor, the case, redaction and
the writer, is the mirror side's (`shadow._mirror`), which `qualitycheck
shadow` runs in a process of its own: its errors, its slowness and its
absence only show in the record and the metrics. A sampled request the
hand-off cannot take (full, or the mirror process gone) is counted as
dropped.

Bodies are never logged: the log says what happened (listening, rotations,
the drain, store failures), with counts.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import aiohttp
from aiohttp import HttpVersion11, web
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from qualitycheck.core._errors import QualitycheckError
from qualitycheck.core._http import TRANSPORT_ERRORS, pooled_connector, transport_error
from qualitycheck.core._records import ErrorInfo, ShadowDrain
from qualitycheck.shadow._mirror import AS_REQUESTED, MIRRORED, BaselineAnswer
from qualitycheck.shadow._settings import ShadowSettings

__all__ = ["AS_REQUESTED", "HOP_BY_HOP", "ShadowProxy"]

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
"""RFC 9110 §7.6.1: headers about one connection, which a proxy must not pass on (nor any the Connection header names)."""
_NOT_TO_UPSTREAM = HOP_BY_HOP | {"host", "content-length", "expect"}
"""Also set per connection: the upstream request has its own host and length, and the body is already read (no 100-continue)."""


def _headers_without(headers: CIMultiDictProxy[str], drop: frozenset[str]) -> CIMultiDict[str]:
    """`headers` (every value of a repeated one, in order) less `drop` and whatever their Connection header names."""
    if "Connection" in headers:
        drop = drop | {t.strip().lower() for v in headers.getall("Connection") for t in v.split(",")}
    return CIMultiDict([(k, v) for k, v in headers.items() if k.lower() not in drop])


class Handoff(Protocol):
    """Where sampled requests and the baseline's answers go (`shadow._handoff`: the mirror side, here or in its own process)."""

    @property
    def up(self) -> bool: ...
    @property
    def full(self) -> bool: ...
    async def start(self) -> None: ...
    def count(self, kind: str) -> None: ...
    def drop(self, reason: str) -> None: ...
    def request(self, case_id: str, kind: str, raw: bytes, tags: dict[str, str]) -> None: ...
    def baseline_answer(self, case_id: str, answer: BaselineAnswer) -> None: ...
    def baseline_failed(self, case_id: str, info: ErrorInfo, started: float) -> None: ...
    def caller_left(self, case_id: str, draining: bool) -> None: ...
    async def health(self, draining: bool) -> tuple[int, dict[str, Any]]: ...
    async def metrics(self) -> bytes: ...
    def begin_drain(self) -> None: ...
    async def drain(self, timeout: float) -> ShadowDrain | None: ...


class _Handed:
    """A sampled request handed over: what the forwarding loop keeps of it until its answer ended."""

    __slots__ = ("case_id", "done")

    def __init__(self, case_id: str):
        self.case_id = case_id
        self.done = False


class ShadowProxy:
    """One listening proxy: forwarding, the hand-off of sampled requests, /qc/ready, /qc/health, /qc/metrics, drain."""

    def __init__(self, settings: ShadowSettings, handoff: Handoff, *, host: str, port: int, replica: str, log: Callable[[str], None]):
        self.settings = settings
        self.handoff = handoff
        self.host = host
        self.port = port
        self.replica = replica
        self.log = log
        self._sample = settings.shadow.sample
        self._tag_headers = list(settings.shadow.tag_headers.items())
        self._root = settings.baseline.server_url
        self._seq = 0
        self._draining = False
        self._session: aiohttp.ClientSession | None = None
        self._runner: web.ServerRunner | None = None
        self.url = ""

    # ------------------------------------------------------------ lifecycle
    async def start(self) -> str:
        """Start the mirror side, then listen; returns the proxy's URL (the bound port when 0 was asked)."""
        settings = self.settings
        await self.handoff.start()
        self._session = aiohttp.ClientSession(
            connector=pooled_connector(0),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=settings.timeout_s, sock_read=None),
            auto_decompress=False,  # the caller gets the bytes the baseline sent, compressed or not
            cookie_jar=aiohttp.DummyCookieJar(),  # one caller's cookies must never ride along with another's request
            skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding", "Content-Type"),  # only what the caller sent
            trust_env=False,
        )
        # aiohttp's low-level server: every path goes to one handler, so an application's router, middlewares and
        # signals would be work per request for nothing
        server = web.Server(self._handle, request_factory=self._request_factory(), handler_cancellation=True, access_log=None)
        self._runner = web.ServerRunner(server, shutdown_timeout=settings.shadow.drain_timeout_s)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, backlog=4096, reuse_address=True)
        try:
            await site.start()
        except OSError as exc:  # a port in use, an address not on this host: bad input, said as such (exit 2)
            await self._runner.cleanup()
            await self._session.close()
            raise QualitycheckError(f"--listen {self.host}:{self.port}: cannot listen there ({exc.strerror or exc})") from None
        port = self._runner.addresses[0][1]
        host = f"[{self.host}]" if ":" in self.host else self.host
        self.url = f"http://{host}:{port}"
        return self.url

    def _request_factory(self) -> Callable[..., web.BaseRequest]:
        """Requests whose body may be `max_body_mb` (aiohttp answers 413 beyond it, as it does for an application)."""
        loop = asyncio.get_running_loop()
        max_size = int(self.settings.shadow.max_body_mb * 2**20)

        def make(message: Any, payload: Any, protocol: Any, writer: Any, task: asyncio.Task[None]) -> web.BaseRequest:
            return web.BaseRequest(message, payload, protocol, writer, task, loop, client_max_size=max_size)

        return make

    async def drain(self) -> ShadowDrain | None:
        """SIGTERM: stop listening, let in-flight requests finish within the timeout, then the mirror side drains in what is left."""
        timeout = self.settings.shadow.drain_timeout_s
        t0 = time.monotonic()
        self._draining = True
        self.handoff.begin_drain()
        assert self._runner is not None
        await self._runner.cleanup()  # closes the listener and idle connections, waits for handlers up to the timeout
        if self._session is not None:
            await self._session.close()
        return await self.handoff.drain(max(0.0, timeout - (time.monotonic() - t0)))

    # ------------------------------------------------------------ requests
    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        path = request.path
        if path.startswith("/qc/"):
            return await self._own(path)
        if "Expect" in request.headers and (refused := await _answer_expect(request)) is not None:
            return refused
        kind = MIRRORED.get(path) if request.method == "POST" else None
        body = await request.read()
        self.handoff.count(kind or "other")
        handed = self._admit(kind, body, request.headers) if kind is not None else None
        return await self._respond(request, body, handed)

    async def _respond(self, request: web.BaseRequest, body: bytes, handed: _Handed | None) -> web.StreamResponse:
        """The caller's answer, once its request was read and (when sampled) handed over: the baseline's, forwarded."""
        return await self._forward(request, body, handed)

    async def _own(self, path: str) -> web.Response:
        if path == "/qc/metrics":
            body = await self.handoff.metrics()
            return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})
        if path == "/qc/health":
            status, health = await self.handoff.health(self._draining)
            return web.json_response(health, status=status)
        if path == "/qc/ready":
            # what a gateway's or orchestrator's probe should read: callers need the forwarding only, so a mirror side
            # that is down or stalled (503 on /qc/health) must not take a working proxy out of their path
            return web.json_response({"status": "draining" if self._draining else "ready"}, status=503 if self._draining else 200)
        return web.json_response({"error": {"message": f"no such path {path}", "code": 404}}, status=404)

    def _admit(self, kind: str, raw: bytes, headers: Mapping[str, str]) -> _Handed | None:
        """Sampled, and taken by the hand-off (else counted as dropped): the mirror side gets the request now."""
        if self._draining or (self._sample < 1.0 and random.random() >= self._sample):
            return None
        if not self.handoff.up:
            self.handoff.drop("mirror_down")
            return None
        if self.handoff.full:
            self.handoff.drop("handoff_full")
            return None
        self._seq += 1
        tags = {tag: headers[h] for h, tag in self._tag_headers if h in headers}
        handed = _Handed(f"{self.replica}-{self._seq:010d}")
        self.handoff.request(handed.case_id, kind, raw, tags)
        return handed

    async def _forward(self, request: web.BaseRequest, body: bytes, handed: _Handed | None) -> web.StreamResponse:
        assert self._session is not None
        headers = _headers_without(request.headers, _NOT_TO_UPSTREAM)
        url = URL(self._root + request.raw_path, encoded=True)
        started, t0 = time.time(), time.perf_counter()
        try:
            async with self._session.request(request.method, url, data=body or None, headers=headers, allow_redirects=False) as up:
                resp = web.StreamResponse(status=up.status, reason=up.reason, headers=_headers_without(up.headers, HOP_BY_HOP))
                answer = None
                if handed is not None:
                    h = up.headers
                    meta = (h.get("Content-Type", ""), h.get("Content-Encoding", ""), h.get("Retry-After"))
                    answer = BaselineAnswer(up.status, meta, t0, started)
                try:
                    await resp.prepare(request)
                except TRANSPORT_ERRORS:
                    return self._caller_left(handed, resp)
                while True:
                    try:
                        data = await up.content.readany()
                    except TRANSPORT_ERRORS as exc:  # the baseline broke off: so does the caller's answer, as it would direct
                        self._baseline_failed(handed, transport_error(exc, got_headers=True, timeout_s=0).info, started)
                        if request.transport is not None:
                            request.transport.close()
                        return resp
                    if not data:
                        break
                    try:
                        await resp.write(data)
                    except TRANSPORT_ERRORS:
                        return self._caller_left(handed, resp)
                    if answer is not None:
                        answer.reads.append((data, time.perf_counter()))
                try:
                    await resp.write_eof()
                except TRANSPORT_ERRORS:
                    return self._caller_left(handed, resp)
                if handed is not None and answer is not None:
                    handed.done = True
                    if answer.reads:
                        answer.ended = answer.reads[-1][1]
                    self.handoff.baseline_answer(handed.case_id, answer)
                return resp
        except asyncio.CancelledError:  # the caller disconnected (aiohttp cancels the handler)
            self._caller_left(handed, None)
            raise
        except TRANSPORT_ERRORS as exc:  # no answer from the baseline at all: the caller gets a gateway error
            info = transport_error(exc, got_headers=False, timeout_s=self.settings.timeout_s).info
            self._baseline_failed(handed, info, started)
            msg = {"error": {"message": "qualitycheck shadow: the baseline did not answer", "type": "bad_gateway", "code": 502}}
            return web.json_response(msg, status=502)

    def _baseline_failed(self, handed: _Handed | None, info: ErrorInfo, started: float) -> None:
        if handed is not None and not handed.done:
            handed.done = True
            self.handoff.baseline_failed(handed.case_id, info, started)

    def _caller_left(self, handed: _Handed | None, resp: web.StreamResponse | None) -> web.StreamResponse:
        """The caller went away mid-answer: the mirror side drops its pair (the baseline's answer is incomplete)."""
        if handed is not None and not handed.done:
            handed.done = True
            self.handoff.caller_left(handed.case_id, self._draining)
        return resp if resp is not None else web.StreamResponse()


async def _answer_expect(request: web.BaseRequest) -> web.Response | None:
    """`Expect: 100-continue` answered at once, as aiohttp's Application answers it (its low-level server leaves it to the handler).

    A caller that sends the header waits for the interim answer before it
    sends the body, so without it every such request would wait out the
    caller's own expect timeout. Any other expectation is refused (417).
    """
    if request.version != HttpVersion11:
        return None
    expect = request.headers["Expect"]
    if expect.lower() != "100-continue":
        return web.Response(status=417, text=f"Unknown Expect: {expect}")
    await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    request.writer.output_size = 0  # the interim answer is not part of the response's size
    return None
