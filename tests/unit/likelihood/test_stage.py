"""The likelihood stage on the test server: every stored answer scored under the baseline model, once, and costed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from qualitycheck.cli import main
from qualitycheck.core._config import Target
from qualitycheck.core._records import LikelihoodRecord, LikelihoodStage
from qualitycheck.core._store import RunStore
from qualitycheck.likelihood import LikelihoodSettings, score_likelihoods
from qualitycheck.testserver import Fault, TestServer, token_id, tokenize_text
from tests.helpers import qa_cases, run_argv, write_suite

LP = {"Paris": -0.1, " is": -0.2, " nice.": -0.3, " fine.": -0.35, " ugly.": -4.0}
"""The toy baseline model: ranks Paris 1, is 2, nice 3, fine 4, ugly 5; anything else far below."""


def _servers(baseline: str = "Paris is nice.", candidate: str = "Paris is ugly.", **kw: Any) -> tuple[TestServer, TestServer]:
    return TestServer(default=baseline, token_logprobs=LP, **kw), TestServer(default=candidate, token_logprobs=LP)


def _records(out: Path) -> dict[tuple[str, str, int], LikelihoodRecord]:
    with RunStore.open(out) as store:
        return {(r.case_id, r.target, r.repeat): r for r in store.likelihoods()}


def _stage(out: Path) -> LikelihoodStage:
    with RunStore.open(out) as store:
        stage = store.record(LikelihoodStage)
    assert stage is not None
    return stage


def _scoring(srv: TestServer) -> list[dict[str, Any]]:
    return [r["body"] for r in srv.requests("/v1/completions") if "prompt_logprobs" in r["body"]]


def _suite(tmp_path: Path, greedy: int = 2, sampled: int = 1) -> Path:
    cases = qa_cases(greedy) + qa_cases(sampled, "samp", params={"temperature": 0.8})
    return write_suite(tmp_path / "s.jsonl", cases)


def test_every_answer_is_scored_on_both_sides_greedy_and_sampled_with_what_a_report_needs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    b, c = _servers()
    with b, c:
        main(run_argv(b.url, c.url, _suite(tmp_path), out))
        scoring = _scoring(b)
    assert not _scoring(c), "the candidate is never asked to score: the baseline is the referee"
    with RunStore.open(out) as store:
        answered = {(r.case_id, r.target, r.repeat) for r in store.responses() if r.ok}
    records = _records(out)
    assert set(records) == answered and {t for _, t, _ in answered} == {"baseline", "candidate", "control"}
    assert {0, 1} <= {rep for (cid, _, rep) in answered if cid == "samp-0"}, "the sampled case's samples are all scored"
    base, cand = records[("qa-0", "baseline", 0)], records[("qa-0", "candidate", 0)]
    assert base.status == cand.status == "scored" and base.tokens_from == "token_ids" and base.token_ids is None
    assert base.tokens == 3 and base.sum_logprob == pytest.approx(-0.6) and base.mean_logprob == pytest.approx(-0.2)
    assert base.token_logprobs == [-0.1, -0.2, -0.3] and base.token_ranks == [1, 2, 3] and base.rank1 == 1
    assert cand.sum_logprob == pytest.approx(-4.3) and cand.token_ranks == [1, 2, 5]
    worst = cand.least_likely[0]
    assert (worst.position, worst.text, worst.logprob, worst.rank) == (2, " ugly.", -4.0, 5)
    assert [t.position for t in cand.least_likely] == [2, 1, 0], "least likely first"
    prompt = tokenize_text("<|user|>question qa 0?<|end|><|assistant|>")
    assert base.prompt_tokens == len(prompt)
    assert scoring[0]["prompt"][: len(prompt)] == [token_id(p) for p in prompt] and scoring[0]["max_tokens"] == 1
    asked = sorted(s["prompt_logprobs"] for s in scoring)
    assert asked == [0] * 2 + [20] * 4, "top tokens only for the greedy pairs' divergences; the rank of each token comes anyway"
    stage = _stage(out)
    assert stage.evaluated and stage.engine == "vllm" and stage.top_k == 20 and stage.scored == len(answered) == stage.answers
    assert sum(p.requests for p in stage.passes) == len(scoring)
    assert stage.prefilled_tokens == sum(len(s["prompt"]) for s in scoring)
    err = capsys.readouterr().err
    assert f"with {stage.passes[0].requests} prefills of {stage.passes[0].prefilled_tokens:,} tokens in" in err


def test_identical_answers_are_prefilled_once_in_a_pass_and_across_passes(tmp_path: Path) -> None:
    """Each greedy case: two distinct answers (the control repeats the baseline's); the sampled case: one per side."""
    out = tmp_path / "run"
    b, c = _servers()
    with b, c:
        main(run_argv(b.url, c.url, _suite(tmp_path, greedy=3, sampled=2), out))
        requests = len(_scoring(b))
    assert requests == 3 * 2 + 2 * 2
    stage = _stage(out)
    # the rounds' later passes (more samples of the sampled cases, the baseline asked again) find every answer's content scored
    assert stage.passes[0].requests == 10 and all(p.requests == 0 for p in stage.passes[1:])
    noise = stage.passes[-1]  # the control's answers equal the baseline's: copied in the last pass
    assert noise.reused == noise.scored == 3 and noise.tokenize_requests == 0
    assert stage.passes[0].reused == 4, "the sampled cases' second samples wait for the first one's prefill"


def test_a_resumed_run_never_scores_an_answer_twice_and_another_scorer_scores_them_all(tmp_path: Path) -> None:
    out = tmp_path / "run"
    b, c = _servers()
    other = TestServer(default="Paris is nice.", token_logprobs=LP)
    with b, c, other:
        suite = _suite(tmp_path)
        main(run_argv(b.url, c.url, suite, out))
        first = len(_scoring(b))
        main(run_argv(b.url, c.url, suite, out))  # resumed: a finished run
        assert main(["likelihood", str(out)]) == 0
        assert len(_scoring(b)) == first
        assert main(["likelihood", str(out), "--scorer", other.url]) == 0
        assert len(_scoring(other)) == first
    records = _records(out)
    assert {r.scorer for r in records.values()} == {f"{other.url} test-model"}
    stage = _stage(out)
    assert stage.scorer == other.url and stage.scored == len(records)


def test_a_changed_answer_is_scored_again(tmp_path: Path) -> None:
    out = tmp_path / "run"
    suite = write_suite(tmp_path / "s.jsonl", qa_cases(1))
    b, c = _servers()
    with b, c:
        main(run_argv(b.url, c.url, suite, out, "--no-noise-floor"))
        with RunStore.open(out) as store:
            cand = next(r for r in store.responses() if r.target == "candidate")
            ids = [token_id(p) for p in ("Paris", " is", " fine.")]
            store.put_response(cand.model_copy(update={"text": "Paris is fine.", "token_ids": ids}))
        assert main(["likelihood", str(out)]) == 0
        assert len(_scoring(b)) == 4, "the candidate's new answer, and the baseline's again: a divergence needs both"
    assert _records(out)[("qa-0", "candidate", 0)].sum_logprob == pytest.approx(-0.65)


def test_a_greedy_divergence_is_explained_at_its_first_differing_token(tmp_path: Path) -> None:
    out = tmp_path / "run"
    suite = write_suite(tmp_path / "s.jsonl", qa_cases(1) + qa_cases(1, "pre"))
    b = TestServer(default="Paris is nice.", answers={"question pre": "Paris is"}, token_logprobs=LP)
    c = TestServer(default="Paris is ugly.", answers={"question pre": "Paris is nice."}, token_logprobs=LP)
    with b, c:
        main(run_argv(b.url, c.url, suite, out, "--no-noise-floor"))
    records = _records(out)
    d = records[("qa-0", "candidate", 0)].divergence
    assert d is not None and d.position == 2 and d.baseline_answer == records[("qa-0", "baseline", 0)].answer
    assert d.baseline_token is not None and d.answer_token is not None
    assert (d.baseline_token.text, d.baseline_token.rank, d.baseline_token.logprob) == (" nice.", 3, -0.3)
    assert (d.answer_token.text, d.answer_token.rank, d.answer_token.logprob) == (" ugly.", 5, -4.0)
    assert [t.text for t in d.top] == ["Paris", " is", " nice.", " fine.", " ugly."]
    assert d.margin == pytest.approx(3.9) and d.runner_up_margin == pytest.approx(0.1)
    assert records[("qa-0", "baseline", 0)].divergence is None
    ended = records[("pre-0", "candidate", 0)].divergence
    assert ended is not None and ended.position == 2 and ended.baseline_token is None, "the baseline's answer ended there"
    assert ended.answer_token is not None and ended.answer_token.text == " nice." and ended.margin == pytest.approx(0.2)


def test_the_baseline_asked_again_gets_its_divergence_too(tmp_path: Path) -> None:
    """The noise floor's second answer of the baseline is scored after it, with the baseline's first answer scored again."""
    calls = {"n": 0}

    def wavering(body: dict[str, Any]) -> str:
        calls["n"] += 1
        return "Paris is nice." if calls["n"] == 1 else "Paris is fine."

    out = tmp_path / "run"
    suite = write_suite(tmp_path / "s.jsonl", qa_cases(1))
    b = TestServer(default=wavering, token_logprobs=LP)
    c = TestServer(default="Paris is ugly.", token_logprobs=LP)
    with b, c:
        main(run_argv(b.url, c.url, suite, out))
    d = _records(out)[("qa-0", "control", 0)].divergence
    assert d is not None and d.answer_token is not None and (d.position, d.answer_token.text) == (2, " fine.")
    assert d.margin == pytest.approx(0.25)
    assert [p.requests for p in _stage(out).passes] == [2, 2], "the control's answer, and the baseline's again for its top tokens"


def test_answers_without_token_ids_are_scored_from_their_text_on_both_sides(tmp_path: Path) -> None:
    out = tmp_path / "run"
    suite = write_suite(tmp_path / "s.jsonl", qa_cases(1))
    b = TestServer(default="Paris is nice.", token_logprobs=LP)
    c = TestServer(default="Paris is ugly.", token_logprobs=LP, return_token_ids=False)
    with b, c:
        main(run_argv(b.url, c.url, suite, out, "--no-noise-floor"))
        retokenized = [r["body"] for r in b.requests("/tokenize") if "prompt" in r["body"]]
    records = _records(out)
    assert {r.tokens_from for r in records.values()} == {"text"}, "one side without ids: both scored from text"
    assert records[("qa-0", "baseline", 0)].token_ids == [token_id(p) for p in ("Paris", " is", " nice.")]
    assert all(r["add_special_tokens"] is False for r in retokenized) and len(retokenized) == 2
    d = records[("qa-0", "candidate", 0)].divergence
    assert d is not None and d.position == 2


@pytest.mark.parametrize(
    ("engine", "says"),
    [("llama", "llama-server, which cannot score a given answer"), ("hosted", "has no /tokenize")],
)
def test_a_scorer_that_cannot_score_leaves_the_evidence_not_evaluated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], engine: str, says: str
) -> None:
    out = tmp_path / "run"
    b, c = _servers(engine=engine)
    with b, c:
        main(run_argv(b.url, c.url, write_suite(tmp_path / "s.jsonl", qa_cases(1)), out, "--no-noise-floor"))
        assert not _scoring(b)
        assert main(["likelihood", str(out)]) == 3
    stage = _stage(out)
    assert not stage.evaluated and says in stage.reason and stage.engine is None and stage.scored == 0
    assert not _records(out)
    assert f"qualitycheck: likelihood: not evaluated: {stage.reason}" in capsys.readouterr().err


def test_no_likelihood_switches_the_stage_off_and_says_so(tmp_path: Path) -> None:
    out = tmp_path / "run"
    b, c = _servers()
    with b, c:
        main(run_argv(b.url, c.url, write_suite(tmp_path / "s.jsonl", qa_cases(2)), out, "--no-likelihood"))
        assert not _scoring(b) and not b.requests("/tokenize")
    stage = _stage(out)
    assert not stage.evaluated and stage.reason == "switched off (--no-likelihood)" and not _records(out)


def test_an_answer_too_long_for_the_scorer_is_named_counted_and_not_asked_again(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Either side of a greedy pair too long: the other is scored, and the pair is not asked again to explain its divergence."""
    out = tmp_path / "run"
    long = "Paris" + " is" * 12
    suite = write_suite(tmp_path / "s.jsonl", qa_cases(3))
    b = TestServer(default="Paris is nice.", answers={"qa 1": long}, token_logprobs=LP, max_model_len=12)
    c = TestServer(default="Paris is nice.", answers={"qa 2": long}, token_logprobs=LP)
    with b, c:
        main(run_argv(b.url, c.url, suite, out, "--no-noise-floor"))
        sent = len(_scoring(b))
        assert main(["likelihood", str(out)]) == 0
        assert main(["likelihood", str(out)]) == 0
        assert len(_scoring(b)) == sent, "a too-long answer is not asked again, nor its pair's other answer"
    records = _records(out)
    too_long = records[("qa-1", "baseline", 0)]
    assert too_long.status == "too_long" and "do not fit the scorer's context of 12" in (too_long.reason or "")
    assert records[("qa-1", "candidate", 0)].status == records[("qa-2", "baseline", 0)].status == "scored"
    assert records[("qa-2", "candidate", 0)].status == "too_long" and records[("qa-1", "candidate", 0)].divergence is None
    stage = _stage(out)
    assert stage.too_long == 2 and stage.scored == 4 and stage.answers == 6
    err = capsys.readouterr().err
    assert "2 too long for the scorer's context (qa-1/baseline/0, qa-2/candidate/0)" in err
    assert "qualitycheck: likelihood: every answer already has a record (4 scored, 2 too long, of 6 answers)" in err


def test_a_failed_scoring_is_stored_as_an_error_and_asked_again(tmp_path: Path) -> None:
    out = tmp_path / "run"
    b, c = _servers()
    scorer = TestServer(token_logprobs=LP, faults=[Fault(kind="status", status=503, times=None)])
    with b, c, scorer:
        suite = write_suite(tmp_path / "s.jsonl", qa_cases(1))
        main(run_argv(b.url, c.url, suite, out, "--no-noise-floor", "--retries", "0", "--scorer", scorer.url))
        assert {r.status for r in _records(out).values()} == {"error"}
        assert _stage(out).errors == 2
        assert main(["likelihood", str(out)]) == 3, "errors remain: the stage could not complete"
        scorer.faults.clear()
        assert main(["likelihood", str(out)]) == 0
    assert {r.status for r in _records(out).values()} == {"scored"} and _stage(out).errors == 0


def test_a_server_allowing_fewer_logprobs_is_asked_for_what_it_allows(tmp_path: Path) -> None:
    out = tmp_path / "run"
    b, c = _servers(max_logprobs=3)
    with b, c:
        main(run_argv(b.url, c.url, write_suite(tmp_path / "s.jsonl", qa_cases(1)), out, "--no-noise-floor"))
    stage = _stage(out)
    assert stage.top_k == 3 and stage.scored == 2
    d = _records(out)[("qa-0", "candidate", 0)].divergence
    assert d is not None and [t.text for t in d.top] == ["Paris", " is", " nice."]


def test_progress_counts_each_answer_per_side(tmp_path: Path) -> None:
    out = tmp_path / "run"
    b, c = _servers()
    with b, c:
        main(run_argv(b.url, c.url, write_suite(tmp_path / "s.jsonl", qa_cases(3)), out, "--no-noise-floor", "--no-likelihood"))
        seen: list[Any] = []

        class Recorder:
            def start(self, totals: dict[str, int]) -> None:
                seen.append(("start", totals))

            def advance(self, target: str, ok: bool) -> None:
                seen.append((target, ok))

            def stop(self) -> None:
                seen.append("stop")

        with RunStore.open(out) as store:
            score_likelihoods(store, LikelihoodSettings(scorer=Target(url=b.url, model="test-model")), progress=Recorder())
    assert seen[0] == ("start", {"baseline": 3, "candidate": 3}) and seen[-1] == "stop"
    assert sorted(seen[1:-1]) == [("baseline", True)] * 3 + [("candidate", True)] * 3


def test_merged_shards_keep_their_likelihood_records(tmp_path: Path) -> None:
    suite = write_suite(tmp_path / "s.jsonl", qa_cases(6))
    b, c = _servers()
    with b, c:
        for i in (1, 2):
            main(run_argv(b.url, c.url, suite, tmp_path / f"shard{i}", "--no-noise-floor", "--shard", f"{i}/2"))
        main(["merge", str(tmp_path / "shard1"), str(tmp_path / "shard2"), "--out", str(tmp_path / "merged")])
    merged = _records(tmp_path / "merged")
    assert len(merged) == 12 and merged == {**_records(tmp_path / "shard1"), **_records(tmp_path / "shard2")}
    stage = _stage(tmp_path / "merged")
    assert stage.scored == 12 and len(stage.passes) == 2


def test_the_record_schema_is_published_and_a_stored_record_validates(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from jsonschema import Draft202012Validator

    published = Path(__file__).resolve().parents[3] / "docs" / "schema" / "likelihoods.schema.json"
    assert main(["schema", "likelihoods"]) == 0
    printed = capsys.readouterr().out
    assert printed == published.read_text(encoding="utf-8"), "run `qualitycheck schema likelihoods > docs/schema/likelihoods.schema.json`"
    out = tmp_path / "run"
    b, c = _servers()
    with b, c:
        main(run_argv(b.url, c.url, write_suite(tmp_path / "s.jsonl", qa_cases(1)), out, "--no-noise-floor"))
    validator = Draft202012Validator(json.loads(printed))
    for record in _records(out).values():
        assert not list(validator.iter_errors(record.model_dump(mode="json")))
    assert list(validator.iter_errors({**record.model_dump(mode="json"), "status": "fine"}))


def test_a_scorer_without_a_model_scores_with_the_baselines_and_a_bad_url_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from qualitycheck.core._config_file import load_config
    from qualitycheck.pipeline._likelihood import likelihood_settings

    cfg = load_config(None, {"baseline.url": "http://b", "model": "smol", "likelihood.scorer.url": "http://s"})
    assert cfg.likelihood.scorer is not None and cfg.likelihood.scorer.model == "smol"
    settings = likelihood_settings(cfg)
    assert settings is not None and settings.scorer.url == "http://s" and settings.identity == "http://s smol"
    assert main(run_argv("http://b", "http://c", tmp_path / "none.jsonl", tmp_path / "o", "--scorer", "ftp://x")) == 2
    assert "likelihood.scorer.url: must start with http:// or https://" in capsys.readouterr().err
