"""The proxy's answers are parsed once, after they ended, and come out as reading them chunk by chunk gives.

`AnswerReader` (the baseline's forwarded bytes) and `Endpoint(parse_after=True)`
(the candidate's answer) keep each read with its time and parse the events
at the end, by msgspec where it can and by the client's own per-event parser
where it cannot. The oracle here is the runner's reader (`_SseLines`), fed
the same reads at the same times: text, tool calls, token ids, usage,
finish reason, chunk times and errors must all be the same, for well-formed
answers and for the odd ones real servers send, however the bytes are cut
into reads.
"""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

import pytest

from qualitycheck.core._config import RunOptions, Target
from qualitycheck.core._http import HttpError, bad_response, stream_cut
from qualitycheck.core._records import ErrorInfo, Response
from qualitycheck.generation import _client
from qualitycheck.generation._client import AnswerReader, Endpoint, RequestPlan, _Accumulator, _response, _SseLines
from qualitycheck.testserver import TestServer, ToolReply


def sse(*events: Any, done: bool = True, end: bytes = b"\n\n") -> bytes:
    out = b"".join(b"data: " + (e if isinstance(e, bytes) else json.dumps(e).encode()) + end for e in events)
    return out + (b"data: [DONE]" + end if done else b"")


def delta(content: Any, **choice: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": {"content": content}, **choice}]}


def text(t: Any, **choice: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "text": t, **choice}]}


def call_delta(index: int, name: str | None, args: str, call_id: str | None = None) -> dict[str, Any]:
    fn: dict[str, Any] = {"arguments": args}
    if name:
        fn["name"] = name
    item: dict[str, Any] = {"index": index, "function": fn}
    if call_id:
        item["id"] = call_id
    return {"choices": [{"index": 0, "delta": {"tool_calls": [item]}}]}


USAGE = {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 3}}

STREAMS: dict[str, tuple[str, bytes]] = {
    "plain": ("chat", sse(delta("Hello"), delta(" world"), delta("!", finish_reason="stop"), USAGE)),
    "completions": ("completions", sse(text("Once"), text(" upon"), text(" a time", finish_reason="length"), USAGE)),
    "token-ids": (
        "chat",
        sse(delta("ab", token_ids=[1, 2]), delta("", token_ids=[3]), delta("c", token_ids=[4, 5, 6], finish_reason="stop")),
    ),
    "role-first": ("chat", sse({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}, delta("x"), delta(None))),
    "message-not-delta": ("chat", sse({"choices": [{"index": 0, "message": {"content": "whole"}, "finish_reason": "stop"}]})),
    "empty-delta-then-message": ("chat", sse({"choices": [{"index": 0, "delta": {}, "message": {"content": "m"}}]})),
    "other-index": ("chat", sse({"choices": [{"index": 1, "delta": {"content": "no"}}]}, delta("yes"))),
    "float-index": ("chat", sse({"choices": [{"index": 0.0, "delta": {"content": "zero"}}]})),
    "bool-index": ("chat", sse({"choices": [{"index": True, "delta": {"content": "one"}}]}, delta("kept"))),
    "empty-finish": ("chat", sse(delta("a", finish_reason=""), delta("b", finish_reason="stop"), delta("c", finish_reason=None))),
    "duplicate-keys": ("chat", sse(b'{"choices":[{"index":0,"delta":{"content":"first","content":"last"}}]}')),
    "nan-usage": ("chat", sse(delta("n"), b'{"choices":[],"usage":{"prompt_tokens":NaN}}')),
    "escapes": (
        "chat",
        sse(delta('quote " slash \\ tab \t é \U0001f600 \u2028'), b'{"choices":[{"index":0,"delta":{"content":"\\u00e9\\ud83d\\ude00"}}]}'),
    ),
    "lone-surrogate": ("chat", sse(b'{"choices":[{"index":0,"delta":{"content":"\\ud800"}}]}')),
    "done-in-content": ("chat", sse(delta("data: [DONE]"), delta("[DONE]"), delta("after"))),
    "crlf": ("chat", sse(delta("a"), delta("b"), end=b"\r\n\r\n")),
    "comments-and-fields": ("chat", b": keep-alive\n\nevent: message\nid: 3\n" + sse(delta("x")) + b"retry: 10\n"),
    "no-space": ("chat", b'data:{"choices":[{"index":0,"delta":{"content":"tight"}}]}\n\ndata:[DONE]\n\n'),
    "padded": ("chat", b'  data:   {"choices":[{"index":0,"delta":{"content":"pad"}}]}   \n\ndata: [DONE]   \n\n'),
    "last-line-without-newline": ("chat", sse(delta("end")).rstrip(b"\n")),
    "no-done": ("chat", sse(delta("cut"), done=False)),
    "no-done-partial-line": ("chat", sse(delta("cut"), done=False) + b'data: {"choices":[{"index":0,"delta":{"content":"half'),
    "after-done": ("chat", sse(delta("kept")) + sse(delta("ignored"))),
    "tool-calls": (
        "chat",
        sse(
            call_delta(0, "get_weather", "", "call_1"),
            call_delta(0, None, '{"city": '),
            call_delta(0, None, '"Paris"}'),
            call_delta(1, "get_time", "{}", "call_2"),
            {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
        ),
    ),
    "text-then-tool-call": ("chat", sse(delta("Let me check."), call_delta(0, "lookup", '{"q": 1}', "c1"))),
    "error-event": ("chat", sse(delta("partial"), {"error": {"message": "engine died"}}, done=False)),
    "error-string": ("chat", sse({"error": "overloaded"})),
    "falsy-error": ("chat", sse({"error": None, **delta("fine")}, {"error": {}, **delta("!")})),
    "malformed-json": ("chat", sse(delta("ok"), b'{"choices": [', delta("never"))),
    "invalid-utf8": ("chat", sse(delta("ok"), b'{"choices": [{"delta": {"content": "\xff\xfe"}}]}')),
    "chunk-is-array": ("chat", sse([1, 2])),
    "choices-not-list": ("chat", sse({"choices": "abc"})),
    "choices-empty-object": ("chat", sse({"choices": {}}, delta("x"))),
    "choice-not-object": ("chat", sse({"choices": [1]})),
    "content-not-string": ("chat", sse(delta(["a", "b"]))),
    "text-not-string": ("completions", sse(text(5))),
    "usage-not-object": ("chat", sse(delta("x"), {"choices": [], "usage": "many"})),
    "usage-falsy": ("chat", sse(delta("x"), {"choices": [], "usage": 0}, {"choices": [], "usage": {}})),
    "token-ids-not-list": ("chat", sse(delta("x", token_ids=7))),
    "token-ids-not-ints": ("chat", sse(delta("x", token_ids=["a"]))),
    "delta-not-object": ("chat", sse({"choices": [{"index": 0, "delta": "text"}]}, delta("y"))),
    "finish-not-string": ("chat", sse(delta("x", finish_reason=3))),
    "huge-line": ("chat", sse(delta("w" * 300_000), delta("!"))),
    "long": ("chat", sse(*[delta(f" word{i}", token_ids=[i]) for i in range(3000)], delta("", finish_reason="stop"), USAGE)),
    "long-then-malformed": ("chat", sse(*[delta(f" w{i}") for i in range(3000)], b"{oops", delta("never"))),
    "long-then-tool-call": ("chat", sse(*[delta(f" w{i}") for i in range(3000)], call_delta(0, "f", "{}", "c9"), delta(" after"))),
    "long-without-done": ("completions", sse(*[text(f" t{i}") for i in range(3000)], done=False)),
}


def cuts(raw: bytes, rng: random.Random, how: str) -> list[bytes]:
    if how == "whole":
        return [raw]
    if how == "bytes":
        return [raw[i : i + 1] for i in range(len(raw))] if len(raw) < 5000 else [raw[i : i + 997] for i in range(0, len(raw), 997)]
    if how == "events":
        parts = raw.split(b"\n\n")
        return [p + b"\n\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])
    out, i = [], 0
    while i < len(raw):
        n = rng.randint(1, 40) if rng.random() < 0.7 else rng.randint(1, 400)
        out.append(raw[i : i + n])
        i += n
    return out


def oracle(kind: str, reads: list[bytes], times: list[float], end: float) -> Response:
    """What the reader gave when it parsed each read as it arrived (the runner's `_SseLines`)."""
    acc = _Accumulator(0.0)
    lines = _SseLines(acc, kind == "chat")

    def failed(info: ErrorInfo) -> Response:
        return Response(case_id="c1", target="baseline", fingerprint="fp", started_at=1.0, error=info)

    try:
        for data, now in zip(reads, times, strict=True):
            if lines.feed(data, now):
                break
        else:
            lines.end(end)
        if not acc.done:
            return failed(stream_cut().info)
        return _response(acc, "c1", "baseline", 0, "fp", 1.0, 1)
    except HttpError as exc:
        return failed(exc.info)
    except (ValueError, TypeError) as exc:
        return failed(bad_response(exc).info)


def deferred(kind: str, reads: list[bytes], times: list[float], end: float) -> Response:
    reader = AnswerReader(kind, sse=True, t0=0.0)
    for data, now in zip(reads, times, strict=True):
        reader.feed(data, now)
    return reader.response(case_id="c1", target="baseline", fingerprint="fp", started_at=1.0, now=end)


@pytest.mark.parametrize("how", ["whole", "events", "bytes", "random"])
@pytest.mark.parametrize("name", sorted(STREAMS))
def test_the_answer_parsed_after_the_stream_is_the_answer_parsed_read_by_read(name: str, how: str) -> None:
    kind, raw = STREAMS[name]
    rng = random.Random(f"{name}-{how}")
    for _ in range(3 if how == "random" else 1):
        reads = cuts(raw, rng, how)
        times = [0.001 * (i + 1) for i in range(len(reads))]
        want, got = oracle(kind, reads, times, 9.0), deferred(kind, reads, times, 9.0)
        assert got.model_dump() == want.model_dump()


def test_well_formed_streams_are_decoded_without_json_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    """The per-event `json.loads` is the fallback; a well-formed answer never reaches it, even split byte by byte."""

    def refuse(*_: Any, **__: Any) -> Any:
        raise AssertionError("json.loads was called")

    monkeypatch.setattr("qualitycheck.generation._client.json.loads", refuse)
    for name in ("plain", "completions", "token-ids", "crlf", "done-in-content"):
        kind, raw = STREAMS[name]
        reads = [raw[i : i + 3] for i in range(0, len(raw), 3)]
        r = deferred(kind, reads, [float(i) for i in range(len(reads))], 99.0)
        assert r.ok, (name, r.error)


def test_a_read_is_only_kept_until_the_answer_is_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """Feeding bytes parses nothing, malformed ones included: the forwarding loop pays an append per read."""
    calls: list[bytes] = []
    monkeypatch.setattr(_client, "_feed_payload", lambda payload, *_: calls.append(payload))
    monkeypatch.setattr(_client, "_parse_fast", lambda *_: False)
    reader = AnswerReader("chat", sse=True, t0=0.0)
    _, raw = STREAMS["malformed-json"]
    for i in range(0, len(raw), 5):
        reader.feed(raw[i : i + 5], 1.0)
    assert calls == [] and reader.done
    reader.response(case_id="c1", target="baseline", fingerprint="fp", started_at=1.0, now=2.0)
    assert len(calls) == 3


def test_a_long_answer_is_parsed_in_parts_so_a_pair_in_flight_holds_little() -> None:
    _, raw = STREAMS["long"]
    reader = AnswerReader("chat", sse=True, t0=0.0)
    events = reader._lines
    assert events is not None
    for i in range(0, len(raw), 1000):
        reader.feed(raw[i : i + 1000], float(i))
        assert events._kept < _client._KEEP_BYTES and sum(len(p) for p, _ in events.events) < 2 * _client._KEEP_BYTES
    r = reader.response(case_id="c1", target="baseline", fingerprint="fp", started_at=1.0, now=1e9)
    assert r.ok and r.text.startswith(" word0 word1") and len(r.chunk_times) == 3000 and r.finish_reason == "stop"


def test_a_line_longer_than_a_part_is_joined_once_when_its_newline_comes(monkeypatch: pytest.MonkeyPatch) -> None:
    """A MB-sized event (prompt logprobs) arrives in many reads: re-joining it at every part would be quadratic on the event loop."""
    monkeypatch.setattr(_client, "_KEEP_BYTES", 100)  # a part every two reads
    raw = sse(delta("x" * 5000), delta("end"), end=b"\n\n")
    reader = AnswerReader("chat", sse=True, t0=0.0)
    events = reader._lines
    assert events is not None
    for reads, i in enumerate(range(0, len(raw), 50), start=1):
        reader.feed(raw[i : i + 50], float(i))
        if b"\n" not in raw[: i + 50]:
            assert len(events._pending) + len(events._reads) == reads  # each piece kept as read, never joined again before the newline
    r = reader.response(case_id="c1", target="baseline", fingerprint="fp", started_at=1.0, now=1e9)
    assert r.ok and r.text == "x" * 5000 + "end"


@pytest.mark.parametrize("reply", ["alpha beta gamma delta", ToolReply(calls=(("get_weather", '{"city": "Paris"}'),))])
@pytest.mark.parametrize("body", [{"stream": True, "stream_options": {"include_usage": True}}, {"stream": True}, {}])
def test_an_endpoint_parsing_after_the_stream_records_what_the_runners_reader_records(reply: Any, body: dict[str, Any]) -> None:
    request = {"model": "test-model", "messages": [{"role": "user", "content": "hi"}], "temperature": 0, **body}
    with TestServer(default=reply, tokens_per_chunk=1) as srv:
        target = Target(url=srv.url, model="test-model")

        async def both() -> tuple[Response, Response]:
            eps = [Endpoint("candidate", target, RunOptions(), parse_after=after) for after in (False, True)]
            try:
                return tuple([await ep.send_plan("c1", RequestPlan("chat", request, "fp")) for ep in eps])  # type: ignore[return-value]
            finally:
                for ep in eps:
                    await ep.aclose()

        runner, after = asyncio.run(both())
    assert after.ok and runner.ok
    same = ("text", "tool_calls", "token_ids", "finish_reason", "usage", "chunk_tokens", "attempts")
    assert [getattr(after, f) for f in same] == [getattr(runner, f) for f in same]
    assert len(after.chunk_times) == len(runner.chunk_times) and after.chunk_times == sorted(after.chunk_times)
    assert after.ttft_s == (after.chunk_times[0] if after.chunk_times else None)
