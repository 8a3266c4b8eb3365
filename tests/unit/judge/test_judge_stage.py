from __future__ import annotations

from pathlib import Path

from qualitycheck.judge._judge import CACHE_NAME, score_judge
from qualitycheck.testserver import Fault, TestServer

from .conftest import blocks, judge_stage, make_store, prefer


def _scores(store):
    return {(s.case_id, s.target): s for s in store.scores() if s.check == "judge"}


def test_identical_pairs_never_reach_the_judge(run_dir: Path) -> None:
    with TestServer(default=prefer("never")) as srv:
        store = make_store(run_dir, [("c1", "Same words.", "Same words."), ("c2", "x", "x")])
        stage = score_judge(store, *judge_stage(srv.url))
        assert srv.requests("/chat/completions") == []
    assert stage["calls"] == 0 and stage["skipped_identical"] == 2
    s = _scores(store)
    assert s["c1", "candidate"].value == "tie" and s["c1", "candidate"].status == "pass"
    assert s["c1", "candidate"].detail["identical"] is True


def test_both_orders_are_sent_and_a_consistent_preference_decides(run_dir: Path) -> None:
    with TestServer(default=prefer("GOOD")) as srv:
        store = make_store(run_dir, [("win", "meh", "GOOD answer"), ("loss", "GOOD answer", "meh")])
        score_judge(store, *judge_stage(srv.url))
        reqs = srv.requests("/chat/completions")
    assert len(reqs) == 4
    seen = {(blocks(r["body"])["reply A"], blocks(r["body"])["reply B"]) for r in reqs}
    assert {("meh", "GOOD answer"), ("GOOD answer", "meh")} == seen
    assert all(r["body"]["model"] == "judge-m" and r["body"]["temperature"] == 0 for r in reqs)
    s = _scores(store)
    assert (s["win", "candidate"].value, s["win", "candidate"].status) == ("win", "pass")
    assert (s["loss", "candidate"].value, s["loss", "candidate"].status) == ("loss", "fail")
    assert s["loss", "baseline"].status == "pass"
    d = s["loss", "candidate"].detail
    assert d["position_consistent"] is True
    assert [o["verdict"] for o in d["orders"]] == ["A", "B"]
    assert [o["order"] for o in d["orders"]] == ["baseline_first", "candidate_first"]
    assert "more accurate" in d["orders"][0]["excerpt"]


def test_a_verdict_that_follows_position_is_a_tie_marked_inconsistent(run_dir: Path) -> None:
    with TestServer(default="The first one reads better. [[A]]") as srv:
        store = make_store(run_dir, [("c1", "one", "two")])
        score_judge(store, *judge_stage(srv.url))
    s = _scores(store)["c1", "candidate"]
    assert s.value == "tie" and s.status == "pass"
    assert s.detail["position_consistent"] is False


def test_unparseable_answers_are_retried_then_a_judge_error(run_dir: Path) -> None:
    with TestServer(default="Both have merits, hard to say.") as srv:
        store = make_store(run_dir, [("c1", "one", "two")])
        score_judge(store, *judge_stage(srv.url, judge_retries=2))
        assert len(srv.requests("/chat/completions")) == 2 * 3  # two orders × (1 + 2 retries)
    s = _scores(store)
    assert s["c1", "candidate"].status == "error" and s["c1", "baseline"].status == "error"
    assert s["c1", "candidate"].value is None
    assert "unparseable after 3 attempts" in s["c1", "candidate"].detail["error"]


def test_retry_recovers_when_a_later_answer_parses(run_dir: Path) -> None:
    asked: list[str] = []

    def flaky(body):
        first_reply = blocks(body)["reply A"]
        asked.append(first_reply)
        return "hmm" if asked.count(first_reply) == 1 else "ok [[TIE]]"

    with TestServer(default=flaky) as srv:
        store = make_store(run_dir, [("c1", "one", "two")])
        score_judge(store, *judge_stage(srv.url, judge_retries=1))
    s = _scores(store)["c1", "candidate"]
    assert s.value == "tie" and s.status == "pass"
    assert [o["attempts"] for o in s.detail["orders"]] == [2, 2]


def test_judge_endpoint_failure_is_a_judge_error(run_dir: Path) -> None:
    with TestServer(default="[[A]]", faults=[Fault("status", status=500, times=None)]) as srv:
        store = make_store(run_dir, [("c1", "one", "two")])
        score_judge(store, *judge_stage(srv.url))
    s = _scores(store)["c1", "candidate"]
    assert s.status == "error" and "judge endpoint failed" in s.detail["error"]


def test_missing_answer_is_an_error_without_a_call(run_dir: Path) -> None:
    with TestServer(default="[[A]]") as srv:
        store = make_store(run_dir, [("c1", "one", "two")], errors={"c1:candidate": "boom"})
        score_judge(store, *judge_stage(srv.url))
        assert srv.requests("/chat/completions") == []
    s = _scores(store)["c1", "candidate"]
    assert s.status == "error" and s.detail["no_answer"] is True and "boom" in s.detail["error"]


def test_cache_hits_on_rerun_and_is_keyed_by_endpoint_and_model(run_dir: Path) -> None:
    with TestServer(default=prefer("GOOD")) as srv, TestServer(default=prefer("GOOD")) as other:
        store = make_store(run_dir, [("c1", "meh", "GOOD"), ("c2", "GOOD", "meh")])
        first = score_judge(store, *judge_stage(srv.url))
        assert (run_dir / CACHE_NAME).is_file()
        again = score_judge(store, *judge_stage(srv.url))
        assert len(srv.requests("/chat/completions")) == 4
        assert (first["calls"], again["calls"], again["cache_hits"]) == (4, 0, 4)
        assert all(s.detail["cached"] for s in store.scores())
        score_judge(store, *judge_stage(srv.url, model="another-judge"))
        assert len(srv.requests("/chat/completions")) == 8
        score_judge(store, *judge_stage(other.url))
        assert len(other.requests("/chat/completions")) == 4
    assert _scores(store)["c2", "candidate"].value == "loss"


def test_unparseable_results_are_not_cached(run_dir: Path) -> None:
    with TestServer(default="no idea") as srv:
        store = make_store(run_dir, [("c1", "one", "two")])
        score_judge(store, *judge_stage(srv.url, judge_retries=0))
        score_judge(store, *judge_stage(srv.url, judge_retries=0))
        assert len(srv.requests("/chat/completions")) == 4


def test_no_judged_cases_calls_and_replaces_nothing(run_dir: Path) -> None:
    with TestServer(default="[[A]]") as srv:
        store = make_store(run_dir, [("c1", "one", "two")], judge={})
        store.replace_scores([])
        assert score_judge(store, *judge_stage(srv.url))["calls"] == 0
        assert srv.requests("/chat/completions") == []
    assert list(store.scores()) == []


def test_without_a_judge_target_judged_cases_are_skipped_with_a_warning(run_dir: Path, capsys) -> None:
    from qualitycheck.verdict._judge_figures import judge_summary

    store = make_store(run_dir, [("c1", "one", "two")])
    assert score_judge(store, None)["calls"] == 0
    assert {(s.target, s.status) for s in store.scores()} == {("baseline", "skipped"), ("candidate", "skipped")}
    assert "ask for a judge but no judge endpoint configured" in capsys.readouterr().err
    assert judge_summary(store) == {}
