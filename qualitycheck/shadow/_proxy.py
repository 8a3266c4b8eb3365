"""The shadow proxy: clients get the baseline's answer; a sample is mirrored to the candidate and recorded.

Every request is forwarded to the baseline and its answer is passed back as
the baseline sent it: status, headers (less the hop-by-hop ones, which belong
to each connection) and body bytes, a stream chunk by chunk as each read
arrives, never buffered. The caller's `Authorization` goes to the baseline
and nowhere else.

A sampled share of chat and completions requests is also sent to the
candidate, on a task of its own with the candidate's own key
(`generation.Endpoint.send_plan`, no retries: a mirror is one request, as
the caller's was). Nothing the candidate does reaches the caller: its answer,
its errors, its slowness and its absence only show in the record and the
metrics. At most `max_inflight` pairs are pending (answering, or queued for
the store); beyond that a sampled request is not mirrored, and the drop is
counted, so a stuck candidate costs bounded memory.

The baseline's side of a pair is read from the bytes being forwarded
(`generation.AnswerReader`, the client's own parser), timed from the moment
the request went upstream, like the candidate's. Both answers are kept read
by read (bytes and arrival time) and parsed once each has ended: per read,
the loop only forwards and appends. Where the two answers differ
the baseline is asked again (with the proxy's configured key, never the
caller's) when the noise floor is on, as `qualitycheck run` does after
generating. A finished pair goes to the `Recorder`'s writer thread.

Bodies are never logged: the log says what happened (listening, rotations,
the drain, store failures), with counts.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import threading
import time
import zlib
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp
from aiohttp import HttpVersion11, web
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from qualitycheck.core._config import Config, RunOptions
from qualitycheck.core._http import TRANSPORT_ERRORS, transport_error
from qualitycheck.core._records import ErrorInfo, MetricsSnapshot, Response, SpecCounters
from qualitycheck.generation._client import AnswerReader, Endpoint, RequestPlan
from qualitycheck.generation._metrics import SentTally, scrape_all, window
from qualitycheck.shadow._recorder import PairRecord, Recorder
from qualitycheck.shadow._tally import ShadowDrain, ShadowMetrics

__all__ = ["AS_REQUESTED", "HOP_BY_HOP", "ShadowProxy"]

AS_REQUESTED = "as requested"
"""A target's model when none is configured: each mirror names the model its caller asked for."""

MIRRORED = {"/v1/chat/completions": "chat", "/v1/completions": "completions"}
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
_SCRAPE_RETRIES = 1
HANDOFF_S = 0.005
"""Finished pairs wait this long to go to the writer together: waking its thread per pair costs the event loop
more than the pair's commit. Pairs not yet handed over are in flight, as far as a `kill -9` is concerned."""


def _headers_without(headers: CIMultiDictProxy[str], drop: frozenset[str]) -> CIMultiDict[str]:
    """`headers` (every value of a repeated one, in order) less `drop` and whatever their Connection header names."""
    if "Connection" in headers:
        drop = drop | {t.strip().lower() for v in headers.getall("Connection") for t in v.split(",")}
    return CIMultiDict([(k, v) for k, v in headers.items() if k.lower() not in drop])


class _Slots:
    """`max_inflight` as a counter both threads use: the loop takes a slot, the writer frees it once the pair is stored."""

    def __init__(self, n: int):
        self._free = n
        self.size = n
        self._lock = threading.Lock()

    def take(self) -> bool:
        with self._lock:
            if self._free <= 0:
                return False
            self._free -= 1
            return True

    def give(self) -> None:
        with self._lock:
            self._free += 1

    @property
    def used(self) -> int:
        return self.size - self._free


class _Pair:
    """A mirrored request on its way: the baseline's side (read as forwarded), the candidate's, maybe the baseline again."""

    __slots__ = ("baseline", "body", "candidate", "case_id", "control", "dropped", "kind", "raw", "recorded", "tags", "task")

    def __init__(self, case_id: str, kind: str, raw: bytes, tags: dict[str, str]):
        self.case_id = case_id
        self.kind = kind
        self.raw = raw
        self.tags = tags
        self.body: dict[str, Any] | None = None
        self.baseline: Response | None = None
        self.candidate: Response | None = None
        self.control: Response | None = None
        self.dropped: str | None = None
        self.recorded = False
        self.task: asyncio.Task[None] | None = None


class ShadowProxy:
    """One listening proxy: forwarding, mirroring, /qc/health, /qc/metrics, periodic /metrics windows, rotation, drain."""

    SIDES = 1
    """Requests a pair has upstream at once from here (the mirror: the baseline's answer is the forwarded one)."""

    def __init__(
        self,
        cfg: Config,
        recorder: Recorder,
        metrics: ShadowMetrics,
        *,
        host: str,
        port: int,
        noise_floor: bool,
        log: Callable[[str], None],
    ):
        assert cfg.baseline is not None and cfg.candidate is not None
        self.cfg = cfg
        self.recorder = recorder
        self.metrics = metrics
        self.host = host
        self.port = port
        self.noise_floor = noise_floor
        self.log = log
        s = cfg.shadow
        self._sample = s.sample
        self._slots = _Slots(s.max_inflight)
        self._tag_headers = list(s.tag_headers.items())
        self._rotate_pairs, self._rotate_s = s.rotation
        self._root = cfg.baseline.server_url
        self._candidate_model = None if cfg.candidate.model == AS_REQUESTED else cfg.candidate.model
        self._candidate_extra = dict(cfg.candidate.extra_body)
        self._candidate_url = cfg.candidate.base_url
        self._seq = 0
        self._pairs: set[_Pair] = set()
        self._draining = False
        self.period = recorder.new_period()
        self._handed = 0
        """Pairs handed to the writer in the open period (rotation by pairs counts these)."""
        self._tally = SentTally()
        self._to_store: list[PairRecord] = []
        self._rotate_now = asyncio.Event()
        self._first_spec: SpecCounters | None = None
        self._session: aiohttp.ClientSession | None = None
        self._mirror_session: aiohttp.ClientSession | None = None
        self._candidate: Endpoint | None = None
        self._again: Endpoint | None = None
        self._runner: web.ServerRunner | None = None
        self._periods: asyncio.Task[None] | None = None
        self._before: dict[str, MetricsSnapshot] = {}
        self.url = ""

    # ------------------------------------------------------------ lifecycle
    async def start(self) -> str:
        """Scrape the first /metrics snapshot, then listen; returns the proxy's URL (the bound port when 0 was asked)."""
        cfg = self.cfg
        assert cfg.baseline is not None and cfg.candidate is not None
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, limit_per_host=0),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=cfg.run.timeout_s, sock_read=None),
            auto_decompress=False,  # the caller gets the bytes the baseline sent, compressed or not
            cookie_jar=aiohttp.DummyCookieJar(),  # one caller's cookies must never ride along with another's request
            skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding", "Content-Type"),  # only what the caller sent
            trust_env=False,
        )
        limit = self._slots.size * self.SIDES
        self._mirror_session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=limit, limit_per_host=limit),
            # no idle timeout per read: each try is bounded as a whole by the same `timeout_s` (`HttpClient.retrying`),
            # which always runs out first, and re-arming a read timer on every arriving packet costs the loop
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=cfg.run.timeout_s, sock_read=None),
            cookie_jar=aiohttp.DummyCookieJar(),
            trust_env=False,
        )
        opts = RunOptions(retries=0, timeout_s=cfg.run.timeout_s, concurrency=self._slots.size, return_token_ids=False)
        # the answers are parsed once each has ended: the loop's time per read goes to forwarding callers' bytes
        self._candidate = Endpoint("candidate", cfg.candidate, opts, self._mirror_session, parse_after=True)
        if self.noise_floor:
            again = cfg.baseline.model_copy(update={"label": "baseline again"})
            self._again = Endpoint("control", again, opts, self._mirror_session, parse_after=True)
        self._before = await self._scrape()
        self._note_acceptance(self._before)
        # aiohttp's low-level server: every path goes to one handler, so an application's router, middlewares and
        # signals would be work per request for nothing
        server = web.Server(self._handle, request_factory=self._request_factory(), handler_cancellation=True, access_log=None)
        self._runner = web.ServerRunner(server, shutdown_timeout=cfg.shadow.drain_timeout_s)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, backlog=4096, reuse_address=True)
        await site.start()
        port = self._runner.addresses[0][1]
        host = f"[{self.host}]" if ":" in self.host else self.host
        self.url = f"http://{host}:{port}"
        self._periods = asyncio.get_running_loop().create_task(self._run_periods())
        return self.url

    def _request_factory(self) -> Callable[..., web.BaseRequest]:
        """Requests whose body may be `max_body_mb` (aiohttp answers 413 beyond it, as it does for an application)."""
        loop = asyncio.get_running_loop()
        max_size = int(self.cfg.shadow.max_body_mb * 2**20)

        def make(message: Any, payload: Any, protocol: Any, writer: Any, task: asyncio.Task[None]) -> web.BaseRequest:
            return web.BaseRequest(message, payload, protocol, writer, task, loop, client_max_size=max_size)

        return make

    async def drain(self) -> ShadowDrain:
        """SIGTERM: stop listening, let in-flight requests and mirrors finish within the timeout, record what is left."""
        timeout = self.cfg.shadow.drain_timeout_s
        t0 = time.monotonic()
        self._draining = True
        in_flight = len(self._pairs)
        if self._periods is not None:
            self._periods.cancel()
            await asyncio.gather(self._periods, return_exceptions=True)
        assert self._runner is not None
        await self._runner.cleanup()  # closes the listener and idle connections, waits for handlers up to the timeout
        pending = [p.task for p in self._pairs if p.task is not None and not p.task.done()]
        left = max(0.0, timeout - (time.monotonic() - t0))
        if pending:
            await asyncio.wait(pending, timeout=left)
        cancelled = 0
        for p in list(self._pairs):
            if p.task is not None and not p.task.done():
                p.task.cancel()
            if not p.recorded:
                self._drop(p, "stopped")
                cancelled += 1
        await asyncio.gather(*(t for t in pending if t is not None), return_exceptions=True)
        await self._close_window()
        for s in (self._session, self._mirror_session):
            if s is not None:
                await s.close()
        return ShadowDrain(
            timeout_s=timeout, in_flight=in_flight, finished=in_flight - cancelled, cancelled=cancelled, seconds=time.monotonic() - t0
        )

    # ------------------------------------------------------------ periods: /metrics windows and rotation
    async def _scrape(self) -> dict[str, MetricsSnapshot]:
        targets = {n: t for n, t in self.cfg.targets().items() if n in ("baseline", "candidate")}
        return await scrape_all(targets, timeout_s=min(10.0, self.cfg.run.timeout_s), retries=_SCRAPE_RETRIES, backoff_s=0.2)

    def _note_acceptance(self, snaps: dict[str, MetricsSnapshot]) -> None:
        """The live acceptance gauges: the candidate's spec-decode counters since the proxy started."""
        snap = snaps.get("candidate")
        spec = snap.spec if snap is not None else None
        if spec is None:
            return
        if self._first_spec is None:
            self._first_spec = spec
            return
        draft = spec.draft_tokens - self._first_spec.draft_tokens
        drafts = spec.drafts - self._first_spec.drafts
        accepted = spec.accepted_tokens - self._first_spec.accepted_tokens
        if draft > 0:
            self.metrics.acceptance_rate.set(accepted / draft)
        if drafts > 0:
            self.metrics.mean_accepted_length.set(1 + accepted / drafts)

    async def _close_window(self) -> None:
        after = await self._scrape()
        self._hand_over()  # the window and a rotation after it come after every pair finished before them
        self.recorder.put_window(window(self._before, after, self._tally))
        self._note_acceptance(after)
        self._before, self._tally = after, SentTally()

    async def _run_periods(self) -> None:
        every = self.cfg.shadow.scrape_every_s or None
        opened = time.monotonic()
        next_scrape = opened + every if every else None
        while True:
            due = [t for t in (next_scrape, opened + self._rotate_s if self._rotate_s else None) if t is not None]
            wait = max(0.0, min(due) - time.monotonic()) if due else None
            try:
                await asyncio.wait_for(self._rotate_now.wait(), wait)
            except TimeoutError:
                pass
            await self._close_window()
            now = time.monotonic()
            if next_scrape is not None:
                next_scrape = now + every if every else None
            if self._rotate_now.is_set() or (self._rotate_s and now - opened >= self._rotate_s):
                self._rotate_now.clear()
                self.recorder.rotate(self.period)
                self.period = self.recorder.new_period()
                self._handed = 0
                opened = now

    # ------------------------------------------------------------ requests
    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        path = request.path
        if path.startswith("/qc/"):
            return self._own(path)
        if "Expect" in request.headers and (refused := await _answer_expect(request)) is not None:
            return refused
        kind = MIRRORED.get(path) if request.method == "POST" else None
        body = await request.read()
        self.metrics.requests[kind or "other"].inc()
        self.period.requests += 1
        pair = self._admit(kind, body, request.headers) if kind is not None else None
        return await self._forward(request, body, pair)

    def _own(self, path: str) -> web.Response:
        if path == "/qc/metrics":
            return web.Response(body=self.metrics.render(), headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})
        if path == "/qc/health":
            status = "draining" if self._draining else "ok"
            body = {
                "status": status,
                "folder": str(self.recorder.folder),
                "inflight": self._slots.used,
                "writer_backlog": self.recorder.backlog(),
            }
            return web.json_response(body, status=503 if self._draining else 200)
        return web.json_response({"error": {"message": f"no such path {path}", "code": 404}}, status=404)

    def _admit(self, kind: str, raw: bytes, headers: Mapping[str, str]) -> _Pair | None:
        """Whether this request is mirrored: sampled, and a slot free under `max_inflight` (else counted as dropped)."""
        if self._draining or (self._sample < 1.0 and random.random() >= self._sample):
            return None
        if not self._slots.take():
            self._count_drop("max_inflight")
            return None
        self.metrics.inflight.set(self._slots.used)
        self._seq += 1
        tags = {tag: headers[h] for h, tag in self._tag_headers if h in headers}
        pair = _Pair(f"{self.recorder.replica}-{self._seq:010d}", kind, raw, tags)
        self._pairs.add(pair)
        pair.task = asyncio.get_running_loop().create_task(self._mirror(pair))
        return pair

    async def _forward(self, request: web.BaseRequest, body: bytes, pair: _Pair | None) -> web.StreamResponse:
        assert self._session is not None
        headers = _headers_without(request.headers, _NOT_TO_UPSTREAM)
        url = URL(self._root + request.raw_path, encoded=True)
        started, t0 = time.time(), time.perf_counter()
        try:
            async with self._session.request(request.method, url, data=body or None, headers=headers, allow_redirects=False) as up:
                resp = web.StreamResponse(status=up.status, reason=up.reason, headers=_headers_without(up.headers, HOP_BY_HOP))
                reader = decoder = None
                if pair is not None:
                    ctype = up.headers.get("Content-Type", "")
                    reader = AnswerReader(
                        pair.kind,
                        sse=ctype.startswith("text/event-stream"),
                        t0=t0,
                        status=up.status,
                        retry_after=up.headers.get("Retry-After"),
                    )
                    decoder = _decoder(up.headers.get("Content-Encoding", ""))
                try:
                    await resp.prepare(request)
                except TRANSPORT_ERRORS:
                    return self._caller_left(pair, resp)
                last = t0
                while True:
                    try:
                        data = await up.content.readany()
                    except TRANSPORT_ERRORS as exc:  # the baseline broke off: so does the caller's answer, as it would direct
                        self._baseline_done(pair, self._failed(pair, transport_error(exc, got_headers=True, timeout_s=0).info, started))
                        if request.transport is not None:
                            request.transport.close()
                        return resp
                    if not data:
                        break
                    last = time.perf_counter()
                    try:
                        await resp.write(data)
                    except TRANSPORT_ERRORS:
                        return self._caller_left(pair, resp)
                    if reader is not None:
                        reader.feed(data if decoder is None else decoder.decompress(data), last)
                try:
                    await resp.write_eof()
                except TRANSPORT_ERRORS:
                    return self._caller_left(pair, resp)
                if pair is not None and reader is not None:
                    fp = _fingerprint(self._root, pair.kind, pair.raw)
                    self._baseline_done(
                        pair, reader.response(case_id=pair.case_id, target="baseline", fingerprint=fp, started_at=started, now=last)
                    )
                return resp
        except asyncio.CancelledError:  # the caller disconnected (aiohttp cancels the handler)
            if pair is not None:
                self._caller_left(pair, None)
            raise
        except TRANSPORT_ERRORS as exc:  # no answer from the baseline at all: the caller gets a gateway error
            info = transport_error(exc, got_headers=False, timeout_s=self.cfg.run.timeout_s).info
            self._baseline_done(pair, self._failed(pair, info, started))
            msg = {"error": {"message": "qualitycheck shadow: the baseline did not answer", "type": "bad_gateway", "code": 502}}
            return web.json_response(msg, status=502)

    def _failed(self, pair: _Pair | None, info: ErrorInfo, started: float) -> Response | None:
        if pair is None:
            return None
        return Response(
            case_id=pair.case_id,
            target="baseline",
            fingerprint=_fingerprint(self._root, pair.kind, pair.raw),
            started_at=started,
            error=info,
        )

    def _caller_left(self, pair: _Pair | None, resp: web.StreamResponse | None) -> web.StreamResponse:
        """The caller went away mid-answer: its pair has no complete baseline answer, so it is dropped (and its mirror stopped)."""
        if pair is not None and pair.dropped is None and not pair.recorded:
            pair.dropped = "stopped" if self._draining else "client_disconnected"
            if pair.task is not None and not pair.task.done():
                pair.task.cancel()
            self._maybe_complete(pair)
        return resp if resp is not None else web.StreamResponse()

    # ------------------------------------------------------------ the mirror
    async def _mirror(self, pair: _Pair) -> None:
        assert self._candidate is not None
        try:
            try:
                body = json.loads(pair.raw)
            except ValueError:
                body = None
            if not isinstance(body, dict):
                pair.dropped = pair.dropped or "not_json"
                return
            pair.body = body
            self.metrics.mirrored.inc()
            self.period.mirrored += 1
            pair.candidate = await self._candidate.send_plan(pair.case_id, self._candidate_plan(pair, body))
        finally:
            if pair.candidate is None and pair.dropped is None:
                pair.dropped = "stopped"
            self._maybe_complete(pair)

    def _candidate_plan(self, pair: _Pair, body: dict[str, Any]) -> RequestPlan:
        """The caller's body for the candidate: its configured model in place of the caller's, its `extra_body` merged in."""
        sent = body
        if (self._candidate_model and body.get("model") != self._candidate_model) or self._candidate_extra:
            sent = {**body, **({"model": self._candidate_model} if self._candidate_model else {}), **self._candidate_extra}
        return RequestPlan(pair.kind, sent, _fingerprint(self._candidate_url, pair.kind, pair.raw))

    def _baseline_done(self, pair: _Pair | None, r: Response | None) -> None:
        if pair is None or r is None:
            return
        pair.baseline = r
        self._maybe_complete(pair)

    def _maybe_complete(self, pair: _Pair) -> None:
        """Both sides are in (or the pair is given up): ask the baseline again where they differ, else store it."""
        if pair.recorded or (pair.task is not None and not pair.task.done() and pair.task is not asyncio.current_task()):
            return
        if pair.dropped is not None:
            self._drop(pair, pair.dropped)
            return
        b, c = pair.baseline, pair.candidate
        if b is None or c is None:
            return
        if self._again is not None and pair.control is None and b.ok and c.ok and b.answer != c.answer and pair.body is not None:
            pair.task = asyncio.get_running_loop().create_task(self._ask_again(pair))
            return
        self._record(pair)

    async def _ask_again(self, pair: _Pair) -> None:
        """The noise floor: the baseline once more, with the request it answered (not the candidate's rewrite)."""
        assert self._again is not None and pair.body is not None
        try:
            plan = RequestPlan(pair.kind, pair.body, _fingerprint(self._root, pair.kind, pair.raw))
            pair.control = await self._again.send_plan(pair.case_id, plan)
        finally:
            if pair.control is None:
                pair.dropped = pair.dropped or "stopped"
            self._maybe_complete(pair)

    def _record(self, pair: _Pair) -> None:
        b, c = pair.baseline, pair.candidate
        assert b is not None and c is not None and pair.body is not None
        pair.recorded = True
        self._pairs.discard(pair)
        for side, r in (("baseline", b), ("candidate", c)):
            self._tally(r)
            if r.error is not None:
                self.metrics.error(side, r.error.kind)
        if b.ok and c.ok:
            self.metrics.compare(b.answer == c.answer)
        responses = [b, c] if pair.control is None else [b, c, pair.control]
        self._to_store.append(PairRecord(pair.case_id, pair.raw, pair.body, pair.tags, responses, self._release))
        if len(self._to_store) == 1:
            asyncio.get_running_loop().call_later(HANDOFF_S, self._hand_over)
        self._handed += 1
        if self._rotate_pairs is not None and self._handed == self._rotate_pairs:
            self._rotate_now.set()

    def _hand_over(self) -> None:
        """Pass the finished pairs to the writer: one wake-up of its thread for all of them."""
        if self._to_store:
            self.recorder.put_pairs(self._to_store)
            self._to_store = []

    def _drop(self, pair: _Pair, reason: str) -> None:
        if pair.recorded:
            return
        pair.recorded = True
        self._pairs.discard(pair)
        self._count_drop(reason)
        self._release()

    def _count_drop(self, reason: str) -> None:
        self.metrics.dropped[reason].inc()
        self.period.dropped[reason] = self.period.dropped.get(reason, 0) + 1

    def _release(self) -> None:
        """A pair's slot is free (stored or given up); called from the writer thread too."""
        self._slots.give()
        self.metrics.inflight.set(self._slots.used)


def _fingerprint(url: str, kind: str, raw: bytes) -> str:
    """The request's identity in the store (target, endpoint, exact body), 20 hex digits as `build_request`'s.

    BLAKE2b rather than SHA-256: it is built into Python, while constructing an OpenSSL 3 hash
    looks the algorithm up on every call, which costs more than hashing a request body.
    """
    return hashlib.blake2b(url.encode() + b"\0" + kind.encode() + b"\0" + raw, digest_size=10).hexdigest()


def _decoder(encoding: str) -> Any:
    """A decompressor for the recorded copy of a compressed answer (the caller gets the compressed bytes)."""
    enc = encoding.strip().lower()
    if enc in ("gzip", "x-gzip"):
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    if enc == "deflate":
        return zlib.decompressobj()
    return None


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
