"""The mirror side of shadowing: everything about a pair once the forwarding loop has handed it over.

The loop that carries callers' bytes (`ShadowProxy`, or the sink's
`ShadowSink`) only samples a request, hands it here, and, for the proxy,
hands over the baseline's answer as it was forwarded: its reads and their
arrival times. Everything else happens on this side: the candidate's request
(and, for the sink, the baseline's), parsing both answers, the noise-floor
re-ask, the case, redaction, the writer, /metrics windows and rotation.

`MirrorSide` runs either in the same process (the library and the in-process
tests) or, for `qualitycheck shadow`, in a process of its own
(`shadow._handoff`), so a stalled or crashed mirror side never touches the
callers: the forwarding process only writes to a bounded hand-off.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
import time
import zlib
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp

from qualitycheck.core._config import HttpPolicy, RunOptions
from qualitycheck.core._http import pooled_connector
from qualitycheck.core._records import ErrorInfo, MetricsSnapshot, Response, ShadowDrain, SpecCounters
from qualitycheck.generation._client import AnswerReader, Endpoint, RequestPlan
from qualitycheck.generation._metrics import SCRAPE_HTTP, SentTally, scrape_all, window
from qualitycheck.shadow._recorder import PairRecord, Recorder
from qualitycheck.shadow._settings import ShadowSettings
from qualitycheck.shadow._tally import ShadowMetrics

__all__ = ["AS_REQUESTED", "MIRRORED", "BaselineAnswer", "MirrorSide", "fingerprint"]

AS_REQUESTED = "as requested"
"""A target's model when none is configured: each mirror names the model its caller asked for."""

MIRRORED = {"/v1/chat/completions": "chat", "/v1/completions": "completions"}
HANDOFF_S = 0.005
"""Finished pairs wait this long to go to the writer together: waking its thread per pair costs the event loop
more than the pair's commit. Pairs not yet handed over are in flight, as far as a `kill -9` is concerned."""


class BaselineAnswer:
    """The baseline's answer as the forwarding loop passed it on: status, framing, and every read with its arrival time."""

    __slots__ = ("ended", "headers", "reads", "started", "status", "t0")

    def __init__(self, status: int, headers: tuple[str, str, str | None], t0: float, started: float):
        self.status = status
        self.headers = headers
        """Content-Type, Content-Encoding, Retry-After: what the parse needs of the answer's headers."""
        self.t0 = t0
        """perf_counter when the request went upstream (CLOCK_MONOTONIC: the same clock in every process)."""
        self.started = started
        self.reads: list[tuple[bytes, float]] = []
        self.ended = t0

    def as_tuple(self) -> tuple[Any, ...]:
        return (self.status, self.headers, self.t0, self.started, self.reads, self.ended)

    @classmethod
    def from_tuple(cls, t: tuple[Any, ...]) -> BaselineAnswer:
        a = cls(t[0], t[1], t[2], t[3])
        a.reads, a.ended = t[4], t[5]
        return a


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
    """A mirrored request on its way: the baseline's side, the candidate's, maybe the baseline again."""

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


class MirrorSide:
    """The pairs of one shadow process: mirrors, answers parsed, noise floor, periods (windows, rotation), hand-off to the writer.

    `ask_baseline` is the sink's mode: nobody forwarded the request to the
    baseline, so this side asks it, at the same moment as the candidate.
    """

    def __init__(
        self,
        settings: ShadowSettings,
        recorder: Recorder,
        metrics: ShadowMetrics,
        *,
        log: Callable[[str], None],
        ask_baseline: bool = False,
    ):
        self.settings = settings
        self.recorder = recorder
        self.metrics = metrics
        self.noise_floor = settings.noise_floor
        self.log = log
        self.ask_baseline = ask_baseline
        s = settings.shadow
        self.slots = _Slots(s.max_inflight)
        self._rotate_pairs, self._rotate_s = s.rotation
        self.root = settings.baseline.server_url
        self._base_model = None if settings.baseline.model == AS_REQUESTED else settings.baseline.model
        self._candidate_model = None if settings.candidate.model == AS_REQUESTED else settings.candidate.model
        self._candidate_extra = dict(settings.candidate.extra_body)
        self._candidate_url = settings.candidate.base_url
        self._scrapes = HttpPolicy(timeout_s=min(SCRAPE_HTTP.timeout_s, settings.timeout_s), retries=1, backoff_s=0.2)
        """The targets' /metrics, scraped while callers are served: one retry, soon."""
        self._pairs: dict[str, _Pair] = {}
        self.draining = False
        self.period = recorder.new_period()
        self._handed = 0
        """Pairs handed to the writer in the open period (rotation by pairs counts these)."""
        self._tally = SentTally()
        self._to_store: list[PairRecord] = []
        self._rotate_now = asyncio.Event()
        self._first_spec: SpecCounters | None = None
        self._session: aiohttp.ClientSession | None = None
        self._candidate: Endpoint | None = None
        self._baseline: Endpoint | None = None
        self._again: Endpoint | None = None
        self._periods: asyncio.Task[None] | None = None
        self._before: dict[str, MetricsSnapshot] = {}
        self._drain_began: tuple[float, int] | None = None

    # ------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Sessions and endpoints, the first /metrics snapshot, and the task that closes windows and rotates folders."""
        settings = self.settings
        limit = self.slots.size * (2 if self.ask_baseline else 1)
        self._session = aiohttp.ClientSession(
            connector=pooled_connector(limit),
            # no idle timeout per read: each try is bounded as a whole by the same `timeout_s` (`HttpClient.retrying`),
            # which always runs out first, and re-arming a read timer on every arriving packet costs the loop
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=settings.timeout_s, sock_read=None),
            cookie_jar=aiohttp.DummyCookieJar(),
            trust_env=False,
        )
        opts = RunOptions(retries=0, timeout_s=settings.timeout_s, concurrency=self.slots.size, return_token_ids=False)
        # the answers are parsed once each has ended: a read costs the loop only an append
        self._candidate = Endpoint("candidate", settings.candidate, opts, self._session, parse_after=True)
        if self.ask_baseline:
            self._baseline = Endpoint("baseline", settings.baseline, opts, self._session, parse_after=True)
        if self.noise_floor:
            again = settings.baseline.model_copy(update={"label": "baseline again"})
            self._again = Endpoint("control", again, opts, self._session, parse_after=True)
        self._before = await self._scrape()
        self._note_acceptance(self._before)
        self._periods = asyncio.get_running_loop().create_task(self._run_periods())

    def begin_drain(self) -> None:
        """The stop began (the forwarding loop no longer accepts callers): the pairs in flight now are the drain's."""
        if self._drain_began is None:
            self._drain_began = (time.monotonic(), len(self._pairs))

    async def drain(self, timeout: float) -> ShadowDrain:
        """Let the pairs in flight finish within `timeout`, cancel the rest (counted `stopped`), close the last window."""
        self.begin_drain()
        assert self._drain_began is not None
        t0, in_flight = self._drain_began
        self.draining = True
        if self._periods is not None:
            self._periods.cancel()
            await asyncio.gather(self._periods, return_exceptions=True)
        pending = [p.task for p in self._pairs.values() if p.task is not None and not p.task.done()]
        if pending:
            await asyncio.wait(pending, timeout=timeout)
        cancelled = 0
        for p in list(self._pairs.values()):
            if p.task is not None and not p.task.done():
                p.task.cancel()
            if not p.recorded:
                self._drop(p, "stopped")
                cancelled += 1
        await asyncio.gather(*(t for t in pending if t is not None), return_exceptions=True)
        await self._close_window()
        if self._session is not None:
            await self._session.close()
        return ShadowDrain(
            timeout_s=timeout, in_flight=in_flight, finished=in_flight - cancelled, cancelled=cancelled, seconds=time.monotonic() - t0
        )

    def health(self) -> dict[str, Any]:
        return {
            "status": "draining" if self.draining else "ok",
            "folder": str(self.recorder.folder),
            "inflight": self.slots.used,
            "writer_backlog": self.recorder.backlog(),
        }

    # ------------------------------------------------------------ the hand-off: what the forwarding loop calls
    def count(self, requests: Mapping[str, int], dropped: Mapping[str, int]) -> None:
        """Requests the forwarding loop received, and sampled ones it could not hand over, since it last said."""
        for kind, n in requests.items():
            self.metrics.requests[kind].inc(n)
            self.period.requests += n
        for reason, n in dropped.items():
            self.count_drop(reason, n)

    def request(self, case_id: str, kind: str, raw: bytes, tags: dict[str, str]) -> None:
        """A sampled request: mirrored at once when a slot is free under `max_inflight`, else counted as dropped."""
        if self.draining:
            self.count_drop("stopped")
            return
        if not self.slots.take():
            self.count_drop("max_inflight")
            return
        self.metrics.inflight.set(self.slots.used)
        pair = _Pair(case_id, kind, raw, tags)
        self._pairs[case_id] = pair
        pair.task = asyncio.get_running_loop().create_task(self._mirror(pair))

    def baseline_answer(self, case_id: str, answer: BaselineAnswer) -> None:
        """The baseline's answer as forwarded to the caller, parsed by the client's own reader."""
        pair = self._pairs.get(case_id)
        if pair is None or pair.recorded:
            return
        ctype, encoding, retry_after = answer.headers
        reader = AnswerReader(
            pair.kind, sse=ctype.startswith("text/event-stream"), t0=answer.t0, status=answer.status, retry_after=retry_after
        )
        decoder = _decoder(encoding)
        for data, t in answer.reads:
            reader.feed(data if decoder is None else decoder.decompress(data), t)
        fp = fingerprint(self.root, pair.kind, pair.raw)
        pair.baseline = reader.response(case_id=case_id, target="baseline", fingerprint=fp, started_at=answer.started, now=answer.ended)
        self._maybe_complete(pair)

    def baseline_failed(self, case_id: str, info: ErrorInfo, started: float) -> None:
        """No answer, or one that broke off: the pair keeps the error, as a direct caller would have seen it."""
        pair = self._pairs.get(case_id)
        if pair is None or pair.recorded:
            return
        fp = fingerprint(self.root, pair.kind, pair.raw)
        pair.baseline = Response(case_id=case_id, target="baseline", fingerprint=fp, started_at=started, error=info)
        self._maybe_complete(pair)

    def caller_left(self, case_id: str, draining: bool) -> None:
        """The caller went away mid-answer: its pair has no complete baseline answer, so it is dropped (its mirror stopped)."""
        pair = self._pairs.get(case_id)
        if pair is not None and pair.dropped is None and not pair.recorded:
            pair.dropped = "stopped" if draining else "client_disconnected"
            if pair.task is not None and not pair.task.done():
                pair.task.cancel()
            self._maybe_complete(pair)

    # ------------------------------------------------------------ periods: /metrics windows and rotation
    async def _scrape(self) -> dict[str, MetricsSnapshot]:
        return await scrape_all({"baseline": self.settings.baseline, "candidate": self.settings.candidate}, http=self._scrapes)

    def _note_acceptance(self, snaps: dict[str, MetricsSnapshot]) -> None:
        """The live acceptance gauges: the candidate's spec-decode counters since the process started."""
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
        every = self.settings.shadow.scrape_every_s or None
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

    # ------------------------------------------------------------ the pair
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
            candidate = self._candidate.send_plan(pair.case_id, self._candidate_plan(pair, body))
            if self._baseline is None:
                pair.candidate = await candidate
            else:  # the sink: both targets at the same moment, each with its configured model in place of the caller's
                to_base = body if self._base_model is None or body.get("model") == self._base_model else {**body, "model": self._base_model}
                plan = RequestPlan(pair.kind, to_base, fingerprint(self.root, pair.kind, pair.raw))
                pair.baseline, pair.candidate = await asyncio.gather(self._baseline.send_plan(pair.case_id, plan), candidate)
        finally:
            if pair.candidate is None and pair.dropped is None:
                pair.dropped = "stopped"
            self._maybe_complete(pair)

    def _candidate_plan(self, pair: _Pair, body: dict[str, Any]) -> RequestPlan:
        """The caller's body for the candidate: its configured model in place of the caller's, its `extra_body` merged in."""
        sent = body
        if (self._candidate_model and body.get("model") != self._candidate_model) or self._candidate_extra:
            sent = {**body, **({"model": self._candidate_model} if self._candidate_model else {}), **self._candidate_extra}
        return RequestPlan(pair.kind, sent, fingerprint(self._candidate_url, pair.kind, pair.raw))

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
            plan = RequestPlan(pair.kind, pair.body, fingerprint(self.root, pair.kind, pair.raw))
            pair.control = await self._again.send_plan(pair.case_id, plan)
        finally:
            if pair.control is None:
                pair.dropped = pair.dropped or "stopped"
            self._maybe_complete(pair)

    def _record(self, pair: _Pair) -> None:
        b, c = pair.baseline, pair.candidate
        assert b is not None and c is not None and pair.body is not None
        pair.recorded = True
        self._pairs.pop(pair.case_id, None)
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
        self._pairs.pop(pair.case_id, None)
        self.count_drop(reason)
        self._release()

    def count_drop(self, reason: str, n: int = 1) -> None:
        self.metrics.dropped[reason].inc(n)
        self.period.dropped[reason] = self.period.dropped.get(reason, 0) + n

    def _release(self) -> None:
        """A pair's slot is free (stored or given up); called from the writer thread too."""
        self.slots.give()
        self.metrics.inflight.set(self.slots.used)


def fingerprint(url: str, kind: str, raw: bytes) -> str:
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
