from __future__ import annotations

from pathlib import Path

from qualitycheck.judge._judge import score_judge
from qualitycheck.testserver import TestServer
from qualitycheck.verdict._judge_figures import judge_summary

from .conftest import blocks, judge_stage, make_store, prefer


def grade_by_length(body):
    """Grade = number of words, capped at 10: deterministic per answer."""
    reply = blocks(body)["reply"]
    return f"Looks fine. Grade: [[{min(10, len(reply.split()))}]]"


def test_rubric_grades_each_answer_alone_and_reports_the_delta(run_dir: Path) -> None:
    pairs = [
        ("c1", "one two three four five", "one two"),  # 5 → 2: loss
        ("c2", "one two", "one two three four five six"),  # 2 → 6: win
        ("c3", "a b c d", "a b c d e"),  # 4 → 5: within tie margin
        ("c4", "same", "same"),
    ]  # identical: delta 0, no call
    with TestServer(default=grade_by_length) as srv:
        store = make_store(run_dir, pairs, judge={"mode": "rubric", "rubric": "Be thorough."})
        score_judge(store, *judge_stage(srv.url))
        reqs = srv.requests("/chat/completions")
    assert len(reqs) == 6
    assert all("reply A" not in blocks(r["body"]) and "Be thorough." in r["body"]["messages"][-1]["content"] for r in reqs)
    s = {x.case_id: x for x in store.scores() if x.target == "candidate"}
    assert (s["c1"].value, s["c1"].status) == ("loss", "fail")
    assert s["c1"].detail["rubric_scores"] == {"baseline": 5, "candidate": 2} and s["c1"].detail["rubric_delta"] == -3
    assert s["c2"].value == "win" and s["c3"].value == "tie"
    summ = judge_summary(store)["summaries"]
    assert summ["rubric_delta_mean"] == (-3 + 4 + 1 + 0) / 4
    lo, hi = summ["rubric_delta_ci"]
    assert lo <= summ["rubric_delta_mean"] <= hi
    assert judge_summary(store)["summaries"]["rubric_delta_ci"] == [lo, hi]  # seeded: reproducible
    assert summ["position_consistency_rate"] is None


def test_reference_judge_shows_the_reference(run_dir: Path) -> None:
    with TestServer(default=prefer("42")) as srv:
        store = make_store(run_dir, [("m1", "The answer is 41.", "The answer is 42.")], judge={"mode": "reference", "reference": "42"})
        score_judge(store, *judge_stage(srv.url))
        reqs = srv.requests("/chat/completions")
    assert len(reqs) == 2 and all(blocks(r["body"])["reference answer"] == "42" for r in reqs)
    assert next(x for x in store.scores() if x.target == "candidate").value == "win"


def test_summary_counts_per_category(tmp_path: Path) -> None:
    def judge(body):
        b = blocks(body)
        if "flip" in b["reply A"] + b["reply B"]:
            return "[[A]]"
        if "garbled" in b["reply A"] + b["reply B"]:
            return "cannot tell"
        return prefer("GOOD")(body)

    pairs = [
        ("w", "meh", "GOOD"),
        ("l1", "GOOD", "meh"),
        ("l2", "GOOD", "bad"),
        ("t", "flip 1", "flip 2"),
        ("e", "garbled", "garbled!"),
        ("i", "same", "same"),
        ("n", "x", "y"),
    ]
    with TestServer(default=judge) as srv:
        store = make_store(tmp_path / "run", pairs, errors={"n:candidate": "x"})
        score_judge(store, *judge_stage(srv.url, judge_retries=0))
    summ = judge_summary(store)["summaries"]
    assert {k: summ[k] for k in ("wins", "losses", "ties", "judge_errors", "judged", "skipped_identical")} == {
        "wins": 1,
        "losses": 2,
        "ties": 1,
        "judge_errors": 1,
        "judged": 5,
        "skipped_identical": 1,
    }
    assert summ["position_consistency_rate"] == 3 / 4
    assert summ["lost_cases"] == ["l1", "l2"] and summ["won_cases"] == ["w"]
    assert summ["rubric_delta_mean"] is None and summ["rubric_delta_ci"] is None
    assert summ["no_answer"] == 1 and summ["flagged_injection"] == 0
