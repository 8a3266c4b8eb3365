"""What the report shows per case, from a store written through its public API (repeats, flaky, comparisons)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from qualitycheck.core._cases import Case
from qualitycheck.core._records import ErrorInfo, Response, Score, Usage
from qualitycheck.core._store import RunStore
from qualitycheck.report import collect, render_html
from qualitycheck.report._charts import histogram_svg
from qualitycheck.verdict._model import Summary
from qualitycheck.verdict._summary import build_summary

TEXTS = {
    ("c0", "baseline"): ["A", "A"],
    ("c0", "candidate"): ["A", "B"],
    ("c1", "baseline"): ["X", "X"],
    ("c1", "candidate"): ["X", "X"],
    ("c2", "baseline"): ["Y", "Y"],
    ("c2", "candidate"): ["Y", None],
    ("c3", "baseline"): ["Z", "Z"],
    ("c3", "candidate"): ["Z", "Z"],
    ("c4", "baseline"): ["W", "W"],
    ("c4", "candidate"): ["V", "V"],
}
STATUSES = {
    ("c0", "baseline"): "pp",
    ("c0", "candidate"): "pf",
    ("c1", "baseline"): "ff",
    ("c1", "candidate"): "pp",
    ("c2", "baseline"): "pp",
    ("c2", "candidate"): "pe",
    ("c3", "baseline"): "pf",
    ("c3", "candidate"): "ff",
    ("c4", "baseline"): "pp",
    ("c4", "candidate"): "ff",
}
"""c0: only the candidate varies across repeats; c1 improves; c2 errs once; c3: the baseline varies (flaky);
c4 regresses: the baseline's one disagreement in five pairs of repeats is too little measured noise to explain it,
so it counts (its route undecided), not tolerated."""


def _store(folder: Path) -> RunStore:
    cases = [Case(id=f"c{i}", category="qa", prompt=f"p{i}") for i in range(5)]
    manifest = {
        "suite_fingerprint": "f",
        "suite_files": ["s.jsonl"],
        "cases": 5,
        "repeats": 2,
        "targets": {"baseline": {"url": "http://b", "model": "m"}, "candidate": {"url": "http://c", "model": "m", "label": "ngram k=3"}},
    }
    store = RunStore.create(folder, manifest, cases)
    scores = []
    for (cid, tgt), reps in TEXTS.items():
        for rep, text in enumerate(reps):
            err = ErrorInfo(kind="timeout", message="no answer in 120 s") if text is None else None
            store.put_response(
                Response(
                    case_id=cid,
                    target=tgt,
                    repeat=rep,
                    fingerprint="x",
                    text=text or "",
                    error=err,
                    usage=Usage(completion_tokens=5),
                    ttft_s=0.01 * (rep + 1),
                    e2e_s=0.05,
                    chunk_times=[0.01, 0.02, 0.04],
                    chunk_tokens=[1, 1, 2],
                )
            )
            st = STATUSES[(cid, tgt)][rep]
            status = {"p": "pass", "f": "fail", "e": "error"}[st]
            scores.append(Score(case_id=cid, target=tgt, repeat=rep, check="contains", status=status, value=0.5 if st == "f" else None))
    store.replace_scores(scores)
    return store


def test_one_flaky_definition_statuses_from_the_summary_and_comparisons(tmp_path: Path) -> None:
    with _store(tmp_path) as store:
        summary = build_summary(store)
        data = collect(store, summary)
    contains = summary.categories["qa"].checks["contains"]
    assert contains.flaky == ["c3"] and contains.regressions == ["c4"] and contains.tolerated == []
    rows = {r.id: r for r in data.rows}
    c0, c1, c2, c3, c4 = (rows[f"c{i}"] for i in range(5))
    assert c0.statuses["contains"] == {"baseline": "pp", "candidate": "pf"}
    # the candidate varying across repeats is not flakiness: only the baseline disagreeing with itself is
    assert c0.regressed == [] and c0.flaky == [] and c0.flags == ["divergent"]
    assert c3.flaky == ["contains"] and c3.flags == ["flaky", "identical"]
    assert c4.regressed == ["contains"] and c4.tolerated == [] and c4.flags == ["regression", "divergent"]
    assert c0.details["contains"]["candidate"] == [None, {"value": 0.5}]
    assert c0.comparison[0] is not None and c0.comparison[0]["identical"] is True
    assert c0.comparison[1] is not None
    assert {k: c0.comparison[1][k] for k in ("identical", "divergence_char", "similarity")} == {
        "identical": False,
        "divergence_char": 0,
        "similarity": 0.0,
    }
    assert c1.improved == ["contains"] and c1.flags == ["improved", "identical"]
    assert c2.texts["candidate"] == ["Y", None] and c2.errors["candidate"] == [None, "timeout: no answer in 120 s"]
    assert "error" in c2.flags and "divergent" not in c2.flags and "identical" not in c2.flags
    assert [r.id for r in data.rows] == ["c4", "c2", "c1", "c3", "c0"]  # regression, error, improved, flaky, divergent
    itl = data.latency_samples["itl_ms"]["candidate"]
    assert np.allclose(sorted(set(np.round(itl, 6))), [10.0])  # 10 ms gap; 20 ms over a 2-token chunk
    assert data.latency_samples["ttft_ms"]["baseline"].tolist() == [10.0, 20.0] * 5


def test_the_report_renders_the_summary_lists_and_labels_show(tmp_path: Path) -> None:
    with _store(tmp_path) as store:
        s = build_summary(store).model_dump(mode="json")
        s["categories"]["qa"]["checks"]["contains"].update(regressions=["c1"], tolerated=[], improvements=[], flaky=["c2"])
        data = collect(store, Summary.model_validate(s))
        html = render_html(data)
    rows = {r.id: r for r in data.rows}
    assert rows["c1"].regressed == ["contains"] and rows["c0"].regressed == []
    assert "contains" in rows["c2"].flaky
    assert "ngram k=3" in html and "s.jsonl" in html


def test_histogram_handles_constant_and_empty_samples() -> None:
    assert str(histogram_svg("TTFT", {})) == ""
    svg = str(histogram_svg("TTFT", {"baseline": np.array([5.0, 5.0]), "candidate": np.array([5.0])}))
    assert svg.startswith("<svg") and svg.count("<polygon") == 2


def test_long_prompts_are_clipped_keeping_the_question_at_the_end() -> None:
    from qualitycheck.report._data import _clip

    text = "D" * 50_000 + " So, what is the capital?"
    out = _clip(text)
    assert len(out) < 4_200 and out.endswith("what is the capital?") and "46,025 characters omitted" in out
    assert _clip("short") == "short"
