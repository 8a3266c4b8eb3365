"""The client against injected faults: every request ends as an answer or a stored error."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from qualitycheck.core._cases import Case
from qualitycheck.core._config import RunOptions, Target
from qualitycheck.core._records import Response
from qualitycheck.generation._client import Endpoint
from qualitycheck.testserver import Fault, TestServer


def case(text: str = "hello there", **kw: Any) -> Case:
    return Case(id="c1", category="qa", messages=[{"role": "user", "content": text}], **kw)


def send(srv: TestServer, c: Case, **opts: Any) -> Response:
    options = RunOptions(**{"backoff_s": 0.01, **opts})
    ep = Endpoint("candidate", Target(url=srv.url, model="m"), options)

    async def go() -> Response:
        try:
            return await ep.send(c)
        finally:
            await ep.aclose()

    return asyncio.run(go())


def test_streamed_answer_with_usage_token_ids_and_chunk_timing() -> None:
    with TestServer(default="one two three four five", tokens_per_chunk=2, itl_s=0.01) as srv:
        r = send(srv, case())
    assert r.ok and r.text == "one two three four five" and r.finish_reason == "stop"
    assert r.usage.completion_tokens == 5 and r.usage.prompt_tokens == 2
    assert r.chunk_tokens == [2, 2, 1] and len(r.token_ids or []) == 5
    assert len(r.chunk_times) == 3 and r.ttft_s == r.chunk_times[0]
    assert r.chunk_times == sorted(r.chunk_times) and r.e2e_s >= r.chunk_times[-1]
    body = srv.requests("/chat/completions")[0]["body"]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["return_token_ids"] is True and body["temperature"] == 0.0


def test_completions_and_non_streaming() -> None:
    with TestServer(default="plain text answer") as srv:
        r1 = send(srv, Case(id="p", category="qa", prompt="complete me"))
        r2 = send(srv, case(), stream=False)
    assert r1.text == r2.text == "plain text answer"
    assert srv.requests("/v1/completions")[0]["body"]["prompt"] == "complete me"
    assert r2.ttft_s is not None and r2.usage.completion_tokens == 3


def test_max_tokens_truncation_is_reported() -> None:
    with TestServer(default="a b c d e f") as srv:
        r = send(srv, case(params={"max_tokens": 3}))
    assert r.text == "a b c" and r.finish_reason == "length"


@pytest.mark.parametrize(
    "fault, kind",
    [
        (Fault("status", status=503, times=2), None),
        (Fault("status", status=502, times=1), None),
        (Fault("reset", after_chunks=1, times=1), None),
        (Fault("malformed", after_chunks=1, times=1), None),
        (Fault("no_done", after_chunks=1, times=2), None),
    ],
)
def test_transient_faults_are_retried_until_success(fault: Fault, kind: str | None) -> None:
    with TestServer(default="alpha beta gamma delta", faults=[fault]) as srv:
        r = send(srv, case())
    assert r.ok, r.error
    assert r.text == "alpha beta gamma delta"
    assert r.attempts == (fault.times or 0) + 1 == len(srv.requests("/chat/completions"))


@pytest.mark.parametrize(
    "fault, kind, status, attempts",
    [
        (Fault("status", status=500, times=None), "http_status", 500, 4),
        (Fault("status", status=400, times=None), "http_status", 400, 1),
        (Fault("reset", after_chunks=1, times=None), "stream_cut", None, 4),
        (Fault("malformed", after_chunks=1, times=None), "malformed", None, 4),
        (Fault("no_done", after_chunks=1, times=None), "stream_cut", None, 4),
    ],
)
def test_persistent_faults_become_stored_errors(fault: Fault, kind: str, status: int | None, attempts: int) -> None:
    with TestServer(default="alpha beta gamma delta", faults=[fault]) as srv:
        r = send(srv, case())
    assert not r.ok and r.error is not None
    assert (r.error.kind, r.error.status, r.attempts) == (kind, status, attempts)
    assert len(srv.requests("/chat/completions")) == attempts


def test_timeout_is_an_error_not_a_hang() -> None:
    with TestServer(faults=[Fault("hang", times=None)]) as srv:
        r = send(srv, case(), timeout_s=0.3, retries=1)
    assert r.error is not None and r.error.kind == "timeout" and r.attempts == 2


def test_retry_after_is_honoured() -> None:
    with TestServer(default="fine", faults=[Fault("status", status=429, times=1, retry_after="1")]) as srv:
        r = send(srv, case(), backoff_s=0.0)
    assert r.ok
    first, second = (e["t"] for e in srv.requests("/chat/completions"))
    assert second - first >= 0.9  # waited what the server asked, not the (zero) backoff


def test_api_key_comes_from_the_named_env_var(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QC_TEST_KEY", "sk-from-env")
    with TestServer() as srv:
        ep = Endpoint("baseline", Target(url=srv.url, model="m", api_key_env="QC_TEST_KEY"), RunOptions())

        async def go() -> Response:
            try:
                return await ep.send(case())
            finally:
                await ep.aclose()

        asyncio.run(go())
    assert srv.requests("/chat/completions")[0]["auth"] == "Bearer sk-from-env"


@pytest.mark.parametrize(
    "event",
    [
        b'{"choices":[{"index":0,"delta":{"content":" word"},"finish_reason":null,"token_ids":[5]}]}',
        b'{"choices":[{"index":0,"delta":{"role":"assistant"}}],"usage":null}',
        b'{"choices":[{"index":1,"delta":{"content":"other choice"}}]}',
        b'{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":7}}',
        b'{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c","function":{"name":"f","arguments":"{}"}}]}}]}',
        b'{"choices":[{"index":"0","delta":{"content":"a string index"}}]}',
        b'{"choices":[{"index":0,"delta":{"content":7}}]}',
        b'{"choices":{"index":0}}',
        b'{"error":{"message":"overloaded"}}',
        b'{"choices":[],"usage":"many"}',
        b"[1, 2]",
        b'{"choices":[{"index":0,"delta":{"content":"x"}}]',
        b'{"choices":[{"index":0,"delta":{"content":"a\xff"}}]}',
        b'{"choices":[{"index":0,"delta":{"content":"\\ud800"}}]}',
        b'\xef\xbb\xbf{"choices":[]}',
    ],
)
def test_an_event_adds_to_the_answer_as_json_loads_reads_it_whichever_parser_takes_it(event: bytes) -> None:
    """The msgspec path takes a well-formed answer's events; the rest fall through to `json.loads`: same answer, same error."""
    import json

    from qualitycheck.core._http import HttpError, malformed
    from qualitycheck.generation._client import _Accumulator, _feed_payload

    def outcome(feed: Any) -> tuple[Any, ...]:
        acc = _Accumulator(1.0)
        try:
            feed(acc)
        except HttpError as exc:
            return ("error", exc.info.kind, exc.info.message)
        return (acc.text, acc.chunk_times, acc.token_ids, acc.has_token_ids, acc.finish_reason, acc.usage, acc.tool_calls())

    def by_json(acc: _Accumulator) -> None:
        try:
            data = json.loads(event.decode())
        except ValueError:
            raise malformed("json.loads refused it") from None
        if not isinstance(data, dict):
            raise malformed("not an object")
        acc.feed(data, 2.0, True)

    got, want = outcome(lambda acc: _feed_payload(event, 2.0, acc, True)), outcome(by_json)
    if want[0] == "error" and want[1] == "malformed":  # the message names what json.loads said; the kind must match
        assert got[:2] == want[:2], got
    else:
        assert got == want
