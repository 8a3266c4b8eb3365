"""Answers no well-behaved server sends, but real ones do: each ends as a response or a stored error.

Huge answers (MBs, also in one SSE line), null content, empty choices,
invalid UTF-8, wrong JSON types, an HTML page instead of a stream. The
scripted server here writes raw bytes, which TestServer (a well-formed
server) never does.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
from aiohttp import web

from qualitycheck.core._cases import Case
from qualitycheck.core._config import RunOptions, Target
from qualitycheck.core._records import Response
from qualitycheck.generation._client import Endpoint
from qualitycheck.testserver import TestServer
from tests.helpers import raw_chat_server


def sse(*events: Any, done: bool = True) -> bytes:
    out = b"".join(b"data: " + (e if isinstance(e, bytes) else json.dumps(e).encode()) + b"\n\n" for e in events)
    return out + (b"data: [DONE]\n\n" if done else b"")


def chunk(content: Any, **choice: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": {"content": content}, **choice}]}


SCRIPTS: dict[str, tuple[str, bytes]] = {
    # name: (content type, raw body)
    "null-content": (
        "text/event-stream",
        sse(
            {"choices": [{"index": 0, "delta": {"role": "assistant", "content": None}}]},
            chunk("Hello"),
            chunk(None),
            chunk(" world", finish_reason="stop"),
        ),
    ),
    "empty-choices": ("text/event-stream", sse({"choices": []}, {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 0}})),
    "no-choices-key": ("text/event-stream", sse({"id": "x"}, chunk("ok", finish_reason="stop"))),
    "other-index": ("text/event-stream", sse({"choices": [{"index": 1, "delta": {"content": "ignored"}}]}, chunk("kept"))),
    "crlf-lines": ("text/event-stream", sse(chunk("a"), chunk("b")).replace(b"\n", b"\r\n")),
    "invalid-utf8": ("text/event-stream", sse(chunk("ok"), b'{"choices": [{"delta": {"content": "\xff\xfe"}}]}')),
    "choices-not-list": ("text/event-stream", sse({"choices": "abc"})),
    "content-not-string": ("text/event-stream", sse(chunk(["a", "b"]))),
    "usage-not-object": ("text/event-stream", sse(chunk("x"), {"choices": [], "usage": "many"})),
    "token-ids-not-ints": ("text/event-stream", sse(chunk("x", token_ids=["a"]))),
    "chunk-is-array": ("text/event-stream", sse([1, 2])),
    "html-page": ("text/html", b"<html><body>502 Bad Gateway</body></html>"),
    "error-event": ("text/event-stream", sse({"error": {"message": "engine died"}}, done=False)),
}

OK = {
    "null-content": "Hello world",
    "empty-choices": "",
    "no-choices-key": "ok",
    "other-index": "kept",
    "crlf-lines": "ab",
}
ERRORS = {
    "invalid-utf8": "malformed",
    "choices-not-list": "malformed",
    "content-not-string": "malformed",
    "usage-not-object": "malformed",
    "token-ids-not-ints": "bad_response",
    "chunk-is-array": "malformed",
    "html-page": "stream_cut",
    "error-event": "http_status",
}


@pytest.fixture(scope="module")
def raw_server() -> Iterator[str]:
    """A server answering each prompt with the raw bytes scripted for it."""

    async def handler(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        name = body["messages"][-1]["content"]
        ctype, raw = SCRIPTS[name]
        resp = web.StreamResponse(headers={"Content-Type": ctype})
        await resp.prepare(request)
        for i in range(0, len(raw), 7):  # dribble bytes: lines arrive split across reads
            await resp.write(raw[i : i + 7])
        await resp.write_eof()
        return resp

    with raw_chat_server(handler) as url:
        yield url


def send(url: str, text: str, **opts: Any) -> Response:
    ep = Endpoint("candidate", Target(url=url, model="m"), RunOptions(**{"retries": 1, "backoff_s": 0.0, **opts}))

    async def go() -> Response:
        try:
            return await ep.send(Case(id="c", category="x", messages=[{"role": "user", "content": text}]))
        finally:
            await ep.aclose()

    return asyncio.run(go())


@pytest.mark.parametrize("name", sorted(OK))
def test_odd_but_valid_streams_are_answers(raw_server: str, name: str) -> None:
    r = send(raw_server, name)
    assert r.ok, r.error
    assert r.text == OK[name]


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_broken_streams_are_stored_errors(raw_server: str, name: str) -> None:
    r = send(raw_server, name)
    assert not r.ok and r.error is not None
    assert r.error.kind == ERRORS[name], r.error
    assert r.attempts == 2  # retried once, then stored


@pytest.mark.parametrize("stream, per_chunk", [(True, 500), (True, 10**6), (False, 1)])
def test_multi_megabyte_answers_arrive_whole(stream: bool, per_chunk: int) -> None:
    words = [f" w{i}" for i in range(400_000)]  # ~3 MB of text
    text = "".join(words)
    with TestServer(default=text, tokens_per_chunk=per_chunk) as srv:
        r = send(srv.url, "long please", stream=stream, timeout_s=60)
    assert r.ok, r.error
    assert r.text == text and len(r.text) > 2_500_000
