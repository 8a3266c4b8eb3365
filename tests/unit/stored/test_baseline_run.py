"""`run --baseline-run DIR`: the baseline's answers from a stored run, only the candidate asked, every refusal named.

Each test builds its stored run as a live run on the test server (preflight
on: the stored run must keep its baseline's profile), then runs against it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from qualitycheck.cli._main import main
from qualitycheck.core._records import StoredAnswers
from qualitycheck.core._store import RunStore
from qualitycheck.testserver import TestServer
from tests.helpers import qa_cases, run_argv, write_suite

pytest_plugins = ["pytester"]

MODEL = "test-model"
ANSWER = "The answer is 42."


def live_run(b: TestServer, c: TestServer, suite: Path, out: Path, *extra: str) -> int:
    return main(run_argv(b.url, c.url, suite, out, *extra, model=MODEL, preflight=True))


def stored_run(stored: Path, c: TestServer, suite: Path, out: Path, *extra: str, live: TestServer | None = None) -> int:
    argv = ["run", "--baseline-run", str(stored), "--candidate", c.url, "--model", MODEL, "--suite", str(suite), "--out", str(out)]
    return main([*argv, *(["--baseline", live.url] if live is not None else []), *extra])


def summary(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "summary.json").read_text())


def findings(folder: Path) -> dict[str, Any]:
    """What a run concluded: the verdict, each category's verdict and each check's cases, each guardrail's outcome."""
    s = summary(folder)
    return {
        "verdict": s["verdict"],
        "categories": {
            cat: {
                "verdict": c["verdict"],
                "reason": c["verdict_reason"],
                "checks": {
                    n: {
                        k: ch.get(k)
                        for k in ("regressions", "tolerated", "improvements", "flaky", "baseline_pass_rate", "candidate_pass_rate")
                    }
                    | {"sampled": (ch.get("sampled") or {}).get("decision")}
                    for n, ch in c["checks"].items()
                },
            }
            for cat, c in s["categories"].items()
        },
        "guardrails": [(g["name"], g["route"], g["passed"], g["observed"]) for g in s["guardrails"]],
        "floor": {k: s["noise_floor"][k] for k in ("source", "cases", "pairs", "disagreements")},
        "sampling": [(r["samples_per_case"], r["cases"], r["categories"]) for r in (s.get("sampling") or {}).get("rounds", [])],
    }


def suite_of(tmp_path: Path) -> Path:
    """Greedy cases with a reference-free identity check, a format check, and sampled cases checked by their content."""
    return write_suite(
        tmp_path / "s.jsonl",
        qa_cases(10, checks={"exact": True})
        + qa_cases(4, "json", checks={"contains": "42"})
        + qa_cases(8, "gen", params={"temperature": 0.7}, checks={"contains": "42"}),
    )


def test_a_baseline_run_asks_the_baseline_nothing_and_reaches_the_live_runs_findings(tmp_path: Path) -> None:
    suite = suite_of(tmp_path)
    answers = {"qa 3?": "changed", "json 1?": "no number here"}
    with TestServer(default=ANSWER) as b, TestServer(default=ANSWER, answers=answers) as c:
        assert live_run(b, c, suite, tmp_path / "live") == 1
        before = dict(b.received)
        chats = c.received.get("/v1/chat/completions", 0)
        rc = stored_run(tmp_path / "live", c, suite, tmp_path / "stored")
        assert b.received == before, "the stored baseline was sent nothing at all (no preflight, scrape or generation)"
        asked = c.received["/v1/chat/completions"] - chats
        live_findings, stored_findings = findings(tmp_path / "live"), findings(tmp_path / "stored")
        assert rc == 1
        assert stored_findings == live_findings
        # the candidate answered what the live run asked of it, and nothing more
        with RunStore.open(tmp_path / "live") as store:
            assert asked == store.count_responses()["candidate"]["requests"]
        assert live_findings["categories"]["qa"]["checks"]["exact"]["regressions"] == ["qa-3"]
        assert live_findings["categories"]["json"]["checks"]["contains"]["regressions"] == ["json-1"]
        assert live_findings["floor"]["source"] == "baseline_again" and live_findings["sampling"], "the floor and the rounds were exercised"
        s = summary(tmp_path / "stored")
        assert s["targets"]["baseline"]["url"] == b.url and s["stored"]["baseline"]["folder"] == str(tmp_path / "live")
        assert "stored run" in s["noise_floor"]["note"]
        # every later stage works on the folder unchanged, and a rerun sends the candidate nothing
        for stage in ("gate", "report", "score"):
            assert main([stage, str(tmp_path / "stored")]) == 1
            assert findings(tmp_path / "stored") == live_findings
        chats = c.received["/v1/chat/completions"]
        assert stored_run(tmp_path / "live", c, suite, tmp_path / "stored") == 1
        assert c.received["/v1/chat/completions"] == chats and b.received == before


@pytest.mark.parametrize(("floor", "source"), [("control", "control"), ("repeats", "repeats")])
def test_the_stored_runs_control_or_repeats_are_the_floor_and_the_findings_are_the_live_runs(
    floor: str, source: str, tmp_path: Path
) -> None:
    """A stored run that measured its floor with a control or with repeats gives it whole: its pairs are copied (the
    control's answers, or the baseline's own repeats), and nothing is asked of the baseline or the control."""
    suite = write_suite(tmp_path / "s.jsonl", qa_cases(12, checks={"exact": True}))
    regress = {f"qa {i}?": "changed" for i in range(3)}
    with (
        TestServer(default=ANSWER) as b,
        TestServer(default=ANSWER, answers={"qa 5?": "noise"}) as ctl,
        TestServer(default=ANSWER, answers=regress) as c,
    ):
        live_run(b, c, suite, tmp_path / "live", *(["--control", ctl.url] if floor == "control" else ["--repeats", "2"]))
        asked = (dict(b.received), dict(ctl.received))
        stored_run(tmp_path / "live", c, suite, tmp_path / "stored", *([] if floor == "control" else ["--repeats", "2"]))
        assert (dict(b.received), dict(ctl.received)) == asked, "the stored baseline and control were sent nothing"
    live_findings = findings(tmp_path / "live")
    assert live_findings["floor"]["source"] == source and live_findings["floor"]["pairs"] == 12
    assert findings(tmp_path / "stored") == live_findings
    note = summary(tmp_path / "stored")["stored"]["floor"]
    assert ("the stored run's control" in note) if floor == "control" else ("the stored baseline's own repeats" in note), note


def test_a_rerun_into_the_folder_with_another_stored_baseline_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    suite = write_suite(tmp_path / "s.jsonl", qa_cases(3, checks={"exact": True}))
    with TestServer(default=ANSWER) as b, TestServer(default=ANSWER) as c:
        assert live_run(b, c, suite, tmp_path / "one") == 0
        assert live_run(b, c, suite, tmp_path / "two") == 0
        assert stored_run(tmp_path / "one", c, suite, tmp_path / "new") == 0
        capsys.readouterr()
        assert stored_run(tmp_path / "two", c, suite, tmp_path / "new") == 2
    assert "stored runs answers were taken from differ" in capsys.readouterr().err


@pytest.fixture(scope="module")
def stored_folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path, TestServer]]:
    """One live run to refuse against: its folder, its suite, and its baseline server (still running)."""
    tmp = tmp_path_factory.mktemp("stored")
    suite = write_suite(tmp / "s.jsonl", qa_cases(4, checks={"exact": True}))
    with TestServer(default=ANSWER) as b, TestServer(default=ANSWER) as c:
        assert live_run(b, c, suite, tmp / "live") == 0
        assert live_run(b, c, suite, tmp / "live-without-preflight", "--no-preflight") == 0  # run_argv adds nothing; this does
        yield tmp, suite, b


def _changed_suite(tmp: Path) -> list[str]:
    cases = qa_cases(4, checks={"exact": True})
    cases[2]["messages"][0]["content"] = "another question?"
    return ["--suite", str(write_suite(tmp / "changed.jsonl", cases))]


REFUSALS: dict[str, tuple[dict[str, Any], list[str], str]] = {
    # name: (candidate server settings, extra arguments, what the refusal names)
    "suite": ({}, ["@changed-suite"], "suite fingerprint differs (4 stored cases, 4 in this suite); cases changed: 1 (qa-2)"),
    "request option": ({}, ["--max-tokens", "16"], "request option max_tokens differs: stored None, now 16"),
    "repeats": ({}, ["--repeats", "2"], "repeats differ: stored 1, now 2"),
    "chat template": (
        {"chat_template": "[{role}] {content}\n"},
        [],
        "the candidate's preflight against the stored baseline: tokenize: 4/4 cases",
    ),
    "model weights": (
        {"model": "other"},
        ["--model", "other"],
        "model_root: root differs: baseline '/models/test-model', candidate '/models/other'",
    ),
    "no profile": ({}, ["@no-profile"], "the stored run recorded no preflight profile of its baseline (it ran without preflight"),
    "no preflight": ({}, ["--no-preflight"], "--no-preflight: a stored baseline is compared only with a candidate whose preflight matches"),
    "live baseline": ({}, ["@live-template"], "the live baseline's preflight against the stored baseline: tokenize"),
    "control": ({}, ["--control", "@candidate"], "control: not used with --baseline-run"),
}


@pytest.mark.parametrize("name", list(REFUSALS))
def test_each_mismatch_is_refused_with_its_reason_before_anything_is_generated(
    name: str, stored_folder: tuple[Path, Path, TestServer], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tmp, suite, b = stored_folder
    settings, extra, reason = REFUSALS[name]
    stored = tmp / ("live-without-preflight" if "@no-profile" in extra else "live")
    before = dict(b.received)
    with TestServer(default=ANSWER, **settings) as c, TestServer(default=ANSWER, chat_template="{content}") as odd:
        suite_args = _changed_suite(tmp_path) if "@changed-suite" in extra else ["--suite", str(suite)]
        argv = ["run", "--baseline-run", str(stored), "--candidate", c.url, "--model", MODEL, *suite_args, "--out", str(tmp_path / "new")]
        for arg in extra:
            if arg == "@changed-suite":
                continue
            if arg == "@live-template":
                argv += ["--baseline", odd.url]
            elif arg == "@candidate":
                argv.append(c.url)
            elif arg != "@no-profile":
                argv.append(arg)
        capsys.readouterr()
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert reason in err, err
        assert "/v1/chat/completions" not in c.received and "/v1/chat/completions" not in odd.received, "nothing was generated"
    assert b.received == before, "the stored baseline was asked nothing"
    assert not (tmp_path / "new" / "run.sqlite").exists(), "a refused run leaves no folder to resume"


def test_without_a_live_baseline_a_floor_the_stored_run_cannot_give_leaves_the_route_undecided(tmp_path: Path) -> None:
    """The stored run's candidate diverged nowhere, so its baseline was asked again for nothing: this candidate's
    five regressions have no A/A pairs. Undecided, never passed; a live baseline asked alongside measures the floor."""
    suite = write_suite(tmp_path / "s.jsonl", qa_cases(30, checks={"exact": True}))
    regress = {f"qa {i}?": "changed" for i in range(5)}
    with TestServer(default=ANSWER) as b, TestServer(default=ANSWER) as same, TestServer(default=ANSWER, answers=regress) as c:
        assert live_run(b, same, suite, tmp_path / "live") == 0
        assert stored_run(tmp_path / "live", c, suite, tmp_path / "stored") == 1
        s = summary(tmp_path / "stored")
        qa = next(g for g in s["guardrails"] if g["name"] == "max_quality_regression_cases" and g["route"] == "qa")
        assert qa["passed"] is None and "no noise floor could weigh" in qa["message"]
        assert s["categories"]["qa"]["verdict"] == "inconclusive" and s["verdict"] == "inconclusive"
        assert s["categories"]["qa"]["checks"]["exact"]["tolerated"] == []
        assert s["noise_floor"]["source"] == "none" and "5 of the 5 greedy cases" in s["noise_floor"]["note"]
        assert any(line.startswith("noise floor: not measured") and "undecided, never passed" in line for line in s["not_evaluated"])
        with RunStore.open(tmp_path / "stored") as store:
            rec = store.record(StoredAnswers)
        assert rec is not None and "were not asked again" in rec.floor_missing
        # the same candidate, with a live baseline answering every greedy case alongside it: a measured floor, a failed route
        with TestServer(default=ANSWER) as live:
            assert stored_run(tmp_path / "live", c, suite, tmp_path / "with-live", live=live) == 1
            assert live.received["/v1/chat/completions"] == 30
        s = summary(tmp_path / "with-live")
        assert s["noise_floor"]["source"] == "control" and s["noise_floor"]["pairs"] == 30
        assert s["verdict"] == "fail" and s["categories"]["qa"]["verdict"] == "fail"
        assert s["stored"]["live_baseline"] == live.url


def test_latency_is_gated_only_against_a_live_baseline_on_the_requests_both_answered(tmp_path: Path) -> None:
    """The stored baseline was slow, so comparing with its timings would pass a slower candidate; they were measured at
    another time and load, so without a live baseline TPOT is not evaluated, and with one it is the live one's."""
    suite = write_suite(tmp_path / "s.jsonl", qa_cases(6, checks={"exact": True}))
    config = tmp_path / "qc.yaml"
    config.write_text('speculative_decoding_guardrails:\n  max_tpot_p95_regression: "10%"\n', encoding="utf-8")
    with TestServer(default=ANSWER, itl_s=0.03) as slow, TestServer(default=ANSWER, itl_s=0.01) as c:
        assert live_run(slow, c, suite, tmp_path / "live", "-c", str(config)) == 0
        assert stored_run(tmp_path / "live", c, suite, tmp_path / "stored", "-c", str(config)) == 1
        s = summary(tmp_path / "stored")
        tpot = next(g for g in s["guardrails"] if g["name"] == "max_tpot_p95_regression")
        assert tpot["passed"] is None and "timed by the stored run" in tpot["message"]
        assert s["verdict"] == "inconclusive" and "alongside" not in s["latency"]
        with TestServer(default=ANSWER, itl_s=0.002) as fast:
            assert stored_run(tmp_path / "live", c, suite, tmp_path / "with-live", "-c", str(config), live=fast) == 1
    s = summary(tmp_path / "with-live")
    tpot = next(g for g in s["guardrails"] if g["name"] == "max_tpot_p95_regression")
    assert tpot["passed"] is False and tpot["observed"] > 0.1
    alongside = s["latency"]["alongside"]
    assert alongside["baseline"]["requests"] == alongside["candidate"]["requests"] == 6
    assert alongside["baseline"]["tpot_ms"]["p95"] < 10 < s["latency"]["baseline"]["tpot_ms"]["p95"], (
        "the live baseline's, not the stored one's"
    )
    assert "the live baseline's TPOT" in s["stored"]["latency"]


def test_a_sampled_category_stops_at_the_stored_samples_unless_a_live_baseline_gives_more(tmp_path: Path) -> None:
    """The stored run's candidate was broken, so its sampled category decided after the first round (two samples); a
    faithful candidate needs more rounds than the stored baseline holds."""
    suite = write_suite(tmp_path / "s.jsonl", qa_cases(12, "gen", params={"temperature": 0.7}, checks={"contains": "42"}))
    with TestServer(default=ANSWER) as b, TestServer(default="nope") as broken, TestServer(default=ANSWER) as c:
        assert live_run(b, broken, suite, tmp_path / "live") == 1
        assert [r["samples_per_case"] for r in summary(tmp_path / "live")["sampling"]["rounds"]] == [2]
        assert stored_run(tmp_path / "live", c, suite, tmp_path / "stored") == 1
        assert c.received["/v1/chat/completions"] == 12 * 2, "only the samples the stored baseline can be paired with"
        s = summary(tmp_path / "stored")
        assert s["categories"]["gen"]["verdict"] == "inconclusive"
        assert s["categories"]["gen"]["checks"]["contains"]["sampled"]["decision"] == "undecided"
        assert s["stored"]["short"] == {"gen": 2}
        assert any("sampled category gen: the stored baseline holds 2 sample(s) per case" in line for line in s["not_evaluated"])
        with TestServer(default=ANSWER) as live:
            assert stored_run(tmp_path / "live", c, suite, tmp_path / "with-live", live=live) == 0
            asked_live = live.received["/v1/chat/completions"]
    s = summary(tmp_path / "with-live")
    rounds = [r["samples_per_case"] for r in s["sampling"]["rounds"]]
    assert rounds[0] == 2 and len(rounds) > 1 and "short" not in s["stored"]
    assert asked_live == 12 * (rounds[-1] - 2), "the live baseline gave exactly the samples beyond the stored ones"
    assert s["categories"]["gen"]["verdict"] == "pass"


def test_the_pytest_gate_takes_a_stored_baseline_too(tmp_path: Path, pytester: pytest.Pytester) -> None:
    suite = write_suite(tmp_path / "s.jsonl", qa_cases(3, checks={"exact": True}))
    with TestServer(default=ANSWER) as b, TestServer(default=ANSWER) as c:
        assert live_run(b, c, suite, tmp_path / "live") == 0
        before = dict(b.received)
        argv = ["--qc-baseline-run", str(tmp_path / "live"), "--qc-candidate", c.url, "--qc-model", MODEL]
        res = pytester.runpytest(*argv, "--qc-suite", str(suite), "--qc-out", str(tmp_path / "gate"))
        assert b.received == before
    assert res.ret == 0, res.stdout.str()
    assert summary(tmp_path / "gate")["stored"]["baseline"]["folder"] == str(tmp_path / "live")
