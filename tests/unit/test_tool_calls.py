"""Tool calls as answers: recorded from streams and whole messages, checked, compared and shown.

A response made only of `tool_calls` used to look empty, so two different
calls compared as identical; these tests fail on that code.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from qualitycheck.core._cases import Case, SuiteError, load_suite
from qualitycheck.core._config import RunOptions, Target
from qualitycheck.core._records import Response, ToolCall
from qualitycheck.generation._client import Endpoint
from qualitycheck.scoring._format import format_features
from qualitycheck.scoring._registry import build_scorers, score_case
from qualitycheck.testserver import TestServer, ToolReply
from qualitycheck.verdict._compare import compare_pair

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}}}}
RECORDED = Path(__file__).parent.parent / "fixtures" / "vllm_streams"


def case(checks: dict[str, Any] | None = None, **params: Any) -> Case:
    return Case(
        id="t1",
        category="tool_call",
        messages=[{"role": "user", "content": "weather in Paris?"}],
        params={"tools": [WEATHER, TIME], **params},
        checks=checks or {},
    )


def send(srv: TestServer, c: Case, **opts: Any) -> Response:
    ep = Endpoint("candidate", Target(url=srv.url, model="m"), RunOptions(**{"backoff_s": 0.01, **opts}))

    async def go() -> Response:
        try:
            return await ep.send(c)
        finally:
            await ep.aclose()

    return asyncio.run(go())


def answer(target: str, *calls: tuple[str, str], text: str = "") -> Response:
    return Response(
        case_id="t1", target=target, fingerprint="f", text=text, tool_calls=[ToolCall(name=n, arguments=a) for n, a in calls] or None
    )


# ------------------------------------------------------------ the client


@pytest.mark.parametrize("stream", [True, False])
def test_client_records_tool_calls_streamed_and_whole(stream: bool) -> None:
    reply = ToolReply((("get_weather", '{"city": "Paris", "unit": "celsius"}'), ("get_time", '{"tz":"Europe/Paris"}')))
    with TestServer(default=reply) as srv:
        r = send(srv, case(tool_choice="auto"), stream=stream)
    assert r.ok and r.text == "" and r.finish_reason == "tool_calls"
    assert [(c.name, c.arguments) for c in r.tool_calls or []] == [
        ("get_weather", '{"city": "Paris", "unit": "celsius"}'),
        ("get_time", '{"tz":"Europe/Paris"}'),
    ]
    assert (r.tool_calls or [])[0].id == "call_0"
    if stream:  # every argument piece is a generated chunk: TPOT covers tool calls too
        assert len(r.chunk_times) > 10
    sent = srv.requests("/chat/completions")[0]["body"]
    assert sent["tools"] == [WEATHER, TIME] and sent["tool_choice"] == "auto"


def test_request_params_are_sent_as_given() -> None:
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}
    with TestServer() as srv:
        send(srv, case(tool_choice={"type": "function", "function": {"name": "get_time"}}, response_format=fmt, stop=["\n\n"], seed=7))
    sent = srv.requests("/chat/completions")[0]["body"]
    assert sent["tool_choice"] == {"type": "function", "function": {"name": "get_time"}}
    assert sent["response_format"] == fmt and sent["stop"] == ["\n\n"] and sent["seed"] == 7


@pytest.mark.skipif(not RECORDED.is_dir(), reason="no recorded vLLM streams")
@pytest.mark.parametrize("name", sorted(p.name for p in RECORDED.glob("*.sse")) if RECORDED.is_dir() else [])
def test_recorded_vllm_tool_call_streams_assemble(name: str) -> None:
    """Streams recorded from the real vLLM CPU server (see the fixtures' README) assemble into its non-streamed calls.

    The values agree but not always the text: vLLM's non-streamed answer
    re-serialises the parsed arguments, while the stream carries the text as
    generated (whitespace and all). The client keeps what it was sent.
    """
    raw = (RECORDED / name).read_bytes()
    whole = json.loads((RECORDED / name).with_suffix(".json").read_text())["choices"][0]["message"]
    with TestServer(recorded={"weather": raw}) as srv:
        r = send(srv, case())
    assert r.ok, r.error
    calls = r.tool_calls or []
    assert [c.name for c in calls] == [t["function"]["name"] for t in whole["tool_calls"]]
    assert [json.loads(c.arguments) for c in calls] == [json.loads(t["function"]["arguments"]) for t in whole["tool_calls"]]
    assert all(c.id and c.id.startswith("chatcmpl-tool-") for c in calls)
    assert r.text == (whole.get("content") or "") and len(r.chunk_times) > 3
    streamed_text = "".join(
        tc["function"].get("arguments") or ""
        for line in raw.decode().splitlines()
        if line.startswith("data: {")
        for ch in json.loads(line[6:]).get("choices", [])
        for tc in (ch.get("delta") or {}).get("tool_calls") or []
    )
    assert calls[0].arguments == streamed_text  # byte for byte what was generated


def test_records_without_tool_calls_still_read() -> None:
    old = '{"case_id":"a","target":"baseline","fingerprint":"f","text":"hi","token_ids":null,"finish_reason":"stop"}'
    r = Response.model_validate_json(old)
    assert r.tool_calls is None and r.answer == "hi"


# ------------------------------------------------------------ the checks


def _score(c: Case, *responses: Response) -> dict[tuple[str, str], Any]:
    return {(s.target, s.check): s for s in score_case(c, responses)}


def test_tool_calls_true_means_valid_and_same_as_baseline() -> None:
    c = case({"tool_calls": True})
    assert c.check_names() == ["tool_calls_valid", "tool_calls_same_as_baseline"]
    assert [s.check for s in build_scorers(c)] == c.check_names()


def test_valid_checks_names_json_and_the_declared_schema() -> None:
    c = case({"tool_calls": {"valid": True}})
    got = _score(
        c,
        answer("baseline", ("get_weather", '{"city": "Paris"}')),
        answer("candidate", ("get_weather", '{"city": "Paris", "unit": "kelvin"}')),
        answer("control", ("get_wether", '{"city": "Paris"}')),
    )
    assert got["baseline", "tool_calls_valid"].status == "pass"
    cand = got["candidate", "tool_calls_valid"]
    assert cand.status == "fail" and cand.detail["errors"][0]["path"] == "$.unit" and "kelvin" in cand.detail["reason"]
    assert (
        got["control", "tool_calls_valid"].status == "fail"
        and "undeclared tool 'get_wether'" in got["control", "tool_calls_valid"].detail["reason"]
    )
    broken = _score(c, answer("candidate", ("get_weather", '{"city": "Par')))["candidate", "tool_calls_valid"]
    assert broken.status == "fail" and "not JSON" in broken.detail["reason"]


def test_valid_fails_a_missing_call_only_when_the_request_demands_one() -> None:
    none = answer("candidate", text="It is sunny.")
    assert _score(case({"tool_calls": {"valid": True}}, tool_choice="auto"), none)["candidate", "tool_calls_valid"].status == "pass"
    required = _score(case({"tool_calls": {"valid": True}}, tool_choice="required"), none)["candidate", "tool_calls_valid"]
    assert required.status == "fail" and "requires a tool call" in required.detail["reason"]


def test_same_as_baseline_compares_json_values_not_text() -> None:
    c = case({"tool_calls": {"same_as_baseline": True}})
    base = answer("baseline", ("get_weather", '{"city": "Paris", "unit": "celsius"}'))
    reordered = answer("candidate", ("get_weather", '{"unit":"celsius","city":"Paris"}'))
    changed = answer("candidate", ("get_weather", '{"city": "Pariss", "unit": "celsius"}'))
    ok = _score(c, base, reordered)["candidate", "tool_calls_same_as_baseline"]
    assert ok.status == "pass" and ok.detail["same_text"] is False
    bad = _score(c, base, changed)["candidate", "tool_calls_same_as_baseline"]
    assert bad.status == "fail" and bad.detail["reason"] == "call 0 (get_weather) has different arguments"
    fewer = _score(c, base, answer("candidate", text="Paris is sunny"))["candidate", "tool_calls_same_as_baseline"]
    assert fewer.status == "fail" and fewer.detail["reason"] == "0 calls, expected 1"
    assert _score(c, changed.model_copy(update={"target": "candidate"}))["candidate", "tool_calls_same_as_baseline"].status == "error"


def test_expected_calls_in_order_with_arguments_as_values() -> None:
    c = case(
        {"tool_calls": {"expected": [{"name": "get_weather", "arguments": {"unit": "celsius", "city": "Paris"}}, {"name": "get_time"}]}}
    )
    right = answer("candidate", ("get_weather", '{"city":"Paris","unit":"celsius"}'), ("get_time", '{"tz": "UTC"}'))
    assert _score(c, right)["candidate", "tool_calls_expected"].status == "pass"
    swapped = answer("candidate", ("get_time", "{}"), ("get_weather", '{"city":"Paris","unit":"celsius"}'))
    assert _score(c, swapped)["candidate", "tool_calls_expected"].detail["reason"] == "call 0 is 'get_time', expected 'get_weather'"
    short = answer("candidate", ("get_weather", '{"city":"Paris","unit":"celsius"}'))
    assert _score(c, short)["candidate", "tool_calls_expected"].status == "fail"


def test_exact_true_sees_a_changed_tool_call() -> None:
    c = case({"exact": True})
    got = _score(c, answer("baseline", ("get_weather", '{"city": "Paris"}')), answer("candidate", ("get_weather", '{"city": "Rome"}')))
    assert got["candidate", "exact"].status == "fail"


def test_comparison_is_not_identical_when_only_the_calls_differ() -> None:
    b = answer("baseline", ("get_weather", '{"city": "Paris"}'))
    c = answer("candidate", ("get_weather", '{"city":"Paris"}'))
    comp = compare_pair("t1", "tool_call", "tool_call", 0, {"baseline": b, "candidate": c}, {}, format_features, tools=True)
    assert comp.identical is False and comp.divergence_char is not None
    assert comp.format["baseline"]["tool_args_whitespace"] is True and comp.format["candidate"]["tool_args_whitespace"] is False
    assert comp.format["candidate"]["tool_calls"] == 1


def test_tool_features_only_for_requests_with_tools() -> None:
    plain = format_features("hello")
    assert not any(k.startswith("tool") for k in plain)
    feats = format_features("", "tool_calls", 5, [ToolCall(name="f", arguments='{"b": 1, "a": 2}'), ToolCall(name="g", arguments="{oops")])
    assert feats["tool_calls"] == 2 and feats["tool_args_sorted_keys"] is False and feats["tool_args_invalid_json"] is True
    assert format_features("", tool_calls=[])["tool_calls"] == 0


# ------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"tools": {"name": "x"}}, "tools must be a list"),
        ({"tools": [{"type": "function", "function": {}}]}, "tools[0] needs function.name"),
        ({"tools": [WEATHER, WEATHER]}, "repeats the tool name 'get_weather'"),
        ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice names 'nope'"),
        ({"tool_choice": "always"}, "tool_choice must be"),
        ({"response_format": {"type": "xml"}}, "response_format must be"),
        ({"stop": [1]}, "stop must be a string or a list of strings"),
        ({"seed": "7"}, "seed must be an integer"),
    ],
)
def test_bad_tool_params_name_the_line_and_field(tmp_path: Path, params: dict[str, Any], message: str) -> None:
    f = tmp_path / "s.jsonl"
    f.write_text(json.dumps({"id": "a", "category": "c", "messages": [{"role": "user", "content": "x"}], "params": params}) + "\n")
    with pytest.raises(SuiteError) as err:
        load_suite([f])
    text = str(err.value)
    assert f"{f}:1" in text and "params" in text and message in text


def test_tool_calls_spec_that_asks_nothing_is_bad_input(tmp_path: Path) -> None:
    f = tmp_path / "s.jsonl"
    row = {"id": "a", "category": "c", "messages": [{"role": "user", "content": "x"}], "checks": {"tool_calls": {}}}
    f.write_text(json.dumps(row) + "\n")
    with pytest.raises(SuiteError) as err:
        load_suite([f])
    assert "checks.tool_calls" in str(err.value) and "asks for nothing" in str(err.value)
