"""review.html is blinded; --import un-blinds labels into the run, all or nothing; the figures reach every output."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from qualitycheck.cli._main import main
from qualitycheck.core._store import RunStore
from qualitycheck.report._review import ReviewKey
from qualitycheck.verdict._human import cohen_kappa, sign_test_p, wilson_ci
from qualitycheck.verdict._human_summary import REVIEW_KEY_ARTIFACT
from qualitycheck.verdict._model import read_summary

from .conftest import MODEL, key_of, labels_file, page_data

PLANTED_SECRET = "5e" * 32


def _write_page(run: Path, *extra: str) -> str:
    assert main(["review", str(run), "--seed", "3", *extra]) == 0
    return (run / "review.html").read_text(encoding="utf-8")


def test_the_page_reveals_no_side(review_run: Path) -> None:
    # Each pair's side is one draw from a generator seeded by the run's random secret: with five pairs all would
    # come out alike 1 time in 16. A planted secret fixes the draw, one that mixes the sides, so the claim below
    # holds on every run. The next test covers a key the product makes itself.
    with RunStore.open(review_run) as store:
        store.put_artifact(REVIEW_KEY_ARTIFACT, ReviewKey(secret=PLANTED_SECRET, seed=3).model_dump(mode="json"))
    html = _write_page(review_run)
    with RunStore.open(review_run) as store:
        manifest = store.manifest
        case_ids = [c.id for c in store.iter_cases()]
        config = store.artifact("config") or {}
    key = key_of(review_run)
    urls = [t["url"] for t in manifest["targets"].values()]
    ports = [u.rsplit(":", 1)[-1] for u in urls]
    # the page's CSP nonce is random text, which may spell a short marker such as "--b" (about 1 page in 700)
    lowered = re.sub(r"nonce-[A-Za-z0-9_+/=-]+|nonce=\"[^\"]*\"", "NONCE", html).lower()
    markers = ["baseline", "candidate", "control", "again", "speculat", "draft", "ngram", "eagle", "target", "side", "model", "judge"]
    markers += ["data-b", "data-c", 'class="b"', 'class="c"', "--b", "--c", "sqlite", "summary.json", "repeat"]
    for m in markers:
        assert m not in lowered, m
    assert MODEL.lower() not in lowered and "judge-m" not in lowered
    for u in urls:
        assert u not in html
    for port in ports:
        assert f":{port}" not in html and f"{port}" not in re.sub(r"p[0-9a-f]{16}|r[0-9a-f]{16}", "", html)
    for cid in case_ids:
        assert cid not in html, cid
        for digest in (hashlib.sha256(cid.encode()).hexdigest()[:16], hashlib.md5(cid.encode()).hexdigest()[:16]):
            assert digest not in html
    assert key["secret"] not in html and str(review_run) not in html
    assert str(config.get("run", {}).get("seed", "")) == "" or "seed" not in lowered
    # The key exists and its sides are mixed; the page agrees with it without naming them.
    data = page_data(review_run)
    assert {p["a"] for p in key["pairs"]} == {"baseline", "candidate"}
    assert all(list(p) == ["id", "category", "messages", "a", "b"] for p in data["pairs"]), "key order would show the read order"
    assert all(re.fullmatch(r"p[0-9a-f]{16}", p["id"]) for p in data["pairs"]) and re.fullmatch(r"r[0-9a-f]{16}", data["run"])
    with RunStore.open(review_run) as store:
        answers = {(r.case_id, r.target): r.answer for r in store.responses() if r.target in ("baseline", "candidate")}
    by_id = {p["id"]: p for p in key["pairs"]}
    other = {"baseline": "candidate", "candidate": "baseline"}
    for p in data["pairs"]:
        k = by_id[p["id"]]
        assert p["a"] == answers[(k["case_id"], k["a"])] and p["b"] == answers[(k["case_id"], other[k["a"]])]
    # The page is shuffled as a whole. Unshuffled, it would list the divergent pairs category by category, in the
    # categories' order, and the attention check last: a reader could tell which pairs are the checks. One page may
    # still come out in that shape by chance, so the claim is over eight seeds (the planted secret fixes them all).
    first_categories, attention_at = set(), set()
    for seed in range(8):
        assert main(["review", str(review_run), "--seed", str(seed)]) == 0
        checks = {p["id"] for p in key_of(review_run)["pairs"] if p["attention"]}  # a seed may draw another one
        pairs = page_data(review_run)["pairs"]
        first_categories.add(pairs[0]["category"])
        attention_at.update(i for i, p in enumerate(pairs) if p["id"] in checks)
    assert len(first_categories) > 1 and attention_at != {len(pairs) - 1}, (first_categories, attention_at)
    # The same seed writes the same page again: the same ids, sides and order.
    again = _write_page(review_run)
    assert page_data(review_run)["pairs"] == data["pairs"] and again.count("p") > 0


def test_divergent_pairs_first_stratified_with_attention_checks(review_run: Path) -> None:
    _write_page(review_run, "--per-category", "1")
    key = key_of(review_run)
    assert re.fullmatch(r"[0-9a-f]{64}", key["secret"]) and key["secret"] != PLANTED_SECRET  # the run's own, random
    divergent = [p for p in key["pairs"] if not p["attention"]]
    attention = [p for p in key["pairs"] if p["attention"]]
    assert len(divergent) == 2 and {p["case_id"][:3] for p in divergent} == {"sum", "exp"}
    assert len(attention) == 1
    with RunStore.open(review_run) as store:
        ans = {(r.case_id, r.target): r.answer for r in store.responses()}
    att = attention[0]["case_id"]
    assert ans[(att, "baseline")] == ans[(att, "candidate")]
    assert all(ans[(p["case_id"], "baseline")] != ans[(p["case_id"], "candidate")] for p in divergent)


def _state(run: Path) -> tuple[object, bytes]:
    with RunStore.open(run) as store:
        return store.artifact("human_labels"), (run / "summary.json").read_bytes()


@pytest.mark.parametrize(
    ("name", "mutate", "message"),
    [
        ("another run", lambda d: d.update(run="r0000000000000000"), "labels are for another run"),
        ("unknown pair", lambda d: d["labels"].append({"pair": "pffffffffffffffff", "choice": "A"}), "unknown pair id"),
        ("bad choice", lambda d: d["labels"][0].update(choice="baseline"), "expected one of A, B, tie, both_wrong"),
        ("no reviewer", lambda d: d.update(reviewer=""), "reviewer"),
        ("not an export", lambda d: d.pop("format"), "format"),
    ],
)
def test_bad_label_files_exit_2_and_import_nothing(
    review_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, mutate, message: str
) -> None:
    _write_page(review_run)
    good = labels_file(tmp_path / "good.json", review_run, "ann", {"sum-1": "baseline", "sum-3": "baseline"})
    bad = tmp_path / "bad.json"
    data = json.loads(good.read_text())
    mutate(data)
    bad.write_text(json.dumps(data))
    before = _state(review_run)
    capsys.readouterr()
    assert main(["review", str(review_run), "--import", str(good), "--import", str(bad)]) == 2
    err = capsys.readouterr().err
    assert message in err and str(bad) in err and "Traceback" not in err
    assert _state(review_run) == before and before[0] is None


def test_malformed_and_missing_files_exit_2(review_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _write_page(review_run)
    broken = tmp_path / "broken.json"
    broken.write_text('{"format": "qualitycheck-review-labels", "labels": [')
    for path in (broken, tmp_path / "absent.json"):
        assert main(["review", str(review_run), "--import", str(path)]) == 2
    err = capsys.readouterr().err
    assert "not a JSON labels file" in err and "cannot read labels file" in err
    assert _state(review_run)[0] is None


def test_import_before_any_page_is_refused(review_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "l.json"
    f.write_text("{}")
    assert main(["review", str(review_run), "--import", str(f)]) == 2
    assert "no review page was written" in capsys.readouterr().err


def test_imported_labels_reach_summary_report_and_signoff(review_run: Path, tmp_path: Path) -> None:
    _write_page(review_run)
    ann = labels_file(
        tmp_path / "ann.json", review_run, "ann", {"sum-1": "baseline", "sum-3": "baseline", "sum-2": "candidate", "exp-1": "baseline"}
    )
    bob = labels_file(
        tmp_path / "bob.json", review_run, "bob", {"sum-1": "baseline", "sum-3": "tie", "sum-2": "candidate", "exp-1": "baseline"}
    )
    rc = main(["review", str(review_run), "--import", str(ann), "--import", str(bob)])
    s = read_summary(review_run / "summary.json")
    assert s.human_review is not None and s.human_review.reviewers == ["ann", "bob"]
    summ = s.categories["summaries"].human_review
    assert summ is not None and summ.pairs == 3 and summ.reviewers == 2
    # sum-1: both baseline; sum-3: split → tie; sum-2: both candidate.
    assert (summ.preference["baseline"].count, summ.preference["tie"].count, summ.preference["candidate"].count) == (1, 1, 1)
    assert summ.preference["baseline"].ci == pytest.approx(wilson_ci(1, 3))
    assert summ.sign_test_p == 1.0
    assert (
        summ.reviewer_agreement is not None and summ.reviewer_agreement.pairs == 3 and summ.reviewer_agreement.rate == pytest.approx(2 / 3)
    )
    assert summ.judge_agreement is not None and summ.judge_agreement.pairs == 3
    # The judge: sum-1 loss, sum-3 loss, sum-2 tie (both say GOOD); the humans: loss, tie, win.
    assert summ.judge_agreement.rate == pytest.approx(1 / 3)
    assert summ.judge_agreement.kappa == pytest.approx(cohen_kappa(["loss", "loss", "tie"], ["loss", "tie", "win"]))
    human = s.categories["summaries"].checks["human"]
    assert human.regressions == ["sum-1"] and human.counted == ["sum-1"] and human.noise_floor.measured_by is None
    assert s.categories["explain"].checks["human"].counted == ["exp-1"]
    assert s.verdict == "fail" and rc == 1
    quality = {g.route: g for g in s.guardrails if g.name == "max_quality_regression_cases"}
    assert quality["summaries"].passed is False and "sum-1 (human, judge)" in quality["summaries"].message
    assert quality["explain"].passed is False and "exp-1 (human, judge)" in quality["explain"].message
    report = (review_run / "report.html").read_text(encoding="utf-8")
    assert 'id="human-review"' in report and "Human spot-checks" in report and "ann, bob" in report
    signoff = (review_run / "signoff.md").read_text(encoding="utf-8")
    assert "Human spot-checks" in signoff and "sum-1" in signoff
    with RunStore.open(review_run) as store:
        stored = store.artifact("human_labels")
    assert stored["format_version"] == 1 and [r["reviewer"] for r in stored["reviewers"]] == ["ann", "bob"]
    assert all(lab["choice"] in ("baseline", "candidate", "tie", "both_wrong") for r in stored["reviewers"] for lab in r["labels"])


def test_attention_checks_set_the_human_noise_floor(review_run: Path, tmp_path: Path) -> None:
    """Reviewers who pick a side between identical answers are noisy: one loss is within their noise.

    Their noise explains the human loss (beyond the floor: none); the route still holds the judge's
    regression sum-3, which the machine floor (the baseline asked again, never disagreeing) does not
    explain, so the route is undecided and its regressions count together: none is tolerated.
    """
    _write_page(review_run, "--sample", "4")
    key = key_of(review_run)
    attention = [p["case_id"] for p in key["pairs"] if p["attention"]]
    assert attention
    noisy = {cid: "baseline" for cid in attention} | {"sum-1": "baseline"}
    f = labels_file(tmp_path / "noisy.json", review_run, "cy", noisy)
    main(["review", str(review_run), "--import", str(f)])
    s = read_summary(review_run / "summary.json")
    human = s.categories["summaries"].checks["human"]
    assert human.noise_floor.measured_by == "attention_checks" and human.noise_floor.flip_rate == 1.0
    assert human.regressions == ["sum-1"] and human.regression_allowance >= 1 and human.regressions_beyond_floor == 0
    route = next(g for g in s.guardrails if g.route == "summaries")
    assert route.passed is None and "its measured disagreements explain 1" in route.message and human.tolerated == []
    assert s.human_review is not None and s.human_review.attention_side_rate == 1.0


def test_a_reviewer_imported_again_is_replaced(review_run: Path, tmp_path: Path) -> None:
    _write_page(review_run)
    first = labels_file(tmp_path / "a1.json", review_run, "ann", {"sum-1": "baseline"})
    main(["review", str(review_run), "--import", str(first)])
    second = labels_file(tmp_path / "a2.json", review_run, "ann", {"sum-1": "candidate"})
    assert main(["review", str(review_run), "--import", str(second)]) in (0, 1)
    s = read_summary(review_run / "summary.json")
    assert s.human_review is not None and s.human_review.reviewers == ["ann"] and s.human_review.labels == 1
    assert s.categories["summaries"].checks["human"].regressions == []


def test_runs_without_labels_keep_their_summary_shape(review_run: Path) -> None:
    _write_page(review_run)
    text = (review_run / "summary.json").read_text()
    assert "human" not in text


def test_statistics() -> None:
    assert sign_test_p(0, 0) is None and sign_test_p(5, 5) == 1.0
    assert sign_test_p(9, 1) == pytest.approx(2 * 11 / 1024)
    lo, hi = wilson_ci(0, 10) or (None, None)
    assert lo == 0.0 and 0.25 < hi < 0.35
    assert cohen_kappa(["a", "b", "a", "b"], ["a", "b", "a", "b"]) == 1.0
    assert cohen_kappa(["a", "a", "b", "b"], ["a", "b", "a", "b"]) == 0.0
    assert cohen_kappa([], []) is None


def test_reviewers_who_never_pick_a_side_on_attention_checks_tolerate_nothing(review_run: Path, tmp_path: Path) -> None:
    _write_page(review_run, "--sample", "4")
    attention = [p["case_id"] for p in key_of(review_run)["pairs"] if p["attention"]]
    f = labels_file(tmp_path / "calm.json", review_run, "dee", {cid: "tie" for cid in attention} | {"sum-1": "baseline"})
    assert main(["review", str(review_run), "--import", str(f)]) == 1
    human = read_summary(review_run / "summary.json").categories["summaries"].checks["human"]
    assert human.noise_floor.measured_by == "attention_checks" and human.noise_floor.flip_rate == 0.0
    assert human.counted == ["sum-1"] and human.regression_allowance == 0


def test_the_pytest_gate_and_the_terminal_name_the_human_regression(review_run: Path, tmp_path: Path) -> None:
    from qualitycheck.pytest_plugin import gate_items
    from qualitycheck.report import summary_renderables

    _write_page(review_run)
    f = labels_file(tmp_path / "e.json", review_run, "eve", {"sum-1": "baseline", "sum-2": "candidate"})
    main(["review", str(review_run), "--import", str(f)])
    s = read_summary(review_run / "summary.json")
    items = {name: outcome for name, outcome, _ in gate_items(s)}
    assert items["regression::summaries::human::sum-1"] == "fail"
    assert "regression::summaries::human::sum-2" not in items
    import io

    from rich.console import Console

    console = Console(width=120, record=True, file=io.StringIO())
    for r in summary_renderables(s):
        console.print(r)
    text = console.export_text()
    assert "sum-1" in text and "human" in text
