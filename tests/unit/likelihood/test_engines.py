"""Scoring requests and answers: vLLM's recorded answer, SGLang's shape on the same figures, and a scorer's refusals."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from qualitycheck.core._cases import Case
from qualitycheck.core._config import HttpPolicy, Target
from qualitycheck.core._http import HttpClient
from qualitycheck.core._records import LikelihoodRecord, LikelihoodStage, Response
from qualitycheck.core._store import RunStore
from qualitycheck.likelihood import LikelihoodSettings, parse_sglang, parse_vllm, score_likelihoods
from qualitycheck.likelihood._engines import TooLong, detect_scorer
from qualitycheck.testserver import TestServer, token_id
from tests.helpers import raw_server

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "likelihood"


def _fixture(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text(encoding="utf-8"))


CASE = _fixture("case.json")
ANSWER: list[int] = CASE["answer_token_ids"]
PROMPT: list[int] = _fixture("chat_prompt_ids.json")["choices"][0]["prompt_token_ids"]


def test_vllms_recorded_answer_reads_as_the_answers_tokens_with_their_ranks() -> None:
    scored = parse_vllm(_fixture("vllm_score.json"), len(PROMPT), ANSWER)
    assert len(scored.logprobs) == len(ANSWER) == 10
    assert all(r == 1 for r in scored.ranks), "the model's own greedy answer: its first choice at every token"
    assert scored.texts[:6] == ["The", " capital", " of", " France", " is", " Paris"] and scored.texts[-1] == "<|im_end|>"
    assert scored.prefilled == len(PROMPT) + len(ANSWER)
    assert scored.top[0][0].text == "The" and [t.rank for t in scored.top[0]] == [1, 2, 3, 4, 5]
    assert all(t.logprob >= u.logprob for t, u in zip(scored.top[0], scored.top[0][1:]))


def test_sglangs_answer_with_the_same_figures_reads_the_same() -> None:
    """SGLang lists from one before the answer (no logprob there) and gives no rank: a token in its top-k ranks by place."""
    vllm = parse_vllm(_fixture("vllm_score.json"), len(PROMPT), ANSWER)
    sglang = parse_sglang(_fixture("generate.json"), len(PROMPT), ANSWER)
    assert sglang.logprobs == vllm.logprobs and sglang.texts == vllm.texts and sglang.ranks == vllm.ranks
    assert [[t.token_id for t in top] for top in sglang.top] == [[t.token_id for t in top] for top in vllm.top]
    assert sglang.prefilled == vllm.prefilled


def test_a_token_below_sglangs_top_k_has_no_rank() -> None:
    body = _fixture("generate.json")
    tops = body["meta_info"]["input_top_logprobs"]
    tops[1] = [t for t in tops[1] if t[1] != ANSWER[0]]
    scored = parse_sglang(body, len(PROMPT), ANSWER)
    assert scored.ranks[0] is None and scored.ranks[1] == 1


def _sglang_server(log: list[tuple[str, Any]]) -> Any:
    from aiohttp import web

    async def handler(request: web.Request) -> web.Response:
        body = await request.json() if request.can_read_body else None
        log.append((request.path, body))
        answers = {
            "/model_info": {"model_path": "/models/smollm2", "tokenizer_path": "/models/smollm2", "is_generation": True},
            "/v1/models": {"object": "list", "data": [{"id": "smol", "object": "model", "owned_by": "sglang", "max_model_len": 1024}]},
            "/v1/chat/completions": _fixture("chat_prompt_ids.json"),
            "/generate": _fixture("generate.json"),
        }
        if request.path not in answers:
            return web.json_response({"detail": "Not Found"}, status=404)
        return web.json_response(answers[request.path])

    return raw_server(handler)


def _one_answer_store(folder: Path) -> RunStore:
    case = Case(id="capital", category="qa", messages=CASE["messages"])
    store = RunStore.create(folder, {"suite_fingerprint": "f", "targets": {}, "repeats": 1}, [case])
    store.put_response(Response(case_id="capital", target="baseline", fingerprint="fp", text=CASE["answer_text"], token_ids=ANSWER))
    return store


def test_a_scoring_pass_asks_sglang_its_own_way_and_stores_the_same_figures(tmp_path: Path) -> None:
    log: list[tuple[str, Any]] = []
    with _sglang_server(log) as url, _one_answer_store(tmp_path) as store:
        stage = score_likelihoods(store, LikelihoodSettings(scorer=Target(url=url, model="smol")))
        record = next(store.likelihoods())
    assert stage.evaluated and stage.engine == "sglang" and stage.passes[0].prefilled_tokens == len(PROMPT) + len(ANSWER)
    chat = next(b for p, b in log if p == "/v1/chat/completions")
    assert chat["messages"] == CASE["messages"] and chat["return_prompt_token_ids"] is True
    generate = next(b for p, b in log if p == "/generate")
    assert generate["input_ids"] == PROMPT + ANSWER and generate["logprob_start_len"] == len(PROMPT) - 1
    assert generate["sampling_params"]["max_new_tokens"] == 0 and generate["return_logprob"] is True and generate["top_logprobs_num"] == 20
    vllm = parse_vllm(_fixture("vllm_score.json"), len(PROMPT), ANSWER)
    assert isinstance(record, LikelihoodRecord) and record.status == "scored" and record.tokens == len(ANSWER)
    assert record.sum_logprob == pytest.approx(sum(vllm.logprobs)) and record.rank1 == len(ANSWER)
    assert record.least_likely[0].text == vllm.texts[record.least_likely[0].position]


def test_a_scorer_asked_to_score_past_its_context_raises_too_long() -> None:
    """vLLM refuses a prompt that leaves no room for the one token it must generate; the stage stores it as too long."""

    async def go(url: str) -> None:
        http = HttpClient(Target(url=url, model="test-model"), HttpPolicy(timeout_s=5, retries=0, backoff_s=0))
        try:
            scorer = await detect_scorer(http, "test-model", 20)
            assert scorer.engine == "vllm" and scorer.max_model_len == 8 and not scorer.fits(5, 3)
            scorer.max_model_len = None  # as a server that does not list its context
            with pytest.raises(TooLong, match="max_tokens must be at least 1"):
                await scorer.score([token_id("a")] * 5, [token_id("b")] * 3)
        finally:
            await http.aclose()

    with TestServer(max_model_len=8, token_logprobs={"a": -0.1}) as srv:
        asyncio.run(go(srv.url))


def test_a_scorer_that_does_not_serve_the_model_is_not_evaluated(tmp_path: Path) -> None:
    with TestServer(model="other") as srv, _one_answer_store(tmp_path) as store:
        stage = score_likelihoods(store, LikelihoodSettings(scorer=Target(url=srv.url, model="smol")))
    assert not stage.evaluated and stage.reason == "the scorer does not serve 'smol' (it serves 'other')"
    assert isinstance(stage, LikelihoodStage) and not stage.passes[0].requests


def test_a_scorer_that_refuses_prompt_logprobs_is_found_out_once_and_the_evidence_is_not_evaluated(tmp_path: Path) -> None:
    """A server that answers chat but refuses to score (a gateway, or the test server without a toy model) is asked once."""
    from qualitycheck.core._records import LikelihoodStage

    with TestServer() as srv, _one_answer_store(tmp_path) as store:
        stage = score_likelihoods(store, LikelihoodSettings(scorer=Target(url=srv.url, model="test-model")))
        scoring = [r for r in srv.requests("/v1/completions") if "prompt_logprobs" in r["body"]]
        assert store.record(LikelihoodStage) == stage
    assert not stage.evaluated and "refuses prompt_logprobs" in stage.reason and stage.errors == 0
    assert len(scoring) == 1, "one refusal says it: the other answers are not asked"
