"""The judge's A/A noise floor and position bias: the judge judges baseline against control too."""

from __future__ import annotations

from pathlib import Path

from qualitycheck.core._cases import Case
from qualitycheck.core._records import Response
from qualitycheck.core._store import RunStore
from qualitycheck.judge._judge import score_judge
from qualitycheck.pipeline._run import verdict_settings
from qualitycheck.report import write_report
from qualitycheck.report._signoff import render_signoff
from qualitycheck.testserver import TestServer
from qualitycheck.verdict._summary import build_summary

from .conftest import judge_config, judge_stage, make_store, prefer


def _with_control(store: RunStore, control: dict[str, str]) -> RunStore:
    for cid, text in control.items():
        store.put_response(Response(case_id=cid, target="control", fingerprint="f", text=text))
    return store


def _run(folder: Path) -> RunStore:
    """10 cases: the control (the baseline again) loses 4 to a judge that likes GOOD, the candidate loses 2 others."""
    pairs = [(f"c{i}", f"GOOD answer {i}", f"meh answer {i}" if i in (4, 5) else f"GOOD answer {i}") for i in range(10)]
    store = make_store(folder, pairs)
    _with_control(store, {f"c{i}": (f"meh again {i}" if i < 4 else f"GOOD answer {i}") for i in range(10)})
    return store


def test_aa_judge_losses_explain_the_candidates_losses(tmp_path: Path) -> None:
    store = _run(tmp_path / "run")
    with TestServer(default=prefer("GOOD")) as srv:
        cfg = judge_config(srv.url)
        stage = score_judge(store, *judge_stage(srv.url))
        calls = len(srv.requests("/chat/completions"))
    assert stage["aa_pairs"] == 4 and calls == 2 * (4 + 2)  # divergent A/A pairs only, both orders
    control = {s.case_id: s for s in store.scores() if s.check == "judge" and s.target == "control"}
    assert len(control) == 10 and all(s.detail["aa"] for s in control.values())
    assert {c for c, s in control.items() if s.status == "fail"} == {"c0", "c1", "c2", "c3"}

    with_floor = build_summary(store, verdict_settings(cfg))
    cell = with_floor.categories["summaries"].checks["judge"]
    assert cell.losses == 2 and cell.aa_pairs == 10 and cell.aa_losses == 4 and cell.aa_loss_rate == 0.4
    assert cell.noise_floor.measured_by == "control" and cell.noise_floor.flip_rate == 0.4
    assert cell.regressions == ["c4", "c5"] and cell.tolerated == ["c4", "c5"] and cell.regression_allowance >= 2
    assert with_floor.verdict == "pass"
    report = write_report(store, with_floor).read_text(encoding="utf-8")
    assert 'id="judge-calibration"' in report and "Judge noise floor" in report and "40.0%" in report
    signoff = render_signoff(with_floor)
    assert "the judge lost 4 of 10 A/A pairs (noise floor 40.0%)" in signoff and "position bias of judge `pairwise`" in signoff

    # The same losses without the A/A judgements: nothing explains them, and the verdict flips.
    store.replace_scores(
        [s for s in store.scores() if s.check == "judge" and s.target != "control"],
        checks=["judge"],
    )
    without = build_summary(store, verdict_settings(cfg))
    bare = without.categories["summaries"].checks["judge"]
    assert bare.regressions == ["c4", "c5"] and bare.tolerated == [] and bare.noise_floor.measured_by is None
    assert without.verdict == "fail" and without.categories["summaries"].verdict == "fail"
    store.close()


def test_identical_aa_pairs_cost_no_call(tmp_path: Path) -> None:
    store = make_store(tmp_path / "run", [("a", "GOOD one", "meh one")])
    _with_control(store, {"a": "GOOD one"})
    with TestServer(default=prefer("GOOD")) as srv:
        stage = score_judge(store, *judge_stage(srv.url))
        assert len(srv.requests("/chat/completions")) == 2
    assert stage["aa_pairs"] == 0
    aa = next(s for s in store.scores() if s.target == "control")
    assert (aa.status, aa.value, aa.detail["identical"]) == ("pass", "tie", True)
    store.close()


def test_position_bias_is_reported_per_judge(tmp_path: Path) -> None:
    store = make_store(tmp_path / "run", [(f"p{i}", f"one {i}", f"two {i}") for i in range(3)] + [("q", "GOOD", "meh")])

    def first_unless_good(body: dict) -> str:
        verdict = prefer("GOOD")(body)
        return verdict if "TIE" not in verdict else "The first one. [[A]]"

    with TestServer(default=first_unless_good) as srv:
        cfg = judge_config(srv.url)
        score_judge(store, *judge_stage(srv.url))
    s = build_summary(store, verdict_settings(cfg))
    bias = s.judge_position_bias["pairwise"]
    assert bias.pairs == 4 and bias.same_position_pairs == 3
    assert (bias.first_position_wins, bias.second_position_wins) == (7, 1) and bias.first_position_rate == 7 / 8
    assert "judge_position_bias" in s.to_json_text()
    store.close()


def test_no_position_bias_field_without_pairwise_calls(tmp_path: Path) -> None:
    store = make_store(tmp_path / "run", [("i", "same", "same")])
    with TestServer(default=prefer("x")) as srv:
        cfg = judge_config(srv.url)
        score_judge(store, *judge_stage(srv.url))
    s = build_summary(store, verdict_settings(cfg))
    assert s.judge_position_bias == {} and "judge_position_bias" not in s.to_json_text()
    store.close()


def test_with_repeats_the_later_baseline_answers_are_judged_against_the_first(tmp_path: Path) -> None:
    """No control: repeat 1 of the baseline against its repeat 0 is the A/A pair; its losses explain the candidate's."""
    cases = [
        Case(id=f"c{i}", category="summaries", messages=[{"role": "user", "content": f"Summarise {i}."}], checks={"judge": "pairwise"})
        for i in range(10)
    ]
    store = RunStore.create(tmp_path / "run", {"targets": {}, "repeats": 2, "suite_fingerprint": "t"}, cases)
    for i in range(10):
        for rep in (0, 1):
            base = f"meh again {i}" if rep == 1 and i < 4 else f"GOOD answer {i}"
            cand = f"meh answer {i}" if i in (4, 5, 6) else f"GOOD answer {i}"
            store.put_response(Response(case_id=f"c{i}", target="baseline", repeat=rep, fingerprint="f", text=base))
            store.put_response(Response(case_id=f"c{i}", target="candidate", repeat=rep, fingerprint="f", text=cand))
    with TestServer(default=prefer("GOOD")) as srv:
        cfg = judge_config(srv.url)
        stage = score_judge(store, *judge_stage(srv.url))
    assert stage["aa_pairs"] == 4
    base = {(s.case_id, s.repeat): s for s in store.scores() if s.check == "judge" and s.target == "baseline"}
    assert {k for k, s in base.items() if s.status == "fail"} == {(f"c{i}", 1) for i in range(4)}
    assert all(base[(f"c{i}", 0)].status == "pass" for i in range(10)) and all(base[(f"c{i}", 1)].detail["aa"] for i in range(10))
    with_floor = build_summary(store, verdict_settings(cfg))
    cell = with_floor.categories["summaries"].checks["judge"]
    assert cell.noise_floor.measured_by == "repeats" and cell.aa_pairs == 10 and cell.aa_losses == 4
    assert cell.regressions == ["c4", "c5", "c6"] and cell.tolerated == []
    assert cell.flaky == ["c0", "c1", "c2", "c3"]
    # the floor's ten pairs show a disagreement rate of at least 15% (95%): that explains two of the six
    # eligible cases, not three; the route's three count together, none tolerated, and the verdict waits for more pairs
    assert with_floor.verdict == "inconclusive" and with_floor.noise_floor.routes["summaries"].supported == 2

    # Without the A/A judgements the baseline never disagrees with itself: three losses are beyond the floor.
    store.replace_scores(
        [
            s.model_copy(update={"status": "pass", "detail": {"judge": "pairwise", "kind": "pairwise"}}) if s.target == "baseline" else s
            for s in store.scores()
            if s.check == "judge"
        ],
        checks=["judge"],
    )
    without = build_summary(store, verdict_settings(cfg))
    bare = without.categories["summaries"].checks["judge"]
    assert bare.regressions == ["c4", "c5", "c6"] and bare.tolerated == [] and without.verdict == "fail"
    store.close()
