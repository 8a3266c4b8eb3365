"""`compare RUN_A RUN_B --out DIR`: RUN_A's candidate as the baseline side, RUN_B's as the candidate, nothing asked."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from qualitycheck.cli._main import main
from qualitycheck.testserver import TestServer
from tests.helpers import qa_cases, write_suite
from tests.unit.stored.test_baseline_run import ANSWER, findings, live_run, summary

REGRESS = {f"qa {i}?": "changed" for i in range(5)}


def received(*servers: TestServer) -> list[dict[str, int]]:
    return [dict(s.received) for s in servers]


def test_compare_gates_two_stored_candidates_asks_nothing_and_says_what_it_cannot_measure(tmp_path: Path) -> None:
    suite = write_suite(tmp_path / "s.jsonl", qa_cases(30, checks={"exact": True}))
    config = tmp_path / "qc.yaml"
    config.write_text(
        'speculative_decoding_guardrails:\n  max_tpot_p95_regression: "10%"\n  max_quality_regression_cases: 0\n', encoding="utf-8"
    )
    with TestServer(default=ANSWER) as b, TestServer(default=ANSWER) as a_cand, TestServer(default=ANSWER, answers=REGRESS) as b_cand:
        assert live_run(b, a_cand, suite, tmp_path / "a") == 0
        assert live_run(b, b_cand, suite, tmp_path / "b") == 1
        before = received(b, a_cand, b_cand)
        assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "ab"), "-c", str(config)]) == 1
        assert received(b, a_cand, b_cand) == before, "no target was asked anything"
    s = summary(tmp_path / "ab")
    assert s["targets"]["baseline"]["url"] == a_cand.url and s["targets"]["candidate"]["url"] == b_cand.url
    assert s["categories"]["qa"]["checks"]["exact"]["regressions"] == [f"qa-{i}" for i in range(5)]
    # the baseline side (a candidate) was never asked twice: no floor, so the route is undecided rather than failed
    quality = next(g for g in s["guardrails"] if g["name"] == "max_quality_regression_cases")
    assert quality["passed"] is None and "never asked twice" in quality["message"]
    assert s["noise_floor"]["source"] == "none" and "never asked twice" in s["stored"]["floor"]
    tpot = next(g for g in s["guardrails"] if g["name"] == "max_tpot_p95_regression")
    assert tpot["passed"] is None and "timed in different runs" in tpot["message"]
    assert s["stored"]["baseline"] == {"folder": str(tmp_path / "a"), "side": "candidate", "url": a_cand.url, "model": "test-model"}
    assert s["stored"]["candidate"]["folder"] == str(tmp_path / "b")
    assert s["likelihood"]["evaluated"] is False and "comparison of stored runs" in s["likelihood"]["reason"]
    assert s["preflight"]["ok"] is True and s["verdict"] == "inconclusive"
    # a run folder like any other: the stages redo from it
    assert main(["gate", str(tmp_path / "ab")]) == 1
    assert summary(tmp_path / "ab")["categories"] == s["categories"]


def test_with_repeats_the_comparison_reaches_the_findings_of_a_live_run_against_a_baseline_like_run_as_candidate(tmp_path: Path) -> None:
    """RUN_A's candidate answers as the baseline does, so gating RUN_B's candidate against it is gating it against the
    baseline: the same statistics give the same findings as RUN_B itself, floor (the repeats) included."""
    suite = write_suite(tmp_path / "s.jsonl", qa_cases(30, checks={"exact": True}) + qa_cases(6, "json", checks={"contains": "42"}))
    with TestServer(default=ANSWER) as b, TestServer(default=ANSWER) as like_b, TestServer(default=ANSWER, answers=REGRESS) as c:
        assert live_run(b, like_b, suite, tmp_path / "a", "--repeats", "2") == 0
        assert live_run(b, c, suite, tmp_path / "b", "--repeats", "2") == 1
        assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "ab")]) == 1
        # a config of guardrails only changes the guardrails, never the stored runs' design (their repeats, their floor)
        guard = tmp_path / "guard.yaml"
        guard.write_text("speculative_decoding_guardrails:\n  max_quality_regression_cases: 0\n", encoding="utf-8")
        assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "abc"), "-c", str(guard)]) == 1
    assert findings(tmp_path / "ab") == findings(tmp_path / "b")
    given = findings(tmp_path / "abc")  # its own guardrails (no error rate), the same statistics and quality decisions
    assert {k: v for k, v in given.items() if k != "guardrails"} == {k: v for k, v in findings(tmp_path / "b").items() if k != "guardrails"}
    quality = [g for g in findings(tmp_path / "b")["guardrails"] if g[0] == "max_quality_regression_cases"]
    assert [g for g in given["guardrails"] if g[0] == "max_quality_regression_cases"] == quality
    for out in ("ab", "abc"):
        s = summary(tmp_path / out)
        assert s["repeats"] == 2 and s["noise_floor"]["source"] == "repeats" and s["noise_floor"]["pairs"] == 36, out
        assert s["verdict"] == "fail" and "repeats of" in s["stored"]["floor"], out


def test_a_sampled_category_is_tested_at_the_samples_both_runs_hold_and_stays_undecided_there(tmp_path: Path) -> None:
    suite = write_suite(tmp_path / "s.jsonl", qa_cases(12, "gen", params={"temperature": 0.7}, checks={"contains": "42"}))
    with TestServer(default="nope") as broken, TestServer(default=ANSWER) as b, TestServer(default=ANSWER) as c:
        assert live_run(broken, c, suite, tmp_path / "a") == 0  # the baseline fails everything: decided at the first look
        assert live_run(b, c, suite, tmp_path / "b") == 0  # faithful: more rounds
        rounds = [[r["samples_per_case"] for r in summary(tmp_path / x)["sampling"]["rounds"]] for x in ("a", "b")]
        assert rounds[0] == [2] and len(rounds[1]) > 1
        assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "ab")]) == 1
    s = summary(tmp_path / "ab")
    assert s["stored"]["short"] == {"gen": 2}
    assert s["categories"]["gen"]["checks"]["contains"]["sampled"]["samples_at_decision"] == 2
    assert s["categories"]["gen"]["verdict"] == "inconclusive"


def _runs(tmp_path: Path, name: str) -> tuple[Path, Path]:
    """Two stored runs that differ in the way `name` says (made fresh: each refusal its own pair)."""
    suite = write_suite(tmp_path / "s.jsonl", qa_cases(4, checks={"exact": True}))
    other: dict[str, Any] = {"chat template": {"chat_template": "[{role}] {content}\n"}}.get(name, {})
    extra = {"request option": ["--max-tokens", "16"], "repeats": ["--repeats", "2"], "no profile": ["--no-preflight"]}.get(name, [])
    if name == "suite":
        suite_b = write_suite(tmp_path / "other.jsonl", qa_cases(5, checks={"exact": True}))
    else:
        suite_b = suite
    with TestServer(default=ANSWER) as b, TestServer(default=ANSWER) as ca, TestServer(default=ANSWER, **other) as cb:
        assert live_run(b, ca, suite, tmp_path / "a") in (0, 1)
        assert live_run(b, cb, suite_b, tmp_path / "b", *extra) in (0, 1)
    return tmp_path / "a", tmp_path / "b"


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("suite", "suite fingerprint differs (4 stored cases, 5 in"),
        ("request option", "request option max_tokens differs: stored None,"),
        ("repeats", "repeats differ: stored 1,"),
        ("chat template", "the two candidates' preflight profiles: tokenize: 4/4 cases tokenize differently"),
        ("no profile", "the stored run recorded no preflight profile of its candidate"),
    ],
)
def test_runs_whose_answers_cannot_be_compared_are_refused_with_the_reason(
    name: str, reason: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_a, run_b = _runs(tmp_path, name)
    capsys.readouterr()
    assert main(["compare", str(run_a), str(run_b), "--out", str(tmp_path / "ab")]) == 2
    err = capsys.readouterr().err
    assert reason in err, err
    assert not (tmp_path / "ab" / "run.sqlite").exists()


def test_under_github_actions_compare_writes_the_signoff_and_points_each_counted_regression_at_its_suite_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """compare gates as `gate` does, so CI sees it as it sees a run: the step summary and one annotation per case."""
    suite = write_suite(tmp_path / "suites" / "s.jsonl", qa_cases(4, checks={"exact": True}))
    with TestServer(default=ANSWER) as b, TestServer(default=ANSWER) as ca, TestServer(default=ANSWER, answers={"qa 2?": "x"}) as cb:
        assert live_run(b, ca, suite, tmp_path / "a", "--no-noise-floor") == 0
        assert live_run(b, cb, suite, tmp_path / "b", "--no-noise-floor") == 1
    step_summary = tmp_path / "step_summary.md"
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step_summary))
    monkeypatch.setenv("GITHUB_WORKSPACE", str(tmp_path))
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "ab")]) == 1
    errors = [line for line in capsys.readouterr().out.splitlines() if line.startswith("::")]
    assert len(errors) == 1 and errors[0].startswith("::error file=suites/s.jsonl,line=3,title=qualitycheck%3A qa-2 regressed (exact)::")
    assert step_summary.read_text(encoding="utf-8") == (tmp_path / "ab" / "signoff.md").read_text(encoding="utf-8").rstrip("\n") + "\n\n"


def test_a_comparison_is_written_to_a_folder_of_its_own(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    suite = write_suite(tmp_path / "s.jsonl", qa_cases(2, checks={"exact": True}))
    with TestServer(default=ANSWER) as b, TestServer(default=ANSWER) as c:
        assert live_run(b, c, suite, tmp_path / "a") == 0
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "a"), "--out", str(tmp_path / "ab")]) == 2
    assert "are the same run" in capsys.readouterr().err
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "a"), "--out", str(tmp_path / "a")]) == 2
    assert "is one of the compared runs" in capsys.readouterr().err
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b")]) == 2
    assert "--out: required" in capsys.readouterr().err
    assert json.loads((tmp_path / "a" / "summary.json").read_text())["verdict"] == "pass"
