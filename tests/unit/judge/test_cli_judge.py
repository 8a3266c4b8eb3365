"""`qualitycheck run ... --judge URL --judge-model M` end to end on test servers."""

from __future__ import annotations

import json
from pathlib import Path

from qualitycheck.cli._main import main
from qualitycheck.testserver import TestServer
from tests.helpers import qa_cases, run_argv, write_suite

from .conftest import prefer


def test_run_with_a_judge_reports_judge_per_judged_category(tmp_path: Path) -> None:
    cases = (
        qa_cases(3, "summaries", checks={"judge": "pairwise"})
        + qa_cases(2, "explain", checks={"judge": {"mode": "rubric", "rubric": "Complete and correct."}})
        + qa_cases(2, "plain")
    )
    suite = write_suite(tmp_path / "s.jsonl", cases)
    out = tmp_path / "run"

    def judge(body):
        if "Grade:" in body["messages"][-1]["content"]:
            return "Grade: [[8]]"
        return prefer("better")(body)

    candidate_answers = {"summaries 1?": "a better summary", "summaries 2?": "worse", "explain 0?": "other words"}
    with (
        TestServer(default="same answer", answers={"summaries 2?": "the better one"}) as b,
        TestServer(default="same answer", answers=candidate_answers) as c,
        TestServer(default=judge, model="J") as j,
    ):
        argv = run_argv(b.url, c.url, suite, out, "--judge", j.url, "--judge-model", "J", model="m")
        main(argv)
        sent = len(j.requests("/chat/completions"))
        assert sent == 2 * 2 + 2  # two divergent pairwise cases in both orders, one rubric pair
        assert {r["body"]["model"] for r in j.requests("/chat/completions")} == {"J"}
        assert main(["score", str(out)]) in (0, 1)
        assert len(j.requests("/chat/completions")) == sent  # re-scoring is served by the judge cache
    summary = json.loads((out / "summary.json").read_text())
    cats = summary["categories"]
    judged = cats["summaries"]["checks"]["judge"]
    assert "judge" in cats["explain"]["checks"] and "judge" not in cats["plain"]["checks"]
    assert judged["regressions"] == ["summaries-2"] and judged["lost_cases"] == ["summaries-2"]
    assert judged["won_cases"] == ["summaries-1"]
    for key in ("wins", "losses", "ties", "position_consistency_rate", "judge_errors", "judged", "skipped_identical"):
        assert key in judged, key
    assert (judged["wins"], judged["losses"], judged["skipped_identical"]) == (1, 1, 1)
    assert cats["explain"]["checks"]["judge"]["rubric_delta_mean"] == 0


def test_the_configs_judges_dir_reaches_the_judge_stage(tmp_path: Path) -> None:
    """A judge defined in the config's `judges_dir` is found when the run is judged, not only when its suite is checked."""
    judges = tmp_path / "judges"
    judges.mkdir()
    (judges / "terse.yaml").write_text(
        "kind: pairwise\nprompt: 'TERSE {answer_a} vs {answer_b}'\nverdict: {pattern: 'WINNER=(1|2|0)', map: {'1': a, '2': b, '0': tie}}\n",
        encoding="utf-8",
    )
    config = tmp_path / "qualitycheck.yaml"
    config.write_text(f"judges_dir: {judges}\n", encoding="utf-8")
    suite = write_suite(tmp_path / "s.jsonl", qa_cases(2, "summaries", checks={"judge": "terse"}))
    out = tmp_path / "run"
    with (
        TestServer(default="one answer") as b,
        TestServer(default="another answer") as c,
        TestServer(default="WINNER=0", model="J") as j,
    ):
        main(run_argv(b.url, c.url, suite, out, "-c", str(config), "--judge", j.url, "--judge-model", "J", model="m"))
        prompts = [r["body"]["messages"][-1]["content"] for r in j.requests("/chat/completions")]
    assert len(prompts) == 2 * 2 and all(p.startswith("TERSE ") for p in prompts)  # both cases, both orders
    judged = json.loads((out / "summary.json").read_text())["categories"]["summaries"]["checks"]["judge"]
    assert (judged["ties"], judged["judge_errors"]) == (2, 0)
