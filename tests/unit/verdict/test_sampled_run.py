"""The verdict on sampled traffic and small routes, through `qualitycheck run` against scripted servers.

Each test pins one rule of the verdict: sampled cases compared as
distributions in rounds, identity checks left out for them, the greedy
floor pooled over the run, and no pass from lack of evidence.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from qualitycheck.cli import main
from qualitycheck.core._records import SamplingRecord, SamplingRoundRecord
from qualitycheck.core._store import RunStore
from qualitycheck.testserver import TestServer
from tests.helpers import run_argv, write_suite

VALID, BROKEN = '{"name": "Ada", "age": 36}', '{"name latitudes":10.'


def _sampled_cases(n: int, category: str = "json", **params: Any) -> list[dict[str, Any]]:
    return [
        {
            "id": f"{category}-{i}",
            "category": category,
            "messages": [{"role": "user", "content": f"{category} record {i} as JSON"}],
            "params": {"temperature": 0.9, **params},
            "checks": {"json": {}},
        }
        for i in range(n)
    ]


def _sampler(valid_share: Callable[[int], float], salt: int = 0) -> Callable[[dict[str, Any]], str]:
    """Answers a case's k-th request valid or broken by a fixed pattern with the case's share of valid answers.

    A function of (case, how often it was asked) only, so concurrency never
    changes which outcomes a look sees: the run is reproducible.
    """
    asked: dict[str, int] = {}
    lock = threading.Lock()

    def answer(body: dict[str, Any]) -> str:
        prompt = body["messages"][0]["content"]
        i = int(prompt.split()[2])
        with lock:
            k = asked[prompt] = asked.get(prompt, 0) + 1
        # a low-discrepancy sequence: the first n answers hold about share × n valid ones
        return VALID if ((k + salt) * 0.6180339887 + i * 0.37) % 1.0 < valid_share(i) else BROKEN

    return answer


def _spread(i: int) -> float:
    return 0.5 + 0.45 * (i % 10) / 9


def _run(b: TestServer, c: TestServer, suite: Path, out: Path, *flags: str) -> dict[str, Any]:
    rc = main(run_argv(b.url, c.url, suite, out, *flags))
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    summary["_rc"] = rc
    return summary


def test_a_sampled_drop_fails_its_route_in_a_default_run_although_every_case_is_flaky(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    suite = write_suite(tmp_path / "s.jsonl", _sampled_cases(30))
    with TestServer(default=_sampler(_spread)) as b, TestServer(default=_sampler(lambda i: _spread(i) - 0.45)) as c:
        s = _run(b, c, suite, tmp_path / "run")
    assert s["_rc"] == 1 and s["verdict"] == "fail"
    cat = s["categories"]["json"]
    cell = cat["checks"]["json_parse"]
    assert cat["verdict"] == "fail" and cat["sampled_cases"] == 30
    assert len(cell["flaky"]) >= 15, "the baseline disagrees with itself on half the cases or more, as at temperature 0.9"
    sp = cell["sampled"]
    assert sp["decision"] == "drop" and sp["p_value_holm"] < 0.05 and sp["delta"] < -0.3
    assert sp["largest_drops"] and set(cell["regressions"]) >= {d["case_id"] for d in sp["largest_drops"]}
    (g,) = [g for g in s["guardrails"] if g["name"] == "max_quality_regression_cases"]
    assert g["passed"] is False and g["route"] == "json"
    for words in ("json/json_parse", "→", "one-sided p", "largest drops", "sampled case(s)"):
        assert words in g["message"]
    assert s["fallback"]["routes"] == ["json"]
    # decided without --repeats, in rounds recorded and printed
    assert s["repeats"] == 1 and s["sampling"]["mode"] == "adaptive" and s["sampling"]["rounds"][0]["samples_per_case"] == 2
    assert len(s["sampling"]["rounds"]) <= 2, "an obvious drop needs no more than two rounds"
    # a sampled baseline's samples differ by design: they are no measure of the greedy floor
    assert s["noise_floor"]["cases"] == 0 and s["noise_floor"]["source"] != "repeats", s["noise_floor"]
    assert "sampling" in capsys.readouterr().err


def test_a_faithful_sampled_candidate_passes_with_what_the_run_can_promise(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    suite = write_suite(tmp_path / "s.jsonl", _sampled_cases(40))
    with TestServer(default=_sampler(_spread)) as b, TestServer(default=_sampler(_spread, salt=1)) as c:
        s = _run(b, c, suite, tmp_path / "run")
    cat = s["categories"]["json"]
    sp = cat["checks"]["json_parse"]["sampled"]
    assert sp["decision"] == "no_drop", cat["verdict_reason"]
    assert s["verdict"] == "pass" and s["_rc"] == 0 and cat["checks"]["json_parse"]["regressions"] == []
    assert cat["mde"] == 0.1 and "detects a pass-rate drop of 10 points or more" in cat["power"]
    rounds = s["sampling"]["rounds"]
    assert len(rounds) >= 2 and rounds[-1]["samples_per_case"] <= 10, "more rounds where it is close, within the budget"
    assert s["sampling"]["mean_samples_per_case"] == rounds[-1]["samples_per_case"]
    err = capsys.readouterr().err
    assert "sampling round 2 of up to 5: 40 of 40 sampled cases, 2 more samples per side (+160 requests" in err


def test_identity_checks_do_not_apply_to_sampled_cases(tmp_path: Path) -> None:
    cases = _sampled_cases(6)
    for c in cases:
        c["checks"]["exact"] = True
    suite = write_suite(tmp_path / "s.jsonl", cases)
    with TestServer(default=_sampler(lambda i: 1.0)) as b, TestServer(default=_sampler(lambda i: 1.0, salt=1)) as c:
        s = _run(b, c, suite, tmp_path / "run")
    exact = s["categories"]["json"]["checks"]["exact"]
    assert exact["n"] == 0 and exact["skipped_as_sampled"] == 6 and exact["regressions"] == []
    with RunStore.open(tmp_path / "run") as store:
        details = {sc.detail.get("reason") for sc in store.scores() if sc.check == "exact"}
        statuses = {sc.status for sc in store.scores() if sc.check == "exact"}
    assert statuses == {"skipped"} and len(details) == 1 and "does not apply to a sampled case" in details.pop()


def test_the_judge_does_not_apply_to_sampled_cases(tmp_path: Path) -> None:
    """The judge weighs the candidate against the baseline, which scores `pass` by construction: one-sided between samples.

    Here the judge calls every differing pair a loss for the candidate; a
    faithful candidate would be failed if the judge's pass rates were
    compared. The judge is skipped on sampled cases, with its reason, and
    never called for them.
    """
    cases = _sampled_cases(12)
    for c in cases:
        c["checks"]["judge"] = {"mode": "pairwise"}
    suite = write_suite(tmp_path / "s.jsonl", cases)
    calls: list[Any] = []

    def judge(body: dict[str, Any]) -> str:
        calls.append(body)
        return "the first reply is better. [[A]]"

    with (
        TestServer(default=_sampler(_spread)) as b,
        TestServer(default=_sampler(_spread, salt=1)) as c,
        TestServer(default=judge) as j,
    ):
        s = _run(b, c, suite, tmp_path / "run", "--judge", j.url)
    cell = s["categories"]["json"]["checks"]["judge"]
    assert cell["n"] == 0 and cell["skipped_as_sampled"] == 12 and cell["regressions"] == [], cell
    assert calls == [], "no judge call for a sampled case"
    assert s["categories"]["json"]["verdict"] != "fail", s["categories"]["json"]["verdict_reason"]
    with RunStore.open(tmp_path / "run") as store:
        judged = [sc for sc in store.scores() if sc.check == "judge"]
    assert judged and {sc.status for sc in judged} == {"skipped"}
    assert all("judge's comparison" in sc.detail["reason"] for sc in judged)


def test_repeats_fix_the_number_of_samples(tmp_path: Path) -> None:
    suite = write_suite(tmp_path / "s.jsonl", _sampled_cases(5))
    with TestServer(default=_sampler(_spread)) as b, TestServer(default=_sampler(_spread)) as c:
        s = _run(b, c, suite, tmp_path / "run", "--repeats", "3")
        sent = len(b.requests("/chat/completions"))
    assert sent == 15 and s["repeats"] == 3
    assert s["sampling"]["mode"] == "fixed" and [r["samples_per_case"] for r in s["sampling"]["rounds"]] == [3]


def test_the_control_answers_greedy_cases_only(tmp_path: Path) -> None:
    """The control measures the greedy floor; a sampled case's own samples are its comparison, so it is not sent there."""
    greedy = {"id": "g", "category": "qa", "messages": [{"role": "user", "content": "say 42"}], "checks": {"contains": "42"}}
    suite = write_suite(tmp_path / "s.jsonl", [*_sampled_cases(3), greedy])
    says = {"say 42": "42"}
    b, c = TestServer(default=_sampler(lambda i: 1.0), answers=says), TestServer(default=_sampler(lambda i: 1.0), answers=says)
    with b, c, TestServer(default="42") as k:
        s = _run(b, c, suite, tmp_path / "run", "--control", k.url, "--repeats", "2")
        asked = [r["body"]["messages"][0]["content"] for r in k.requests("/chat/completions")]
    assert asked == ["say 42", "say 42"]
    assert s["noise_floor"]["source"] == "control" and s["errors"]["control"]["requests"] == 2


def test_a_seeded_request_gets_seed_plus_repeat_so_its_samples_are_independent(tmp_path: Path) -> None:
    suite = write_suite(tmp_path / "s.jsonl", _sampled_cases(1, seed=1234))
    with TestServer(default=_sampler(lambda i: 0.5)) as b, TestServer(default=_sampler(lambda i: 0.5)) as c:
        _run(b, c, suite, tmp_path / "run", "--repeats", "4")
        seeds = sorted(r["body"]["seed"] for r in b.requests("/chat/completions"))
    assert seeds == [1234, 1235, 1236, 1237]


def _seeded(valid_share: Callable[[int], float], salt: str) -> Callable[[dict[str, Any]], str]:
    """Like a seeded sampler: the answer is a function of the request's seed (asked again, it repeats itself)."""
    import hashlib

    def answer(body: dict[str, Any]) -> str:
        i = int(body["messages"][0]["content"].split()[2])
        h = int(hashlib.sha256(f"{salt}/{i}/{body['seed']}".encode()).hexdigest()[:8], 16) / 2**32
        return VALID if h < valid_share(i) else BROKEN

    return answer


def test_seeded_sampled_cases_are_not_judged_against_a_floor_that_repeats_itself(tmp_path: Path) -> None:
    """With a seed, the baseline asked again repeats its answer exactly: a floor of 0%. A faithful candidate then
    'regressed' on every pass→fail flip between two different samples. Compared as distributions, it does not."""
    cases = [{**c, "params": {**c["params"], "seed": 100 + i}} for i, c in enumerate(_sampled_cases(30))]
    suite = write_suite(tmp_path / "s.jsonl", cases)
    with TestServer(default=_seeded(_spread, "b")) as b, TestServer(default=_seeded(_spread, "c")) as c:
        s = _run(b, c, suite, tmp_path / "run")
        seeds = {r["body"]["seed"] for r in b.requests("/chat/completions") if "record 0 " in r["body"]["messages"][0]["content"]}
    assert s["verdict"] != "fail", s["categories"]["json"]["verdict_reason"]
    assert s["categories"]["json"]["checks"]["json_parse"]["sampled"]["decision"] != "drop"
    assert len(seeds) > 1 and min(seeds) == 100 and seeds == set(range(100, 100 + len(seeds))), "seed + repeat: independent draws"


def _greedy_routes(n_routes: int, per_route: int) -> list[dict[str, Any]]:
    return [
        {
            "id": f"r{r}-{i}",
            "category": f"cat{r}",
            "messages": [{"role": "user", "content": f"route {r} question {i}"}],
            "checks": {"contains": "42"},
        }
        for r in range(n_routes)
        for i in range(per_route)
    ]


def test_greedy_regressions_are_weighed_against_one_pooled_floor(tmp_path: Path) -> None:
    """Eight regressions over four routes, a baseline that reproduced itself on every re-asked case: fail, every route."""
    suite = write_suite(tmp_path / "s.jsonl", _greedy_routes(4, 8))
    broken = {f"route {r} question {i}": "It is 41." for r in range(4) for i in range(2)}
    with TestServer(default="It is 42.") as b, TestServer(default="It is 42.", answers=broken) as c:
        s = _run(b, c, suite, tmp_path / "run")
    assert s["noise_floor"]["source"] == "baseline_again" and s["noise_floor"]["pairs"] == 8
    assert s["noise_floor"]["disagreements"] == 0
    quality = [g for g in s["guardrails"] if g["name"] == "max_quality_regression_cases"]
    assert len(quality) == 4 and all(g["passed"] is False for g in quality), [g["message"] for g in quality]
    assert all("0 of 8 cases asked again" in g["message"] for g in quality)
    assert s["verdict"] == "fail" and s["_rc"] == 1
    assert s["noise_floor"]["routes"]["cat0"] == {"regressions": 2, "eligible": 2, "allowance": 1, "supported": 0}


def test_identical_greedy_answers_pass_and_say_how_far_they_generalise(tmp_path: Path) -> None:
    suite = write_suite(tmp_path / "s.jsonl", _greedy_routes(1, 30))
    with TestServer(default="It is 42.") as b, TestServer(default="It is 42.") as c:
        s = _run(b, c, suite, tmp_path / "run")
    cat = s["categories"]["cat0"]
    assert s["verdict"] == "pass" and cat["identical_rate"] == 1.0
    assert cat["divergence_upper"] == pytest.approx(1 - 0.05 ** (1 / 30)) and cat["divergence_upper"] == pytest.approx(0.095, abs=5e-4)
    assert "30 of 30 greedy cases identical: at most 9.5% of such requests differ" in cat["power"]
    assert "9.5%" in (tmp_path / "run" / "signoff.md").read_text(encoding="utf-8")


def test_an_undecided_sampled_category_is_inconclusive_and_says_what_would_decide_it(tmp_path: Path) -> None:
    suite = write_suite(tmp_path / "s.jsonl", _sampled_cases(4))
    with TestServer(default=_sampler(lambda i: 0.5)) as b, TestServer(default=_sampler(lambda i: 0.5)) as c:
        s = _run(b, c, suite, tmp_path / "run", "-c", str(_config(tmp_path, "run:\n  max_samples_per_case: 4\n")))
    cat = s["categories"]["json"]
    assert cat["verdict"] == "inconclusive" and s["verdict"] == "inconclusive" and s["_rc"] == 1
    assert cat["checks"]["json_parse"]["sampled"]["decision"] == "undecided"
    assert "cases at this budget" in cat["would_decide"] and "samples per case" in cat["would_decide"]
    (g,) = [g for g in s["guardrails"] if g["name"] == "max_quality_regression_cases"]
    assert g["passed"] is None and g["message"].startswith("undecided")
    signoff = (tmp_path / "run" / "signoff.md").read_text(encoding="utf-8")
    assert "what would decide it" in signoff and "json (inconclusive)" in signoff


def _config(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "qc.yaml"
    p.write_text(text, encoding="utf-8")
    return p


def test_a_rerun_into_the_folder_takes_the_same_rounds_and_sends_nothing(tmp_path: Path) -> None:
    suite = write_suite(tmp_path / "s.jsonl", _sampled_cases(20))
    with TestServer(default=_sampler(_spread)) as b, TestServer(default=_sampler(_spread, salt=2)) as c:
        first = _run(b, c, suite, tmp_path / "run")
        sent = len(b.requests("/chat/completions"))
        again = _run(b, c, suite, tmp_path / "run")
        assert len(b.requests("/chat/completions")) == sent
    assert again["sampling"] == first["sampling"] and again["categories"] == first["categories"]


def test_gating_again_with_another_budget_reads_the_looks_as_they_were_taken(tmp_path: Path) -> None:
    suite = write_suite(tmp_path / "s.jsonl", _sampled_cases(30))
    with TestServer(default=_sampler(_spread)) as b, TestServer(default=_sampler(_spread, salt=1)) as c:
        first = _run(b, c, suite, tmp_path / "run")
    (tmp_path / "small.yaml").write_text("run:\n  max_samples_per_case: 4\n  sample_round: 1\n", encoding="utf-8")
    assert main(["gate", str(tmp_path / "run"), "-c", str(tmp_path / "small.yaml")]) in (0, 1)
    again = json.loads((tmp_path / "run" / "summary.json").read_text(encoding="utf-8"))
    was, now = (
        first["categories"]["json"]["checks"]["json_parse"]["sampled"],
        again["categories"]["json"]["checks"]["json_parse"]["sampled"],
    )
    assert now == was and again["verdict"] == first["verdict"], "the config's budget is not the one the samples were taken with"


def test_the_sampling_record_of_shards_adds_up_round_by_round() -> None:
    def rec(cases: int, rounds: list[tuple[int, int]]) -> SamplingRecord:
        return SamplingRecord(
            mode="adaptive",
            max_samples_per_case=10,
            sample_round=2,
            detectable_drop=0.1,
            sampled_cases=cases,
            rounds=tuple(
                SamplingRoundRecord(round=i + 1, samples_per_case=2 * (i + 1), cases=n, categories=(f"c{i}",), requests=r)
                for i, (n, r) in enumerate(rounds)
            ),
        )

    merged = SamplingRecord.merged([rec(10, [(10, 40), (4, 16)]), rec(8, [(8, 32)])])
    assert merged.sampled_cases == 18 and [(r.cases, r.requests) for r in merged.rounds] == [(18, 72), (4, 16)]
    assert merged.rounds[0].categories == ("c0",)


@pytest.mark.parametrize(
    ("text", "field"),
    [("run:\n  max_samples_per_case: 0\n", "max_samples_per_case"), ("run:\n  detectable_drop: 2\n", "detectable_drop")],
)
def test_bad_sampling_settings_are_clear_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, field: str) -> None:
    suite = write_suite(tmp_path / "s.jsonl", _sampled_cases(1))
    rc = main(run_argv("http://127.0.0.1:9", "http://127.0.0.1:9", suite, tmp_path / "run", "-c", str(_config(tmp_path, text))))
    err = capsys.readouterr().err
    assert rc == 2 and field in err and "Traceback" not in err


def test_a_temperature_that_is_not_a_number_is_a_suite_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    suite = write_suite(tmp_path / "s.jsonl", _sampled_cases(1, temperature="hot"))
    assert main(["validate", str(suite)]) == 2
    err = capsys.readouterr().err
    assert "s.jsonl:1" in err and "params" in err and "temperature must be a number" in err


def _greedy(n: int, category: str = "qa", route: str = "billing") -> list[dict[str, Any]]:
    return [
        {
            "id": f"{category}-{i}",
            "category": category,
            "tags": {"route": route},
            "messages": [{"role": "user", "content": f"greedy {category} {i} say 42"}],
            "checks": {"contains": "42"},
        }
        for i in range(n)
    ]


def _mixed(sampled: Callable[[dict[str, Any]], str], greedy: dict[str, str]) -> Callable[[dict[str, Any]], str]:
    def answer(body: dict[str, Any]) -> str:
        prompt = body["messages"][0]["content"]
        return greedy.get(prompt, "It is 42.") if prompt.startswith("greedy") else sampled(body)

    return answer


def test_a_route_failed_by_a_sampled_drop_does_not_count_its_greedy_categories_regressions(tmp_path: Path) -> None:
    """The route fails on the sampled drop; the greedy category beside it is judged on its own regressions.

    Its one regression was asked again and reproduced: a floor that measured no disagreement explains
    nothing, so the regression is not tolerated, and its category is left undecided by its own floor
    (too few pairs), never failed by the sampled drop of its route.
    """
    cases = [{**c, "tags": {"route": "billing"}} for c in _sampled_cases(30)] + _greedy(5)
    suite = write_suite(tmp_path / "s.jsonl", cases)
    with (
        TestServer(default=_mixed(_sampler(_spread), {})) as b,
        TestServer(default=_mixed(_sampler(lambda i: _spread(i) - 0.45), {"greedy qa 0 say 42": "It is 41."})) as c,
    ):
        s = _run(b, c, suite, tmp_path / "run")
    assert s["categories"]["json"]["verdict"] == "fail"
    qa = s["categories"]["qa"]
    assert qa["verdict"] == "inconclusive" and "0 regression(s)" not in qa["verdict_reason"], qa["verdict_reason"]
    assert "qa-0 not explained by the measured noise floor" in qa["verdict_reason"]
    assert qa["checks"]["contains"]["tolerated"] == [] and qa["checks"]["contains"]["regressions"] == ["qa-0"]


def test_an_undecided_sampled_category_does_not_make_its_routes_greedy_categories_inconclusive(tmp_path: Path) -> None:
    """A greedy regression the floor's measured rate explains passes, though a sampled category of its route is undecided."""
    cases = [{**c, "tags": {"route": "billing"}} for c in _sampled_cases(4)] + _greedy(10)
    suite = write_suite(tmp_path / "s.jsonl", cases)
    control = {"greedy qa 1 say 42": "It is 41.", "greedy qa 2 say 42": "It is 41."}
    cfg = _config(tmp_path, "run:\n  max_samples_per_case: 4\n")
    with (
        TestServer(default=_mixed(_sampler(lambda i: 0.5), {})) as b,
        TestServer(default=_mixed(_sampler(lambda i: 0.5), {"greedy qa 0 say 42": "It is 41."})) as c,
        TestServer(default=_mixed(_sampler(lambda i: 0.5), control)) as k,
    ):
        s = _run(b, c, suite, tmp_path / "run", "-c", str(cfg), "--control", k.url)
    assert s["noise_floor"]["routes"]["billing"]["supported"] >= 1, s["noise_floor"]
    assert s["categories"]["json"]["verdict"] == "inconclusive"
    assert s["categories"]["qa"]["verdict"] == "pass", s["categories"]["qa"]["verdict_reason"]
