"""One endpoint: send a case, stream the answer, time every chunk, retry faults.

The request goes through `openai.AsyncOpenAI` (auth, base URL, error types,
an injectable `http_client` for tests), but the server-sent events are read
from the raw response and parsed here: the SDK builds a pydantic object per
chunk, which costs milliseconds of client CPU per request and, on a busy
event loop, inflates the very TTFT/ITL we measure (docs/PERFORMANCE.md).

A request that still fails after its retries becomes a `Response` with an
`error`, never an exception: a failing endpoint must not lose a case.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import time
from dataclasses import dataclass, field
from typing import Any

import openai

from .cases import Case
from .config import RunOptions, Target
from .records import ErrorInfo, Response, Usage

__all__ = ["Endpoint", "RequestPlan", "build_request", "request_fingerprint"]

RETRYABLE_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}


class _Retryable(Exception):
    def __init__(self, info: ErrorInfo, retry_after: float | None = None):
        super().__init__(info.message)
        self.info = info
        self.retry_after = retry_after


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


def request_fingerprint(case: Case, target: Target, opts: RunOptions, repeat: int = 0) -> str:
    return build_request(case, target, opts, repeat).fingerprint


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

    def feed(self, data: dict[str, Any], now: float, chat: bool) -> None:
        if data.get("error"):
            err = data["error"]
            msg = err.get("message", str(err)) if isinstance(err, dict) else str(err)
            raise _Retryable(ErrorInfo(kind="http_status", message=f"error event in stream: {msg}", status=500))
        if data.get("usage"):
            self.usage = data["usage"]
        for choice in data.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue
            if chat:
                msg = choice.get("delta") or choice.get("message") or {}
                piece = msg.get("content") or ""
            else:
                piece = choice.get("text") or ""
            ids = choice.get("token_ids")
            if ids:
                self.has_token_ids = True
                self.token_ids.extend(ids)
            if piece or ids:
                self.text.append(piece)
                self.chunk_times.append(now - self.t0)
                self.chunk_tokens.append(len(ids) if ids else 0)
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]


class Endpoint:
    """A target with its client; `send` returns a Response whatever happens."""

    def __init__(self, name: str, target: Target, opts: RunOptions, http_client: Any = None):
        self.name = name
        self.target = target
        self.opts = opts
        kwargs: dict[str, Any] = {}
        if http_client is None:
            try:
                http_client = openai.DefaultAioHttpClient(timeout=opts.timeout_s)
            except RuntimeError:
                http_client = None
        if http_client is not None:
            kwargs["http_client"] = http_client
        self._owns_client = "http_client" in kwargs
        self.client = openai.AsyncOpenAI(
            base_url=target.base_url,
            api_key=target.api_key() or "EMPTY",
            default_headers=target.headers or None,
            max_retries=0,
            timeout=opts.timeout_s,
            **kwargs,
        )

    async def aclose(self) -> None:
        await self.client.close()

    async def send(self, case: Case, repeat: int = 0, plan: RequestPlan | None = None) -> Response:
        plan = plan or build_request(case, self.target, self.opts, repeat)
        started = time.time()
        last: ErrorInfo | None = None
        attempts = 0
        for attempt in range(self.opts.retries + 1):
            attempts = attempt + 1
            try:
                async with asyncio.timeout(self.opts.timeout_s):
                    return await self._attempt(case, repeat, plan, started, attempts)
            except _Retryable as exc:
                last = exc.info
                delay = exc.retry_after
            except TimeoutError:
                last = ErrorInfo(kind="timeout", message=f"no complete answer within {self.opts.timeout_s:g}s")
                delay = None
            except _Fatal as exc:
                last = exc.info
                break
            if attempt < self.opts.retries:
                if delay is None:
                    delay = random.uniform(0, self.opts.backoff_s * (2**attempt))
                await asyncio.sleep(min(delay, 60.0))
        assert last is not None
        return Response(
            case_id=case.id, target=self.name, repeat=repeat, fingerprint=plan.fingerprint,
            started_at=started, attempts=attempts, error=last,
        )

    async def _attempt(self, case: Case, repeat: int, plan: RequestPlan, started: float, attempts: int) -> Response:
        chat = plan.kind == "chat"
        api = self.client.chat.completions if chat else self.client.completions
        t0 = time.perf_counter()
        try:
            if plan.body.get("stream"):
                body = {k: v for k, v in plan.body.items() if k not in ("model", "messages", "prompt", "stream")}
                first = {"messages": plan.body["messages"]} if chat else {"prompt": plan.body["prompt"]}
                acc = _Accumulator(t0)
                async with api.with_streaming_response.create(  # type: ignore[call-overload]
                    model=plan.body["model"], stream=True, extra_body=_extra(body), **first, **_known(body)
                ) as raw:
                    await _read_sse(raw, acc, chat)
                if not acc.done:
                    raise _Retryable(ErrorInfo(kind="stream_cut", message="stream ended before [DONE]"))
                return self._from_acc(case, repeat, plan, acc, started, attempts)
            body = {k: v for k, v in plan.body.items() if k not in ("model", "messages", "prompt")}
            first = {"messages": plan.body["messages"]} if chat else {"prompt": plan.body["prompt"]}
            raw = await api.with_raw_response.create(model=plan.body["model"], extra_body=_extra(body), **first, **_known(body))  # type: ignore[call-overload]
            t_end = time.perf_counter() - t0
            data = json.loads(raw.http_response.content)
        except openai.APIStatusError as exc:
            info = ErrorInfo(kind="http_status", status=exc.status_code, message=_status_message(exc))
            if exc.status_code in RETRYABLE_STATUS:
                raise _Retryable(info, _retry_after(exc)) from None
            raise _Fatal(info) from None
        except openai.APITimeoutError:
            raise _Retryable(ErrorInfo(kind="timeout", message="request timed out")) from None
        except openai.APIConnectionError as exc:
            raise _Retryable(ErrorInfo(kind="connection", message=f"connection failed: {_root(exc)}")) from None
        except (_Retryable, _Fatal, TimeoutError, asyncio.CancelledError):
            raise
        except json.JSONDecodeError as exc:
            raise _Retryable(ErrorInfo(kind="malformed", message=f"answer is not JSON: {exc.msg}")) from None
        except Exception as exc:  # transport errors raised mid-stream (reset, protocol)
            raise _Retryable(ErrorInfo(kind="stream_cut", message=f"stream broken: {type(exc).__name__}: {exc}")) from None
        acc = _Accumulator(t0)
        try:
            acc.feed(data, t_end, chat)
        except _Retryable:
            raise
        return self._from_acc(case, repeat, plan, acc, started, attempts, e2e=t_end)

    def _from_acc(self, case: Case, repeat: int, plan: RequestPlan, acc: _Accumulator, started: float, attempts: int, e2e: float | None = None) -> Response:
        end = e2e if e2e is not None else time.perf_counter() - acc.t0
        u = acc.usage or {}
        return Response(
            case_id=case.id, target=self.name, repeat=repeat, fingerprint=plan.fingerprint,
            text="".join(acc.text),
            token_ids=acc.token_ids if acc.has_token_ids else None,
            finish_reason=acc.finish_reason,
            usage=Usage(prompt_tokens=u.get("prompt_tokens"), completion_tokens=u.get("completion_tokens")),
            ttft_s=acc.chunk_times[0] if acc.chunk_times else None,
            chunk_times=acc.chunk_times,
            chunk_tokens=acc.chunk_tokens if acc.has_token_ids else None,
            e2e_s=end, started_at=started, attempts=attempts,
        )


class _Fatal(Exception):
    def __init__(self, info: ErrorInfo):
        super().__init__(info.message)
        self.info = info


_KNOWN = {"max_tokens", "temperature", "top_p", "seed", "stop", "stream_options", "n", "presence_penalty",
          "frequency_penalty", "logit_bias", "response_format", "tools", "tool_choice", "user"}


def _known(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k in _KNOWN}


def _extra(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k not in _KNOWN}


async def _read_sse(raw: Any, acc: _Accumulator, chat: bool) -> None:
    """Parse `data:` lines; malformed JSON is a retryable fault, `[DONE]` ends it."""
    async for line in raw.iter_lines():
        if not line or not line.startswith("data:"):
            continue
        payload = line[5:].strip()
        if payload == "[DONE]":
            acc.done = True
            return
        now = time.perf_counter()
        try:
            data = json.loads(payload)
        except json.JSONDecodeError as exc:
            raise _Retryable(ErrorInfo(kind="malformed", message=f"malformed stream chunk: {exc.msg}: {payload[:80]!r}")) from None
        if not isinstance(data, dict):
            raise _Retryable(ErrorInfo(kind="malformed", message=f"stream chunk is not an object: {payload[:80]!r}"))
        acc.feed(data, now, chat)


def _retry_after(exc: openai.APIStatusError) -> float | None:
    value = exc.response.headers.get("retry-after") if exc.response is not None else None
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        from email.utils import parsedate_to_datetime

        try:
            return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
        except (TypeError, ValueError):
            return None


def _status_message(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        msg = body.get("message") or (body.get("error") or {}).get("message") if isinstance(body.get("error"), dict) else body.get("message")
        if msg:
            return f"HTTP {exc.status_code}: {str(msg)[:300]}"
    return f"HTTP {exc.status_code}"


def _root(exc: BaseException) -> str:
    while exc.__cause__ is not None:
        exc = exc.__cause__
    return f"{type(exc).__name__}: {exc}"[:300]
