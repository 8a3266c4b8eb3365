"""One endpoint: send a case, stream the answer, time every chunk, retry faults.

The request goes out on the aiohttp session of the one HTTP layer
(`core._http`: session, auth headers, redaction, retry decisions, status and
transport errors) and the server-sent events are parsed here, each decoded
by msgspec into the fields an answer is made of (`json.loads` for anything
else): a streaming reader of our own is the measured fast path
(docs/PERFORMANCE.md). Client CPU spent per chunk delays the reads on a
busy event loop and inflates the very TTFT/ITL being measured.

A request that still fails after its retries becomes a `Response` with an
`error`, never an exception: a failing endpoint must not lose a case.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import msgspec
from pydantic import ValidationError

from qualitycheck.core._cases import Case
from qualitycheck.core._config import RunOptions, Target
from qualitycheck.core._http import (
    HttpClient,
    HttpError,
    bad_response,
    error_event,
    first_line,
    json_body,
    malformed,
    status_error,
    stream_cut,
)
from qualitycheck.core._records import ErrorInfo, Response, ToolCall, Usage

__all__ = ["AnswerReader", "Endpoint", "RequestPlan", "build_request"]

_DRAIN_S = 0.25


@dataclass(frozen=True)
class RequestPlan:
    """The exact request for one case on one target (its fingerprint keys resume)."""

    kind: str  # "chat" | "completions"
    body: dict[str, Any]
    fingerprint: str


def build_request(case: Case, target: Target, opts: RunOptions, repeat: int = 0) -> RequestPlan:
    body: dict[str, Any] = {"model": target.model}
    if case.is_chat:
        body["messages"] = case.messages
    else:
        body["prompt"] = case.prompt
    params = dict(case.params)
    if opts.max_tokens is not None:
        params.setdefault("max_tokens", opts.max_tokens)
    params.setdefault("temperature", 0.0)
    if repeat and "seed" in params and params.get("temperature", 0) > 0:
        # a sampled case repeated with a fixed seed would repeat itself; vary it per repeat
        params["seed"] = int(params["seed"]) + repeat
    body.update(params)
    body.update(target.extra_body)
    if opts.return_token_ids:
        body.setdefault("return_token_ids", True)
    if opts.stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    kind = "chat" if case.is_chat else "completions"
    ident = json.dumps({"url": target.base_url, "kind": kind, "body": body, "repeat": repeat}, sort_keys=True)
    return RequestPlan(kind, body, hashlib.sha256(ident.encode()).hexdigest()[:20])


@dataclass
class _Accumulator:
    t0: float
    text: list[str] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    has_token_ids: bool = False
    chunk_times: list[float] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    done: bool = False
    done_at: float | None = None
    """perf_counter when [DONE] arrived: the end of the answer, whatever follows on the wire."""
    calls: dict[int, list[Any]] = field(default_factory=dict)
    """Tool calls by their `index`: [id, name, argument pieces], assembled as the deltas arrive."""

    def feed_calls(self, calls: Any) -> bool:
        """Add one message's or delta's `tool_calls`; True when it carried any piece of a call.

        In a stream the first delta of a call brings its `index`, `id` and
        name, and the following ones pieces of the argument text; a
        non-streamed message holds whole calls (their `index` defaults to
        the position). Pieces are joined as sent, never re-serialised.
        """
        if not isinstance(calls, list):
            raise malformed(f"tool_calls is not a list: {str(calls)[:80]!r}")
        carried = False
        for pos, item in enumerate(calls):
            if not isinstance(item, dict):
                raise malformed(f"a tool call is not an object: {str(item)[:80]!r}")
            fn = item.get("function") or {}
            idx = item.get("index", pos)
            if not isinstance(fn, dict) or not isinstance(idx, int):
                raise malformed(f"a tool call has no function object or integer index: {str(item)[:80]!r}")
            name, args, call_id = fn.get("name"), fn.get("arguments"), item.get("id")
            if not isinstance(name, (str, type(None))) or not isinstance(args, (str, type(None))):
                raise malformed(f"a tool call's name and arguments must be strings: {str(item)[:80]!r}")
            slot = self.calls.setdefault(idx, [None, "", []])
            if call_id and not slot[0]:
                slot[0] = str(call_id)
            if name and not slot[1]:
                slot[1] = name
            if args:
                slot[2].append(args)
            carried = carried or bool(name or args)
        return carried

    def tool_calls(self) -> list[ToolCall] | None:
        if not self.calls:
            return None
        return [ToolCall(id=c[0], name=c[1], arguments="".join(c[2])) for _, c in sorted(self.calls.items())]

    def feed(self, data: dict[str, Any], now: float, chat: bool) -> None:
        if data.get("error"):
            err = data["error"]
            raise error_event(err.get("message", str(err)) if isinstance(err, dict) else err)
        usage = data.get("usage")
        if usage:
            if not isinstance(usage, dict):
                raise malformed(f"usage is not an object: {str(usage)[:80]!r}")
            self.usage = usage
        choices = data.get("choices") or []
        if not isinstance(choices, list):
            raise malformed(f"choices is not a list: {str(choices)[:80]!r}")
        for choice in choices:
            if not isinstance(choice, dict):
                raise malformed(f"choice is not an object: {str(choice)[:80]!r}")
            if choice.get("index", 0) != 0:
                continue
            called = False
            if chat:
                msg = choice.get("delta") or choice.get("message") or {}
                piece = msg.get("content") if isinstance(msg, dict) else None
                if isinstance(msg, dict) and msg.get("tool_calls"):
                    called = self.feed_calls(msg["tool_calls"])
            else:
                piece = choice.get("text")
            if piece is None:
                piece = ""
            elif not isinstance(piece, str):
                raise malformed(f"content is not a string: {str(piece)[:80]!r}")
            ids = choice.get("token_ids")
            if ids:
                if not isinstance(ids, list):
                    raise malformed(f"token_ids is not a list: {str(ids)[:80]!r}")
                self.has_token_ids = True
                self.token_ids.extend(ids)
            if piece or ids or called:
                self.text.append(piece)
                self.chunk_times.append(now - self.t0)
                self.chunk_tokens.append(len(ids) if ids else 0)
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]


class Endpoint:
    """A target with its HTTP client; `send` returns a Response whatever happens.

    `session` may be an `aiohttp.ClientSession` (used as is, not closed
    here); by default the endpoint opens its own session on the first
    request. Sessions, headers, retries and error mapping come from
    `core._http`; the streaming reader is this module's own. `parse_after`
    keeps a stream's reads and parses them once it ended (`_SseEvents`):
    the same answer and timings for less CPU, for a caller whose event loop
    has other bytes to move (the shadow proxy); the runner parses as the
    chunks arrive.
    """

    def __init__(
        self, name: str, target: Target, opts: RunOptions, session: aiohttp.ClientSession | None = None, *, parse_after: bool = False
    ):
        if session is not None and not isinstance(session, aiohttp.ClientSession):
            raise TypeError(f"an endpoint sends through an aiohttp.ClientSession, not {type(session).__name__}")
        self.name = name
        self.target = target
        self.opts = opts
        self._http = HttpClient(target, opts.http, session=session)
        chat, completions = target.base_url + "/chat/completions", target.base_url + "/completions"
        self._urls = {"chat": chat, "completions": completions}
        self._read_sse = _read_sse_events if parse_after else _read_sse_stream

    async def aclose(self) -> None:
        await self._http.aclose()

    # ------------------------------------------------------------ sending
    async def send(self, case: Case, repeat: int = 0, plan: RequestPlan | None = None) -> Response:
        plan = plan or build_request(case, self.target, self.opts, repeat)
        return await self.send_plan(case.id, plan, repeat)

    async def send_plan(self, case_id: str, plan: RequestPlan, repeat: int = 0) -> Response:
        """Send an exact request body: the shadow proxy's mirrors are its callers' bodies, not built from a case."""
        started = time.time()

        async def once(attempt: int) -> Response:
            try:
                acc, e2e = await self._attempt(plan)
                return _response(acc, case_id, self.name, repeat, plan.fingerprint, started, attempt, e2e)
            except (ValidationError, TypeError, ValueError) as exc:  # an answer our records cannot hold
                raise bad_response(exc) from None

        out = await self._http.retrying(once)
        if out.value is not None:
            return out.value
        return Response(
            case_id=case_id,
            target=self.name,
            repeat=repeat,
            fingerprint=plan.fingerprint,
            started_at=started,
            attempts=out.attempts,
            error=out.error,
        )

    async def _attempt(self, plan: RequestPlan) -> tuple[_Accumulator, float | None]:
        """One try over the session, streamed when the plan asks; raises HttpError on faults."""
        chat = plan.kind == "chat"
        data = json.dumps(plan.body).encode()
        t0 = time.perf_counter()
        acc = _Accumulator(t0)
        async with self._http.request("POST", self._urls[plan.kind], data) as resp:
            if plan.body.get("stream"):
                await self._read_sse(resp.content, acc, chat)
                if not acc.done:
                    raise stream_cut()
                await _drain(resp.content)
                return acc, None
            raw = await resp.read()
            t_end = time.perf_counter() - t0
        body = json_body(raw)
        if not isinstance(body, dict):
            raise malformed(f"answer is not a JSON object: {raw[:80]!r}")
        acc.feed(body, t0 + t_end, chat)
        return acc, t_end


def _response(
    acc: _Accumulator, case_id: str, target: str, repeat: int, fingerprint: str, started: float, attempts: int, e2e: float | None = None
) -> Response:
    """The answer an accumulator assembled, as the record the store keeps."""
    end = e2e if e2e is not None else (acc.done_at or time.perf_counter()) - acc.t0
    u = acc.usage or {}
    return Response(
        case_id=case_id,
        target=target,
        repeat=repeat,
        fingerprint=fingerprint,
        text="".join(acc.text),
        tool_calls=acc.tool_calls(),
        token_ids=acc.token_ids if acc.has_token_ids else None,
        finish_reason=acc.finish_reason,
        usage=Usage(prompt_tokens=u.get("prompt_tokens"), completion_tokens=u.get("completion_tokens")),
        ttft_s=acc.chunk_times[0] if acc.chunk_times else None,
        chunk_times=acc.chunk_times,
        chunk_tokens=acc.chunk_tokens if acc.has_token_ids else None,
        e2e_s=end,
        started_at=started,
        attempts=attempts,
    )


def _feed_line(line: bytes | str, now: float, acc: _Accumulator, chat: bool) -> bool:
    """Handle one SSE line; True once `[DONE]` arrived. Malformed JSON is a retryable fault."""
    if isinstance(line, str):
        line = line.encode("utf-8", "surrogateescape")
    if not line.startswith(b"data:"):
        line = line.strip()
        if not line.startswith(b"data:"):
            return False
    payload = line[5:].strip()
    if payload == b"[DONE]":
        acc.done = True
        acc.done_at = now
        return True
    _feed_payload(payload, now, acc, chat)
    return False


def _feed_payload(payload: bytes, now: float, acc: _Accumulator, chat: bool) -> None:
    """One event's JSON, parsed and added to the answer. Malformed JSON is a retryable fault.

    A well-formed answer's event takes one msgspec decode of the few fields
    an answer is made of (`_parse_fast`), half the CPU of `json.loads` and a
    walk of the dict; anything that path does not take as is (tool calls,
    an error event, odd types, JSON msgspec refuses) is parsed here, so the
    answer and its errors are the same either way.
    """
    if _parse_fast(((payload, now),), acc, chat):
        return
    try:
        # decoding first skips json's encoding sniffing on bytes: a third of the parse time
        data = json.loads(payload.decode())
    except ValueError as exc:  # JSONDecodeError and invalid UTF-8
        raise malformed(f"malformed stream chunk: {first_line(exc)}: {payload[:80]!r}") from None
    if not isinstance(data, dict):
        raise malformed(f"stream chunk is not an object: {payload[:80]!r}")
    acc.feed(data, now, chat)


class _SseLines:
    """Splits an SSE body into lines as its bytes arrive and feeds each to the accumulator.

    Lines are split here rather than by aiohttp: no line-length limit
    (MB-sized chunks), one clock read per network read. The client's reader
    and `AnswerReader` (the bytes the shadow proxy forwards) share it.
    """

    __slots__ = ("_pending", "acc", "chat")

    def __init__(self, acc: _Accumulator, chat: bool):
        self.acc = acc
        self.chat = chat
        self._pending: list[bytes] = []

    def feed(self, data: bytes, now: float) -> bool:
        """One network read; True once `[DONE]` arrived (what follows it in `data` is not looked at)."""
        start = 0
        while True:
            nl = data.find(b"\n", start)
            if nl < 0:
                if start < len(data):
                    self._pending.append(data[start:])
                return False
            line = data[start:nl]
            if self._pending:
                self._pending.append(line)
                line = b"".join(self._pending)
                self._pending = []
            start = nl + 1
            if line and _feed_line(line, now, self.acc, self.chat):
                return True

    def end(self, now: float) -> None:
        """The body ended: a last line without its newline still counts."""
        if self._pending:
            line, self._pending = b"".join(self._pending), []
            _feed_line(line, now, self.acc, self.chat)


class _Choice(msgspec.Struct):
    """The fields of a choice an answer is made of (`_Accumulator.feed` reads the same ones)."""

    index: int = 0
    delta: dict[str, Any] | None = None
    message: dict[str, Any] | None = None
    text: Any = None
    token_ids: Any = None
    finish_reason: Any = None


class _Event(msgspec.Struct):
    choices: list[_Choice] | None = None
    usage: dict[str, Any] | None = None
    error: Any = None


_EVENT = msgspec.json.Decoder(_Event)


def _parse_fast(events: Sequence[tuple[bytes, float]], acc: _Accumulator, chat: bool) -> bool:
    """Add the events to `acc` as `_feed_payload` would, one msgspec decode each; False (`acc` untouched)
    for anything this path does not take as is: tool calls, an error event, a field of another type than
    a well-formed answer's, JSON that msgspec refuses (`json.loads` may still take it)."""
    t0 = acc.t0
    text: list[str] = []
    times: list[float] = []
    tokens: list[int] = []
    token_ids: list[Any] = []
    has_ids = False
    finish, usage = acc.finish_reason, acc.usage
    decode = _EVENT.decode
    try:
        for payload, now in events:
            ev = decode(payload)
            if ev.error:
                return False
            if ev.usage:
                usage = ev.usage
            for choice in ev.choices or ():
                if choice.index != 0:
                    continue
                if chat:
                    msg = choice.delta or choice.message or {}
                    if msg.get("tool_calls"):
                        return False
                    piece = msg.get("content")
                else:
                    piece = choice.text
                if piece is None:
                    piece = ""
                elif not isinstance(piece, str):
                    return False
                ids = choice.token_ids
                if ids:
                    if not isinstance(ids, list):
                        return False
                    has_ids = True
                    token_ids.extend(ids)
                if piece or ids:
                    text.append(piece)
                    times.append(now - t0)
                    tokens.append(len(ids) if ids else 0)
                if choice.finish_reason:
                    finish = choice.finish_reason
    except msgspec.DecodeError:  # and its ValidationError
        return False
    acc.text.extend(text)
    acc.chunk_times.extend(times)
    acc.chunk_tokens.extend(tokens)
    acc.token_ids.extend(token_ids)
    acc.has_token_ids = acc.has_token_ids or has_ids
    acc.finish_reason, acc.usage = finish, usage
    return True


_KEEP_BYTES = 1 << 16
"""Bytes of a stream kept unparsed at most: a longer answer is parsed in parts of about this size, so
what a pair in flight holds stays bounded (`max_inflight` of them) whatever the answer's length."""


class _SseEvents:
    """An SSE body kept as it arrives and parsed after it ended (`AnswerReader`, `Endpoint(parse_after=True)`).

    A read costs an append and a look for `[DONE]`, so the reader still
    knows when to stop; the bytes are split into events only when `[DONE]`
    may have arrived, at the end, or once `_KEEP_BYTES` are kept, and the
    events' JSON is decoded by msgspec into the few fields an answer is
    made of. Whatever that path does not take as is goes through
    `_feed_payload`, the parser `_SseLines` uses, event by event, so the
    answer and its errors are the ones reading it chunk by chunk gives,
    chunk times included: each event is timed by the read that completed
    its line. A bad event raises its `HttpError` when its part is parsed.
    """

    __slots__ = ("_acc", "_chat", "_kept", "_pending", "_reads", "_tail", "done_at", "events")

    def __init__(self, acc: _Accumulator, chat: bool) -> None:
        self._acc = acc
        self._chat = chat
        self._reads: list[tuple[bytes, float]] = []
        self._kept = 0
        self._pending: list[bytes] = []
        self._tail = b""
        """The last bytes read, for a `[DONE]` split across reads."""
        self.events: list[tuple[bytes, float]] = []
        """(JSON payload, perf_counter of the read that ended its line), in order, not parsed yet."""
        self.done_at: float | None = None

    @property
    def done(self) -> bool:
        return self.done_at is not None

    def feed(self, data: bytes, now: float) -> bool:
        """One network read; True once `[DONE]` arrived (what follows it is not kept)."""
        if self.done_at is not None:
            return True
        self._reads.append((data, now))
        self._kept += len(data)
        tail = self._tail
        self._tail = data[-5:] if len(data) >= 5 else (tail + data)[-5:]
        if b"[DONE]" in data or (tail and b"[DONE]" in tail + data[:5]):
            return self._split()
        if self._kept >= _KEEP_BYTES:
            self._split()
            self._parse()
        return False

    def _split(self) -> bool:
        """Split the reads kept into lines (as `_SseLines.feed` does); True at `[DONE]`."""
        reads, pending = self._reads, self._pending
        self._reads, self._kept = [], 0
        for data, now in reads:
            if b"\n" not in data:  # the middle of a long line: joined once, when its newline comes
                pending.append(data)
                continue
            lines = data.split(b"\n")
            if pending:
                pending.append(lines[0])
                lines[0] = b"".join(pending)
                pending.clear()
            rest = lines.pop()
            for line in lines:
                if line:
                    self._line(line, now)
                    if self.done_at is not None:
                        return True
            if rest:
                pending.append(rest)
        return False

    def _line(self, line: bytes, now: float) -> None:
        """One line, as `_feed_line` takes it: an event kept for the parse, or `[DONE]`."""
        if not line.startswith(b"data:"):
            line = line.strip()
            if not line.startswith(b"data:"):
                return
        payload = line[5:].strip()
        if payload == b"[DONE]":
            self.done_at = now
        else:
            self.events.append((payload, now))

    def _parse(self) -> None:
        events, self.events = self.events, []
        if not _parse_fast(events, self._acc, self._chat):
            for payload, now in events:
                _feed_payload(payload, now, self._acc, self._chat)

    def end(self, now: float) -> None:
        """The body ended: split what is left; a last line without its newline still counts."""
        if self.done_at is None and not self._split() and self._pending:
            line = b"".join(self._pending)
            self._pending = []
            self._line(line, now)

    def parse(self) -> None:
        """Parse what is left into the accumulator, and `[DONE]` if it came; raises the `HttpError` of a bad event."""
        self._parse()
        if self.done_at is not None:
            self._acc.done = True
            self._acc.done_at = self.done_at


async def _read_sse_stream(content: aiohttp.StreamReader, acc: _Accumulator, chat: bool) -> None:
    lines = _SseLines(acc, chat)
    async for data in content.iter_any():
        if lines.feed(data, time.perf_counter()):
            return
    lines.end(time.perf_counter())


async def _read_sse_events(content: aiohttp.StreamReader, acc: _Accumulator, chat: bool) -> None:
    """`_read_sse_stream` with the parse after the last read (`_SseEvents`): the same answer, less work per read."""
    events = _SseEvents(acc, chat)
    async for data in content.iter_any():
        if events.feed(data, time.perf_counter()):
            break
    else:
        events.end(time.perf_counter())
    events.parse()


async def _drain(content: aiohttp.StreamReader) -> None:
    """Read the end of the body after [DONE] (briefly), so the connection goes back to the pool.

    Servers send [DONE] and the body's end in separate writes (vLLM does); leaving
    before the end closes the connection, and the next request then pays a new
    TCP (and TLS) handshake inside its measured TTFT.
    """
    if content.at_eof():
        return
    try:
        async with asyncio.timeout(_DRAIN_S):
            while await content.readany():
                pass
    except (TimeoutError, aiohttp.ClientError, OSError):
        pass  # the connection is closed instead of reused; the answer is complete


_MAX_ERROR_BODY = 64 * 1024


class AnswerReader:
    """An answer's bytes, read by someone else, turned into a `Response` by this module's parser.

    The shadow proxy forwards a baseline's bytes to its caller unchanged and
    hands each read here after passing it on, so the recorded answer is parsed
    and timed exactly as the client parses and times its own requests: chunk
    times from `t0`, the moment the request went out. A read is only kept
    (`_SseEvents`); the parse happens once, in `response`, off the path of
    the bytes being forwarded. `sse` says how the body
    is framed (the answer's Content-Type, not what the request asked for). A
    fault in the bytes (a status other than 200, malformed JSON, an error
    event, a stream that ends before [DONE]) becomes the Response's `error`,
    as it does for the client, and the rest of the body is ignored.
    """

    __slots__ = ("_acc", "_body", "_error", "_lines", "_retry_after", "_status", "chat", "sse")

    def __init__(self, kind: str, *, sse: bool, t0: float, status: int = 200, retry_after: str | None = None):
        self.chat = kind == "chat"
        self.sse = sse and status == 200
        self._acc = _Accumulator(t0)
        self._lines = _SseEvents(self._acc, self.chat) if self.sse else None
        self._body: list[bytes] = []
        self._status = status
        self._retry_after = retry_after
        self._error: ErrorInfo | None = None

    @property
    def done(self) -> bool:
        """The stream's `[DONE]` arrived (or it failed): what follows is not the answer."""
        return self._error is not None or self._acc.done or (self._lines is not None and self._lines.done)

    def feed(self, data: bytes, now: float) -> None:
        """One read as it was forwarded: kept, with its time, for `response` to parse (a long answer in parts)."""
        if self._error is not None:
            return
        if self._lines is None:
            if self._status == 200 or sum(map(len, self._body)) < _MAX_ERROR_BODY:
                self._body.append(data)
            return
        try:
            self._lines.feed(data, now)
        except HttpError as exc:
            self._error = exc.info

    def response(self, *, case_id: str, target: str, fingerprint: str, started_at: float, now: float) -> Response:
        """The answer once its body ended at `now` (perf_counter); an incomplete one is a `stream_cut`."""
        acc = self._acc
        try:
            if self._error is None:
                if self._status != 200:
                    raise status_error(self._status, b"".join(self._body)[:_MAX_ERROR_BODY], self._retry_after)
                if self._lines is not None:
                    if not self._lines.done:
                        self._lines.end(now)
                    self._lines.parse()
                    if not acc.done:
                        raise stream_cut()
                    return _response(acc, case_id, target, 0, fingerprint, started_at, 1)
                raw = b"".join(self._body)
                body = json_body(raw)
                if not isinstance(body, dict):
                    raise malformed(f"answer is not a JSON object: {raw[:80]!r}")
                acc.feed(body, now, self.chat)
                return _response(acc, case_id, target, 0, fingerprint, started_at, 1, now - acc.t0)
        except HttpError as exc:
            self._error = exc.info
        except (ValidationError, TypeError, ValueError) as exc:  # an answer our records cannot hold
            self._error = bad_response(exc).info
        return Response(case_id=case_id, target=target, fingerprint=fingerprint, started_at=started_at, error=self._error)
