"""The one HTTP layer: sessions, auth headers, redaction, retries and error mapping.

Every call qualitycheck makes to a server goes through here: generation
(whose streaming reader stays in `generation._client`, on a session, headers
and error mapping from this module), the preflight, the /metrics scrapes and
the judge. So a 404, a 503 with Retry-After, a key echoed back by a gateway or
a dropped connection reads the same whoever made the call, and is retried by
the same rules.

It is built on aiohttp, the generation fast path: the openai SDK and httpx
cost several times the client CPU per streamed request (docs/PERFORMANCE.md),
and that CPU inflates the TTFT/ITL being measured.

Failures travel as `HttpError` (an `ErrorInfo` plus whether trying again may
help) and end as an `Outcome` whose error has the target's secrets cut out.
This module is the only place an `ErrorInfo` is made. Its kinds:

- `http_status`: the server answered with a status other than 200 (its
  message, when the body carries one, follows the status), or sent an error
  event inside a stream;
- `timeout`: no complete answer in time, or no data for the read timeout;
- `connection`: the request never got an answer's headers;
- `stream_cut`: the answer broke off after its headers;
- `malformed`: the bytes are not the JSON or SSE they should be;
- `bad_response`: well-formed JSON whose fields the records cannot hold.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import aiohttp

from qualitycheck.core._config import HttpPolicy, Target
from qualitycheck.core._records import ErrorInfo

__all__ = [
    "RETRYABLE_STATUS",
    "TRANSPORT_ERRORS",
    "HttpClient",
    "HttpError",
    "Outcome",
    "bad_response",
    "env_proxy",
    "error_event",
    "first_line",
    "json_body",
    "malformed",
    "new_session",
    "parse_retry_after",
    "pooled_connector",
    "redact",
    "retry_delay",
    "shared_session",
    "status_error",
    "status_failure",
    "stream_cut",
    "transport_error",
]

RETRYABLE_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
"""Statuses worth asking again; every other one fails at once (400, 401, 404, ...)."""
MAX_DELAY_S = 60.0
"""The longest wait between two tries, whatever Retry-After asks."""
_MAX_ERROR_BODY = 64 * 1024
_MIN_SESSION_CONNECTIONS = 16
IDLE_REUSE_S = 4.0
"""How long an idle keep-alive connection may wait in the pool and still carry a request.

vLLM, SGLang (both through uvicorn) and llama-server close a connection
idle for 5 s. A client that reuses one as the server closes it writes its
request into a closing socket and gets a reset without an answer; for a
POST nothing may ask again (RFC 9112 §9.3.1), so a case would be lost and
a shadow proxy's caller answered 502. aiohttp keeps idle connections for
15 s; reusing them only below the servers' bound opens a new connection
instead.
"""

TRANSPORT_ERRORS = (aiohttp.ClientError, ConnectionError, OSError)
"""What a request can raise between sending and the last byte; `transport_error` maps them."""

T = TypeVar("T")


# ------------------------------------------------------------------ errors


class HttpError(Exception):
    """One failed try: what went wrong, and whether another try may help."""

    def __init__(self, info: ErrorInfo, retryable: bool, retry_after: float | None = None):
        super().__init__(info.message)
        self.info = info
        self.retryable = retryable
        self.retry_after = retry_after


def status_error(status: int, raw: bytes, retry_after: str | None = None) -> HttpError:
    """A non-200 answer: `HTTP <status>`, then the server's own message when its body carries one."""
    msg = f"HTTP {status}"
    try:
        body = json.loads(raw) if raw else None
    except ValueError:
        body = None
    if isinstance(body, dict):
        err = body.get("error")
        detail = err.get("message") if isinstance(err, dict) else (err if isinstance(err, str) else body.get("message"))
        if detail:
            msg = f"HTTP {status}: {str(detail)[:300]}"
    info = ErrorInfo(kind="http_status", status=status, message=msg)
    if status in RETRYABLE_STATUS:
        return HttpError(info, True, parse_retry_after(retry_after))
    return HttpError(info, False)


async def status_failure(resp: aiohttp.ClientResponse) -> HttpError:
    """`status_error` for a response whose body is still unread (at most 64 KB of it is read)."""
    try:
        raw = await resp.content.read(_MAX_ERROR_BODY)
    except (aiohttp.ClientError, OSError):
        raw = b""
    return status_error(resp.status, raw, resp.headers.get("Retry-After"))


def transport_error(exc: BaseException, *, got_headers: bool, timeout_s: float) -> HttpError:
    """An exception from `TRANSPORT_ERRORS`: timeout, connection (before headers) or stream_cut (after)."""
    if isinstance(exc, TimeoutError):  # aiohttp's ServerTimeoutError is one
        return HttpError(ErrorInfo(kind="timeout", message=f"no data for {timeout_s:g}s"), True)
    if isinstance(exc, (aiohttp.ClientConnectorError, aiohttp.InvalidURL)) or not got_headers:
        return HttpError(ErrorInfo(kind="connection", message=f"connection failed: {_describe(exc)}"), True)
    return HttpError(ErrorInfo(kind="stream_cut", message=f"stream broken: {_describe(exc)}"), True)


def malformed(message: str) -> HttpError:
    """Bytes that are not the JSON or SSE they should be (retried: proxies garble answers)."""
    return HttpError(ErrorInfo(kind="malformed", message=message), True)


def stream_cut(message: str = "stream ended before [DONE]") -> HttpError:
    return HttpError(ErrorInfo(kind="stream_cut", message=message), True)


def error_event(detail: Any) -> HttpError:
    """An error the server sent inside a 200 stream: a server failure, retried like a 500."""
    return HttpError(ErrorInfo(kind="http_status", message=f"error event in stream: {str(detail)[:300]}", status=500), True)


def bad_response(exc: BaseException) -> HttpError:
    """Well-formed JSON whose fields the records cannot hold (e.g. non-integer token ids)."""
    return HttpError(ErrorInfo(kind="bad_response", message=f"answer has invalid fields: {first_line(exc)}"), True)


def json_body(raw: bytes) -> Any:
    """A whole answer's JSON; anything else is `malformed`."""
    try:
        return json.loads(raw)
    except ValueError as exc:  # JSONDecodeError and invalid UTF-8
        raise malformed(f"answer is not JSON: {first_line(exc)}") from None


def _timed_out(timeout_s: float) -> ErrorInfo:
    return ErrorInfo(kind="timeout", message=f"no complete answer within {timeout_s:g}s")


def first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0][:300]


def _describe(exc: BaseException) -> str:
    text = str(exc) or repr(exc)
    return f"{type(exc).__name__}: {text}"[:300]


# ------------------------------------------------------------------ retry policy


def parse_retry_after(value: str | None) -> float | None:
    """Retry-After in seconds, from either of its forms (seconds or an HTTP date)."""
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


def retry_delay(attempt: int, backoff_s: float, retry_after: float | None) -> float:
    """What the server asked for, else full-jitter exponential backoff (`attempt` counts from 0)."""
    delay = random.uniform(0, backoff_s * (2**attempt)) if retry_after is None else retry_after
    return min(delay, MAX_DELAY_S)


# ------------------------------------------------------------------ redaction


def _secrets(target: Target) -> list[str]:
    from urllib.parse import urlsplit

    password = urlsplit(target.url).password or ""
    found = [v for v in (target.api_key(), password, *target.headers.values()) if v and len(v) >= 4 and v != "EMPTY"]
    found += [v.split(" ", 1)[1] for v in found if " " in v and len(v.split(" ", 1)[1]) >= 4]  # "Bearer <token>"
    return sorted(found, key=len, reverse=True)


def redact(info: ErrorInfo, target: Target) -> ErrorInfo:
    """Servers and proxies echo keys back ("invalid key sk-..."); an error message must not carry them."""
    message = info.message
    for secret in _secrets(target):
        message = message.replace(secret, "<redacted>")
    return info if message == info.message else info.model_copy(update={"message": message})


# ------------------------------------------------------------------ sessions


def env_proxy(url: str) -> str | None:
    """The HTTP(S)_PROXY that applies to `url` unless NO_PROXY exempts it (read once per client)."""
    from urllib.parse import urlsplit
    from urllib.request import getproxies, proxy_bypass

    parts = urlsplit(url)
    proxy = getproxies().get(parts.scheme)
    if not proxy or proxy_bypass(parts.hostname or ""):
        return None
    return proxy


def pooled_connector(limit: int) -> aiohttp.TCPConnector:
    """The connection pool of every session that talks to a target: `limit` connections (0: no limit), per host too.

    Idle connections are reused only within `IDLE_REUSE_S`, below the
    servers' own idle close, so no request is written into a connection
    the server is closing.
    """
    return aiohttp.TCPConnector(limit=limit, limit_per_host=limit, keepalive_timeout=IDLE_REUSE_S)


def new_session(limit: int, timeout_s: float) -> aiohttp.ClientSession:
    """A session with `limit` connections (per host too); call it inside the event loop that uses it."""
    return aiohttp.ClientSession(
        connector=pooled_connector(max(limit, _MIN_SESSION_CONNECTIONS)),
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=timeout_s, sock_read=timeout_s),
        auto_decompress=True,
        # trust_env would look up proxies and .netrc in a thread on every request (a third
        # of the client's CPU in profiles); callers pass the proxy `env_proxy` resolved once.
        trust_env=False,
    )


@asynccontextmanager
async def shared_session(given: aiohttp.ClientSession | None, limit: int, timeout_s: float) -> AsyncIterator[aiohttp.ClientSession]:
    """`given` as is, else a new session closed on exit: one pool for several `HttpClient`s."""
    if given is not None:
        yield given
        return
    async with new_session(limit, timeout_s) as own:
        yield own


@dataclass(frozen=True, slots=True)
class Outcome(Generic[T]):
    """What a call came to after its tries: a value, or an error with the secrets cut out."""

    value: T | None
    error: ErrorInfo | None
    attempts: int


class HttpClient:
    """One target's HTTP: its session, auth headers, proxy, retry budget and how its errors read.

    `policy` holds all of its settings (timeout, retries, backoff,
    concurrency). `session` may be an `aiohttp.ClientSession` shared with
    other clients (it is used as is and not closed here); by default the
    client opens its own on the first request and closes it in `aclose`.
    """

    def __init__(self, target: Target, policy: HttpPolicy, *, session: aiohttp.ClientSession | None = None):
        self.target = target
        self.policy = policy
        self._session = session
        self._owns_session = session is None
        self._headers: dict[str, str] | None = None
        self.proxy = env_proxy(target.base_url)

    @property
    def headers(self) -> dict[str, str]:
        """Every request's headers; the target decides what its auth is (read at the first request)."""
        if self._headers is None:
            self._headers = {
                "Content-Type": "application/json",
                "Accept": "application/json, text/event-stream",
                **self.target.auth_headers(),
            }
        return self._headers

    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = new_session(self.policy.concurrency, self.policy.timeout_s)
            self._owns_session = True
        return self._session

    async def aclose(self) -> None:
        if self._session is not None and self._owns_session and not self._session.closed:
            await self._session.close()

    async def retrying(self, once: Callable[[int], Awaitable[T]]) -> Outcome[T]:
        """Call `once(attempt)` (attempt counts from 1) until it returns or fails for good.

        Each try gets the policy's `timeout_s`; a retryable `HttpError` or a
        timeout is tried again after `retry_delay`, up to `retries` more
        times; any other `HttpError` ends the call at once.
        """
        policy = self.policy
        last: ErrorInfo | None = None
        attempts = 0
        for attempt in range(policy.retries + 1):
            attempts = attempt + 1
            try:
                async with asyncio.timeout(policy.timeout_s):
                    return Outcome(await once(attempts), None, attempts)
            except HttpError as exc:
                last = exc.info
                if not exc.retryable:
                    break
                wait = exc.retry_after
            except TimeoutError:
                last = _timed_out(policy.timeout_s)
                wait = None
            if attempt < policy.retries:
                await asyncio.sleep(retry_delay(attempt, policy.backoff_s, wait))
        assert last is not None
        return Outcome(None, redact(last, self.target), attempts)

    async def get_json(self, url: str) -> Outcome[Any]:
        return await self.retrying(lambda _: self._json("GET", url, None))

    async def post_json(self, url: str, body: Any) -> Outcome[Any]:
        data = json.dumps(body).encode()
        return await self.retrying(lambda _: self._json("POST", url, data))

    async def get_text(self, url: str) -> Outcome[str]:
        async def once(_: int) -> str:
            return (await self._read("GET", url, None, accept="text/plain")).decode("utf-8", "replace")

        return await self.retrying(once)

    async def _json(self, method: str, url: str, data: bytes | None) -> Any:
        return json_body(await self._read(method, url, data))

    async def _read(self, method: str, url: str, data: bytes | None, accept: str | None = None) -> bytes:
        async with self.request(method, url, data, accept=accept) as resp:
            return await resp.read()

    @asynccontextmanager
    async def request(
        self, method: str, url: str, data: bytes | None = None, *, accept: str | None = None
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """One try: a 200 answer to read inside the block, else an `HttpError`.

        Faults while the block reads the body are mapped too: a broken
        connection after the headers is `stream_cut`, before them `connection`.
        """
        headers = self.headers if accept is None else {**self.headers, "Accept": accept}
        got_headers = False
        try:
            async with self.session().request(method, url, data=data, headers=headers, proxy=self.proxy) as resp:
                got_headers = True
                if resp.status != 200:
                    raise await status_failure(resp)
                yield resp
        except HttpError:
            raise
        except TRANSPORT_ERRORS as exc:
            raise transport_error(exc, got_headers=got_headers, timeout_s=self.policy.timeout_s) from None
