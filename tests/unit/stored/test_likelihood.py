"""The likelihood stage under a stored baseline: a stored baseline is never the scorer.

Without a live baseline, `--scorer URL` scores every answer (the stored
baseline's included, under one scorer); without either the evidence is not
evaluated, and says how to get it. With a live baseline and no scorer, the
live baseline scores.
"""

from __future__ import annotations

from pathlib import Path

from qualitycheck.cli._main import main
from qualitycheck.core._records import LikelihoodStage
from qualitycheck.core._store import RunStore
from qualitycheck.testserver import TestServer
from tests.helpers import qa_cases, write_suite
from tests.unit.stored.test_baseline_run import MODEL, live_run, stored_run, summary

LP = {"Paris": -0.1, " is": -0.2, " nice.": -0.3, " ugly.": -4.0}
"""The toy baseline model (as tests/unit/likelihood's): 'ugly' is far less likely than 'nice'."""
NICE, UGLY = "Paris is nice.", "Paris is ugly."


def _scored(srv: TestServer) -> int:
    """Scoring requests a server received (a prefill with prompt_logprobs)."""
    return sum(1 for r in srv.requests("/v1/completions") if r["body"].get("prompt_logprobs"))


def _stage(out: Path) -> LikelihoodStage:
    with RunStore.open(out) as store:
        stage = store.record(LikelihoodStage)
    assert stage is not None
    return stage


def test_without_a_live_baseline_the_scorer_given_scores_and_without_one_the_evidence_is_not_evaluated(tmp_path: Path) -> None:
    suite = write_suite(tmp_path / "s.jsonl", qa_cases(4, checks={"exact": True}))
    with (
        TestServer(default=NICE, token_logprobs=LP) as b,
        TestServer(default=NICE, token_logprobs=LP) as same,
        TestServer(default=UGLY, token_logprobs=LP) as c,
        TestServer(default=NICE, token_logprobs=LP) as scorer,
    ):
        assert live_run(b, same, suite, tmp_path / "live") == 0
        assert _stage(tmp_path / "live").evaluated, "the stored run's own baseline scored its answers"
        before = dict(b.received)

        stored_run(tmp_path / "live", c, suite, tmp_path / "unscored")
        s = summary(tmp_path / "unscored")
        assert s["likelihood"]["evaluated"] is False
        assert "the baseline's answers are stored" in s["likelihood"]["reason"] and "--scorer URL" in s["likelihood"]["reason"]
        assert _scored(c) == 0, "the candidate never scores: the baseline model is the referee"

        # scored afterwards, as the reason says: the model the stored baseline served, every answer, one scorer
        assert main(["likelihood", str(tmp_path / "unscored"), "--scorer", scorer.url]) == 0
        assert _stage(tmp_path / "unscored").evaluated and _stage(tmp_path / "unscored").model == MODEL
        with RunStore.open(tmp_path / "unscored") as store:
            assert {r.scorer for r in store.likelihoods()} == {f"{scorer.url} {MODEL}"}
        assert b.received == before and _scored(c) == 0

        stored_run(tmp_path / "live", c, suite, tmp_path / "scored", "--scorer", scorer.url)
        assert b.received == before, "the stored baseline scored nothing either"
        assert _scored(c) == 0
        stage = _stage(tmp_path / "scored")
        assert stage.evaluated and stage.scorer == scorer.url
        # every answer of the new run is scored by the one scorer given: the copied baseline's too (its stored records
        # were another scorer's, so they are not current), and never mixed with the stored run's scorer
        with RunStore.open(tmp_path / "scored") as store:
            answered = {(r.case_id, r.target, r.repeat) for r in store.responses() if r.ok}
            records = {(r.case_id, r.target, r.repeat): r for r in store.likelihoods() if r.scorer == f"{scorer.url} {MODEL}"}
        assert set(records) == answered and {t for _, t, _ in answered} == {"baseline", "candidate"}
        assert records[("qa-0", "candidate", 0)].sum_logprob < records[("qa-0", "baseline", 0)].sum_logprob
        assert summary(tmp_path / "scored")["likelihood"]["scorer"] == scorer.url

        with TestServer(default=NICE, token_logprobs=LP) as live:
            stored_run(tmp_path / "live", c, suite, tmp_path / "with-live", live=live)
            assert _scored(live) > 0, "a live baseline scores when no --scorer is given"
        assert _stage(tmp_path / "with-live").scorer == live.url
        assert b.received == before
