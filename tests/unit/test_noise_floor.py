"""The default noise floor: the baseline is asked again where the candidate's answer differs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from qualitycheck.cli import main
from qualitycheck.testserver import TestServer
from tests.helpers import qa_cases, run_argv, write_suite


def _run(b: TestServer, c: TestServer, suite: Path, out: Path, *flags: str) -> int:
    return main(run_argv(b.url, c.url, suite, out, *flags))


def _asked(srv: TestServer) -> list[str]:
    return [r["body"]["messages"][0]["content"] for r in srv.requests("/v1/chat/completions")]


def test_only_divergent_cases_are_asked_again_and_the_cost_is_stated(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    suite = write_suite(tmp_path / "s.jsonl", qa_cases(10, checks={"contains": "42"}))
    differ = {f"question qa {i}?": "The answer is 42, as computed." for i in (2, 5, 7)}
    out = tmp_path / "run"
    with TestServer(default="The answer is 42.") as b, TestServer(default="The answer is 42.", answers=differ) as c:
        assert _run(b, c, suite, out) == 0
        asked = _asked(b)
    assert len(asked) == 13 and sorted(asked[10:]) == sorted(differ)
    assert (
        "asking the baseline again for the 3 of 10 cases whose candidate answer differs (+3 requests, 15% of the run's"
        in capsys.readouterr().err
    )
    summary = json.loads((out / "summary.json").read_text())
    assert summary["noise_floor"] == {
        "source": "baseline_again",
        "cases": 3,
        "disagreement_rate": 0.0,
        "requests": 3,
        "note": "the baseline was asked again for the 3 of 10 cases whose candidate answer differed; "
        "0.0% of those answers differed from its first",
        "pairs": 3,
        "disagreements": 0,
    }
    assert not any("noise floor" in line for line in summary["not_evaluated"])
    assert summary["targets"].keys() == {"baseline", "candidate"}


def test_a_baseline_that_disagrees_with_itself_makes_the_flip_flaky(tmp_path: Path) -> None:
    """Without the floor this flip fails the run; asked again, the baseline fails the case itself."""
    suite = write_suite(tmp_path / "s.jsonl", qa_cases(6, checks={"contains": "42"}))
    calls: dict[str, int] = {}

    def unstable(body: dict[str, Any]) -> str:
        prompt = body["messages"][0]["content"]
        calls[prompt] = calls.get(prompt, 0) + 1
        if prompt == "question qa 3?" and calls[prompt] > 1:
            return "It is 41."
        return "The answer is 42."

    with TestServer(default=unstable) as b, TestServer(default="The answer is 42.", answers={"question qa 3?": "It is 41."}) as c:
        assert _run(b, c, suite, tmp_path / "floor") == 0
        calls.clear()
        assert _run(b, c, suite, tmp_path / "nofloor", "--no-noise-floor") == 1
    floor = json.loads((tmp_path / "floor" / "summary.json").read_text())
    contains = floor["categories"]["qa"]["checks"]["contains"]
    assert contains["regressions"] == [] and contains["flaky"] == ["qa-3"] and contains["flaky_regressions"] == ["qa-3"]
    assert contains["noise_floor"]["measured_by"] == "baseline_again"
    assert floor["noise_floor"]["source"] == "baseline_again" and floor["noise_floor"]["disagreement_rate"] == 1.0
    bare = json.loads((tmp_path / "nofloor" / "summary.json").read_text())
    assert bare["categories"]["qa"]["checks"]["contains"]["regressions"] == ["qa-3"]
    assert bare["noise_floor"]["source"] == "none"
    assert any(line.startswith("noise floor: not measured") for line in bare["not_evaluated"])


def test_identical_answers_cost_nothing(tmp_path: Path) -> None:
    suite = write_suite(tmp_path / "s.jsonl", qa_cases(5, checks={"contains": "42"}))
    with TestServer(default="The answer is 42.") as b, TestServer(default="The answer is 42.") as c:
        assert _run(b, c, suite, tmp_path / "run") == 0
        assert len(b.requests("/v1/chat/completions")) == 5
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["noise_floor"]["source"] == "baseline_again" and summary["noise_floor"]["cases"] == 0


def test_a_control_or_repeats_measure_the_floor_instead(tmp_path: Path) -> None:
    suite = write_suite(tmp_path / "s.jsonl", qa_cases(4, checks={"contains": "42"}))
    with (
        TestServer(default="The answer is 42.") as b,
        TestServer(default="The answer is 42!") as c,
        TestServer(default="The answer is 42.") as k,
    ):
        assert (
            main(
                [
                    "run",
                    "--baseline",
                    b.url,
                    "--candidate",
                    c.url,
                    "--control",
                    k.url,
                    "--model",
                    "test-model",
                    "--suite",
                    str(suite),
                    "--out",
                    str(tmp_path / "ctl"),
                    "--no-preflight",
                ]
            )
            == 0
        )
        assert len(b.requests("/v1/chat/completions")) == 4
        assert _run(b, c, suite, tmp_path / "rep", "--repeats", "2") == 0
    assert json.loads((tmp_path / "ctl" / "summary.json").read_text())["noise_floor"]["source"] == "control"
    assert json.loads((tmp_path / "rep" / "summary.json").read_text())["noise_floor"]["source"] == "repeats"
