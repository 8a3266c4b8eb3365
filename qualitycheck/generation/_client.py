"""One endpoint: send a case, stream the answer, time every chunk, retry faults.

Requests go out through a thin aiohttp session of our own, and the
server-sent events are parsed here. Measured on this machine
(docs/PERFORMANCE.md), `openai.AsyncOpenAI` spends several milliseconds of
client CPU per streamed request in its request transform, httpx models and
per-chunk objects; on a busy event loop that CPU delays the reads and
inflates the very TTFT/ITL we measure. The openai client is still used when
a caller injects an httpx-style `http_client` (custom transports, proxies,
mocks): that path keeps the SDK's behaviour and error types.

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

import aiohttp
from pydantic import ValidationError

from qualitycheck.core._cases import Case
from qualitycheck.core._config import RunOptions, Target
from qualitycheck.core._records import ErrorInfo, Response, Usage

__all__ = ["Endpoint", "RequestPlan", "build_request", "request_fingerprint"]

RETRYABLE_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}
_MAX_ERROR_BODY = 64 * 1024
_DRAIN_S = 0.25


class _Retryable(Exception):
    def __init__(self, info: ErrorInfo, retry_after: float | None = None):
        super().__init__(info.message)
        self.info = info
        self.retry_after = retry_after


class _Fatal(Exception):
    def __init__(self, info: ErrorInfo):
        super().__init__(info.message)
        self.info = info


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


def _malformed(message: str) -> _Retryable:
    return _Retryable(ErrorInfo(kind="malformed", message=message))


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

    def feed(self, data: dict[str, Any], now: float, chat: bool) -> None:
        if data.get("error"):
            err = data["error"]
            msg = err.get("message", str(err)) if isinstance(err, dict) else str(err)
            raise _Retryable(ErrorInfo(kind="http_status", message=f"error event in stream: {str(msg)[:300]}", status=500))
        usage = data.get("usage")
        if usage:
            if not isinstance(usage, dict):
                raise _malformed(f"usage is not an object: {str(usage)[:80]!r}")
            self.usage = usage
        choices = data.get("choices") or []
        if not isinstance(choices, list):
            raise _malformed(f"choices is not a list: {str(choices)[:80]!r}")
        for choice in choices:
            if not isinstance(choice, dict):
                raise _malformed(f"choice is not an object: {str(choice)[:80]!r}")
            if choice.get("index", 0) != 0:
                continue
            if chat:
                msg = choice.get("delta") or choice.get("message") or {}
                piece = msg.get("content") if isinstance(msg, dict) else None
            else:
                piece = choice.get("text")
            if piece is None:
                piece = ""
            elif not isinstance(piece, str):
                raise _malformed(f"content is not a string: {str(piece)[:80]!r}")
            ids = choice.get("token_ids")
            if ids:
                if not isinstance(ids, list):
                    raise _malformed(f"token_ids is not a list: {str(ids)[:80]!r}")
                self.has_token_ids = True
                self.token_ids.extend(ids)
            if piece or ids:
                self.text.append(piece)
                self.chunk_times.append(now - self.t0)
                self.chunk_tokens.append(len(ids) if ids else 0)
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]


class Endpoint:
    """A target with its client; `send` returns a Response whatever happens.

    `http_client` may be an `aiohttp.ClientSession` (used as is, not closed
    here) or an httpx-style client for `openai.AsyncOpenAI` (requests then
    go through the SDK). By default the endpoint opens its own aiohttp
    session on the first request.
    """

    def __init__(self, name: str, target: Target, opts: RunOptions, http_client: Any = None):
        self.name = name
        self.target = target
        self.opts = opts
        self._session: aiohttp.ClientSession | None = None
        self._owns_session = True
        self._sdk_http: Any = None
        if isinstance(http_client, aiohttp.ClientSession):
            self._session, self._owns_session = http_client, False
        elif http_client is not None:
            self._sdk_http = http_client
        self._sdk: Any = None
        self._headers: dict[str, str] | None = None
        self._proxy = _env_proxy(target.base_url)

    # ------------------------------------------------------------ clients
    @property
    def client(self) -> Any:
        """The `openai.AsyncOpenAI` client (built on first use: importing openai costs ~0.6 s)."""
        if self._sdk is None:
            import openai

            kwargs: dict[str, Any] = {}
            if self._sdk_http is not None:
                kwargs["http_client"] = self._sdk_http
            self._sdk = openai.AsyncOpenAI(
                base_url=self.target.base_url,
                api_key=self.target.api_key() or "EMPTY",
                default_headers=self.target.auth_headers(),
                max_retries=0,
                timeout=self.opts.timeout_s,
                **kwargs,
            )
        return self._sdk

    def _aio(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            limit = max(self.opts.concurrency, 16)
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=limit, limit_per_host=limit),
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=self.opts.timeout_s, sock_read=self.opts.timeout_s),
                auto_decompress=True,
                # trust_env would look up proxies and .netrc in a thread on every request (a third
                # of the client's CPU in profiles); the proxy is resolved once instead, in _proxy.
                trust_env=False,
            )
            self._owns_session = True
        return self._session

    def _request_headers(self) -> dict[str, str]:
        if self._headers is None:
            self._headers = {
                "Content-Type": "application/json",
                "Accept": "application/json, text/event-stream",
                **self.target.auth_headers(),
            }
        return self._headers

    async def aclose(self) -> None:
        if self._session is not None and self._owns_session and not self._session.closed:
            await self._session.close()
        if self._sdk is not None:
            await self._sdk.close()

    # ------------------------------------------------------------ sending
    async def send(self, case: Case, repeat: int = 0, plan: RequestPlan | None = None) -> Response:
        plan = plan or build_request(case, self.target, self.opts, repeat)
        started = time.time()
        last: ErrorInfo | None = None
        attempts = 0
        attempt_once = self._attempt_sdk if self._sdk_http is not None else self._attempt_http
        for attempt in range(self.opts.retries + 1):
            attempts = attempt + 1
            try:
                async with asyncio.timeout(self.opts.timeout_s):
                    acc, e2e = await attempt_once(plan)
                return self._from_acc(case, repeat, plan, acc, started, attempts, e2e)
            except _Retryable as exc:
                last = exc.info
                delay = exc.retry_after
            except TimeoutError:
                last = ErrorInfo(kind="timeout", message=f"no complete answer within {self.opts.timeout_s:g}s")
                delay = None
            except _Fatal as exc:
                last = exc.info
                break
            except (ValidationError, TypeError, ValueError) as exc:  # an answer our records cannot hold
                last = ErrorInfo(kind="bad_response", message=f"answer has invalid fields: {_first_line(exc)}")
                delay = None
            if attempt < self.opts.retries:
                if delay is None:
                    delay = random.uniform(0, self.opts.backoff_s * (2**attempt))
                await asyncio.sleep(min(delay, 60.0))
        assert last is not None
        return Response(
            case_id=case.id, target=self.name, repeat=repeat, fingerprint=plan.fingerprint,
            started_at=started, attempts=attempts, error=self._redacted(last),
        )

    def _redacted(self, info: ErrorInfo) -> ErrorInfo:
        """Servers and proxies echo keys back ("invalid key sk-..."); an error message must not carry them."""
        from urllib.parse import urlsplit

        password = urlsplit(self.target.url).password or ""
        secrets = [v for v in (self.target.api_key(), password, *self.target.headers.values()) if v and len(v) >= 4 and v != "EMPTY"]
        secrets += [v.split(" ", 1)[1] for v in secrets if " " in v and len(v.split(" ", 1)[1]) >= 4]  # "Bearer <token>"
        message = info.message
        for secret in sorted(secrets, key=len, reverse=True):
            message = message.replace(secret, "<redacted>")
        return info if message == info.message else info.model_copy(update={"message": message})

    async def _attempt_http(self, plan: RequestPlan) -> tuple[_Accumulator, float | None]:
        """One try over our aiohttp session; raises _Retryable/_Fatal on faults."""
        chat = plan.kind == "chat"
        url = self.target.base_url + ("/chat/completions" if chat else "/completions")
        data = json.dumps(plan.body).encode()
        session = self._aio()
        t0 = time.perf_counter()
        acc = _Accumulator(t0)
        got_headers = False
        try:
            async with session.post(url, data=data, headers=self._request_headers(), proxy=self._proxy) as resp:
                got_headers = True
                if resp.status != 200:
                    raise await _status_error(resp)
                if plan.body.get("stream"):
                    await _read_sse_stream(resp.content, acc, chat)
                    if not acc.done:
                        raise _Retryable(ErrorInfo(kind="stream_cut", message="stream ended before [DONE]"))
                    await _drain(resp.content)
                    return acc, None
                raw = await resp.read()
                t_end = time.perf_counter() - t0
        except (_Retryable, _Fatal):
            raise
        except aiohttp.ServerTimeoutError:
            raise _Retryable(ErrorInfo(kind="timeout", message=f"no data for {self.opts.timeout_s:g}s")) from None
        except (aiohttp.ClientConnectorError, aiohttp.InvalidURL) as exc:
            raise _Retryable(ErrorInfo(kind="connection", message=f"connection failed: {_describe(exc)}")) from None
        except (aiohttp.ClientError, ConnectionError, OSError) as exc:
            kind = "stream_cut" if got_headers else "connection"
            raise _Retryable(ErrorInfo(kind=kind, message=f"{'stream broken' if got_headers else 'connection failed'}: {_describe(exc)}")) from None
        try:
            body = json.loads(raw)
        except ValueError as exc:  # JSONDecodeError and invalid UTF-8
            raise _malformed(f"answer is not JSON: {_first_line(exc)}") from None
        if not isinstance(body, dict):
            raise _malformed(f"answer is not a JSON object: {raw[:80]!r}")
        acc.feed(body, t0 + t_end, chat)
        return acc, t_end

    async def _attempt_sdk(self, plan: RequestPlan) -> tuple[_Accumulator, float | None]:
        """One try through openai.AsyncOpenAI (injected httpx-style client)."""
        import openai

        chat = plan.kind == "chat"
        api = self.client.chat.completions if chat else self.client.completions
        t0 = time.perf_counter()
        acc = _Accumulator(t0)
        first = {"messages": plan.body["messages"]} if chat else {"prompt": plan.body["prompt"]}
        try:
            if plan.body.get("stream"):
                body = {k: v for k, v in plan.body.items() if k not in ("model", "messages", "prompt", "stream")}
                async with api.with_streaming_response.create(  # type: ignore[call-overload]
                    model=plan.body["model"], stream=True, extra_body=_extra(body), **first, **_known(body)
                ) as raw:
                    await _read_sse_lines(raw.iter_lines(), acc, chat)
                if not acc.done:
                    raise _Retryable(ErrorInfo(kind="stream_cut", message="stream ended before [DONE]"))
                return acc, None
            body = {k: v for k, v in plan.body.items() if k not in ("model", "messages", "prompt")}
            raw = await api.with_raw_response.create(model=plan.body["model"], extra_body=_extra(body), **first, **_known(body))  # type: ignore[call-overload]
            t_end = time.perf_counter() - t0
            data = json.loads(raw.http_response.content)
        except openai.APIStatusError as exc:
            info = ErrorInfo(kind="http_status", status=exc.status_code, message=_sdk_status_message(exc))
            if exc.status_code in RETRYABLE_STATUS:
                raise _Retryable(info, _parse_retry_after(exc.response.headers.get("retry-after") if exc.response is not None else None)) from None
            raise _Fatal(info) from None
        except openai.APITimeoutError:
            raise _Retryable(ErrorInfo(kind="timeout", message="request timed out")) from None
        except openai.APIConnectionError as exc:
            raise _Retryable(ErrorInfo(kind="connection", message=f"connection failed: {_root(exc)}")) from None
        except (_Retryable, _Fatal, TimeoutError, asyncio.CancelledError):
            raise
        except ValueError as exc:
            raise _malformed(f"answer is not JSON: {_first_line(exc)}") from None
        except Exception as exc:  # transport errors raised mid-stream (reset, protocol)
            raise _Retryable(ErrorInfo(kind="stream_cut", message=f"stream broken: {_describe(exc)}")) from None
        if not isinstance(data, dict):
            raise _malformed("answer is not a JSON object")
        acc.feed(data, t0 + t_end, chat)
        return acc, t_end

    def _from_acc(self, case: Case, repeat: int, plan: RequestPlan, acc: _Accumulator, started: float,
                  attempts: int, e2e: float | None = None) -> Response:
        end = e2e if e2e is not None else (acc.done_at or time.perf_counter()) - acc.t0
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


_KNOWN = {"max_tokens", "temperature", "top_p", "seed", "stop", "stream_options", "n", "presence_penalty",
          "frequency_penalty", "logit_bias", "response_format", "tools", "tool_choice", "user"}


def _known(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k in _KNOWN}


def _extra(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k not in _KNOWN}


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
    try:
        # decoding first skips json's encoding sniffing on bytes: a third of the parse time
        data = json.loads(payload.decode())
    except ValueError as exc:  # JSONDecodeError and invalid UTF-8
        raise _malformed(f"malformed stream chunk: {_first_line(exc)}: {payload[:80]!r}") from None
    if not isinstance(data, dict):
        raise _malformed(f"stream chunk is not an object: {payload[:80]!r}")
    acc.feed(data, now, chat)
    return False


async def _read_sse_stream(content: aiohttp.StreamReader, acc: _Accumulator, chat: bool) -> None:
    """Split the body into lines ourselves: no line-length limit (MB-sized chunks), one clock read per network read."""
    pending: list[bytes] = []
    async for data in content.iter_any():
        now = time.perf_counter()
        start = 0
        while True:
            nl = data.find(b"\n", start)
            if nl < 0:
                if start < len(data):
                    pending.append(data[start:])
                break
            line = data[start:nl]
            if pending:
                pending.append(line)
                line = b"".join(pending)
                pending = []
            start = nl + 1
            if line and _feed_line(line, now, acc, chat):
                return
    if pending:
        _feed_line(b"".join(pending), time.perf_counter(), acc, chat)


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


async def _read_sse_lines(lines: Any, acc: _Accumulator, chat: bool) -> None:
    async for line in lines:
        if line and _feed_line(line, time.perf_counter(), acc, chat):
            return


async def _status_error(resp: aiohttp.ClientResponse) -> Exception:
    try:
        raw = await resp.content.read(_MAX_ERROR_BODY)
    except (aiohttp.ClientError, OSError):
        raw = b""
    msg = f"HTTP {resp.status}"
    try:
        body = json.loads(raw) if raw else None
    except ValueError:
        body = None
    if isinstance(body, dict):
        err = body.get("error")
        detail = err.get("message") if isinstance(err, dict) else (err if isinstance(err, str) else body.get("message"))
        if detail:
            msg = f"HTTP {resp.status}: {str(detail)[:300]}"
    info = ErrorInfo(kind="http_status", status=resp.status, message=msg)
    if resp.status in RETRYABLE_STATUS:
        return _Retryable(info, _parse_retry_after(resp.headers.get("Retry-After")))
    return _Fatal(info)


def _env_proxy(url: str) -> str | None:
    """The HTTP(S)_PROXY that applies to `url` unless NO_PROXY exempts it, read once per endpoint."""
    from urllib.parse import urlsplit
    from urllib.request import getproxies, proxy_bypass

    parts = urlsplit(url)
    proxy = getproxies().get(parts.scheme)
    if not proxy or proxy_bypass(parts.hostname or ""):
        return None
    return proxy


def _parse_retry_after(value: str | None) -> float | None:
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


def _sdk_status_message(exc: Any) -> str:
    body = exc.body
    if isinstance(body, dict):
        err = body.get("error")
        msg = err.get("message") if isinstance(err, dict) else body.get("message")
        if msg:
            return f"HTTP {exc.status_code}: {str(msg)[:300]}"
    return f"HTTP {exc.status_code}"


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0][:300]


def _describe(exc: BaseException) -> str:
    text = str(exc) or repr(exc)
    return f"{type(exc).__name__}: {text}"[:300]


def _root(exc: BaseException) -> str:
    while exc.__cause__ is not None:
        exc = exc.__cause__
    return _describe(exc)
