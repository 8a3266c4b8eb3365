"""Preflight against scripted servers: a template change is caught, identical servers pass."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from typing import Any

from aiohttp import web

from qualitycheck.core._cases import Case
from qualitycheck.core._config import Target
from qualitycheck.generation import format_preflight, preflight, run_preflight
from qualitycheck.generation._preflight import PREFLIGHT_HTTP
from qualitycheck.testserver import TestServer
from tests.helpers import raw_server

CASES = [
    Case(id="chat-1", category="qa", messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+2?"}]),
    Case(id="chat-2", category="qa", messages=[{"role": "user", "content": "Name a colour."}]),
    Case(id="chat-2-copy", category="qa", messages=[{"role": "user", "content": "Name a colour."}]),
    Case(id="plain", category="completion", prompt="Once upon a time"),
]


def _targets(b: TestServer, c: TestServer) -> tuple[Target, Target]:
    return Target(url=b.url, model=b.model), Target(url=c.url + "/v1", model=c.model)


def _by_name(result):
    return {ch.name: ch for ch in result.checks}


def test_identical_servers_pass():
    with TestServer() as b, TestServer() as c:
        res = run_preflight(*_targets(b, c), CASES)
        tokenize_calls = len(b.requests("/tokenize"))
    checks = _by_name(res)
    assert res.ok and not res.mismatches
    assert checks["tokenize"].passed is True and "4 cases (3 distinct inputs)" in checks["tokenize"].detail
    assert tokenize_calls == 3  # duplicate inputs are tokenized once
    assert checks["served_model"].passed and checks["model_root"].passed and checks["model_max_model_len"].passed
    assert checks["engine_version"].passed is True
    # endpoints the test server does not have are "not checked", never "passed"
    assert checks["tokenizer_and_stop_tokens"].passed is None
    assert checks["generation_defaults"].passed is None


def test_template_drift_is_caught_with_the_cases_named():
    with TestServer() as b, TestServer(chat_template="[{role}] {content}\n") as c:
        res = run_preflight(*_targets(b, c), CASES)
    tok = _by_name(res)["tokenize"]
    assert res.ok is False and tok.passed is False
    assert "3/4 cases tokenize differently" in tok.detail and "chat-1" in tok.detail
    differing = {i for d in tok.candidate["differing"] for i in d["cases"]}
    assert differing == {"chat-1", "chat-2", "chat-2-copy"}  # the plain prompt has no template
    text = format_preflight(res)
    assert "FAIL tokenize" in text and "1 mismatch(es): tokenize" in text


def test_model_length_version_and_missing_model_are_mismatches():
    with TestServer(max_model_len=2048) as b, TestServer(max_model_len=1024, version="0.33.0") as c:
        res = run_preflight(*_targets(b, c), CASES[:1])
    checks = _by_name(res)
    assert checks["model_max_model_len"].passed is False and "2048" in checks["model_max_model_len"].detail
    assert checks["engine_version"].passed is False
    with TestServer() as b, TestServer(model="other") as c:
        res = run_preflight(Target(url=b.url, model="test-model"), Target(url=c.url, model="test-model"), CASES[:1])
    served = _by_name(res)["served_model"]
    assert served.passed is False and "does not serve 'test-model'" in served.detail


def test_unreachable_candidate_is_not_checked_not_passed():
    with TestServer() as b:
        res = run_preflight(
            Target(url=b.url, model="test-model"),
            Target(url="http://127.0.0.1:9", model="test-model"),
            CASES[:1],
            http=dataclasses.replace(PREFLIGHT_HTTP, timeout_s=2),
        )
    assert all(ch.passed is None for ch in res.checks)
    assert res.to_dict()["mismatches"] == []


def _vllm_like(eos: str, generation_config: str) -> Any:
    """Answers like vLLM with the tokenizer-info endpoint and dev mode on."""

    async def handler(request: web.Request) -> web.Response:
        path = request.path
        if path == "/v1/models":
            return web.json_response({"data": [{"id": "m", "root": "/w/m", "max_model_len": 1024}]})
        if path == "/tokenize":
            return web.json_response({"count": 2, "max_model_len": 1024, "tokens": [1, 2]})
        if path == "/tokenizer_info":
            return web.json_response({"tokenizer_class": "GPT2TokenizerFast", "eos_token": eos, "chat_template": "t"})
        if path == "/server_info":
            return web.json_response({"vllm_config": {"model_config": {"generation_config": generation_config, "dtype": "float32"}}})
        if path == "/version":
            return web.json_response({"version": "0.32.0"})
        return web.Response(status=404)

    return handler


def test_stop_tokens_and_generation_defaults_compared_where_exposed():
    with raw_server(_vllm_like("<|im_end|>", "auto")) as b, raw_server(_vllm_like("</s>", "vllm")) as c:
        res = asyncio.run(preflight(Target(url=b, model="m"), Target(url=c, model="m"), CASES[:1]))
    checks = _by_name(res)
    assert checks["tokenize"].passed is True and checks["engine_version"].passed is True
    stop = checks["tokenizer_and_stop_tokens"]
    assert stop.passed is False and 'eos_token: baseline "<|im_end|>", candidate "</s>"' in stop.detail
    gen = checks["generation_defaults"]
    assert gen.passed is False and gen.candidate == {"generation_config": "vllm"}
    assert sorted(res.to_dict()["mismatches"]) == ["generation_defaults", "tokenizer_and_stop_tokens"]


def test_tokenize_streams_a_one_pass_iterable_with_bounded_requests_in_flight():
    """The cases may come one at a time (a generator); distinct inputs are asked once, a few at a time."""
    calls = {"b": 0, "c": 0}
    in_flight = {"now": 0, "max": 0}
    lock = threading.Lock()  # each server answers on a thread of its own

    def tokenizer(side: str) -> Any:
        async def handler(request: web.Request) -> web.Response:
            if request.path != "/tokenize":
                return web.Response(status=404)
            with lock:
                calls[side] += 1
                in_flight["now"] += 1
                in_flight["max"] = max(in_flight["max"], in_flight["now"])
            await asyncio.sleep(0.001)
            with lock:
                in_flight["now"] -= 1
            content = (await request.json())["messages"][0]["content"]
            drift = side == "c" and content in ("q3", "q7")
            return web.json_response({"tokens": [1, 2, 3] if drift else [1, 2]})

        return handler

    cases = (Case(id=f"k{i}", category="qa", messages=[{"role": "user", "content": f"q{i % 20}"}]) for i in range(60))
    with raw_server(tokenizer("b")) as b, raw_server(tokenizer("c")) as c:
        res = asyncio.run(
            preflight(Target(url=b, model="m"), Target(url=c, model="m"), cases, http=dataclasses.replace(PREFLIGHT_HTTP, concurrency=4))
        )
    tok = _by_name(res)["tokenize"]
    assert calls == {"b": 20, "c": 20} and in_flight["max"] <= 2 * 4
    assert tok.passed is False and tok.detail.startswith("6/60 cases tokenize differently")
    assert [d["cases"] for d in tok.candidate["differing"]] == [["k3", "k23", "k43"], ["k7", "k27", "k47"]]
    assert tok.candidate["differing"][0]["first_difference"] == 2


def test_a_tokenize_answer_of_the_wrong_shape_is_an_error_never_a_silent_pass():
    """One input's odd answer must not vanish with its task: the check names it instead of passing."""
    cases = [Case(id=f"c{i}", category="qa", prompt=f"p{i}") for i in range(6)]

    async def handler(request: web.Request) -> web.Response:
        if not request.path.endswith("/tokenize"):
            return web.Response(status=404)
        if (await request.json()).get("prompt") == "p0":
            return web.json_response([1, 2, 3])
        return web.json_response({"tokens": [1, 2]})

    with raw_server(handler) as b, raw_server(handler) as c:
        res = asyncio.run(
            preflight(Target(url=b, model="m"), Target(url=c, model="m"), cases, http=dataclasses.replace(PREFLIGHT_HTTP, concurrency=2))
        )
    tok = _by_name(res)["tokenize"]
    assert tok.passed is not True
    assert "c0" in tok.detail and "JSON object" in tok.detail
