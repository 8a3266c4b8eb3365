"""What the report shows per case, from a store written through its public API (repeats, flaky, comparisons)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from qualitycheck.core._cases import Case
from qualitycheck.core._records import ErrorInfo, Response, Score, Usage
from qualitycheck.report import collect, render_html
from qualitycheck.report._charts import histogram_svg
from qualitycheck.core._store import RunStore


def _store(folder: Path) -> RunStore:
    cases = [Case(id=f"c{i}", category="qa", prompt=f"p{i}") for i in range(3)]
    manifest = {"suite_fingerprint": "f", "suite_files": ["s.jsonl"], "cases": 3, "repeats": 2,
                "targets": {"baseline": {"url": "http://b", "model": "m"}, "candidate": {"url": "http://c", "model": "m", "label": "ngram k=3"}}}
    store = RunStore.create(folder, manifest, cases)
    texts = {("c0", "baseline"): ["A", "A"], ("c0", "candidate"): ["A", "B"],
             ("c1", "baseline"): ["X", "X"], ("c1", "candidate"): ["X", "X"],
             ("c2", "baseline"): ["Y", "Y"], ("c2", "candidate"): ["Y", None]}
    statuses = {("c0", "baseline"): "pp", ("c0", "candidate"): "pf", ("c1", "baseline"): "ff", ("c1", "candidate"): "pp",
                ("c2", "baseline"): "pp", ("c2", "candidate"): "pe"}
    scores = []
    for (cid, tgt), reps in texts.items():
        for rep, text in enumerate(reps):
            err = ErrorInfo(kind="timeout", message="no answer in 120 s") if text is None else None
            store.put_response(Response(case_id=cid, target=tgt, repeat=rep, fingerprint="x", text=text or "", error=err,
                                        usage=Usage(completion_tokens=5), ttft_s=0.01 * (rep + 1), e2e_s=0.05,
                                        chunk_times=[0.01, 0.02, 0.04], chunk_tokens=[1, 1, 2]))
            st = statuses[(cid, tgt)][rep]
            status = {"p": "pass", "f": "fail", "e": "error"}[st]
            scores.append(Score(case_id=cid, target=tgt, repeat=rep, check="contains", status=status, value=0.5 if st == "f" else None))
    store.replace_scores(scores)
    store.replace_comparisons([("c0", 1, json.dumps(_C0_REPEAT_1))])
    return store


_C0_REPEAT_1 = {"case_id": "c0", "repeat": 1, "identical": False, "divergence_char": 0, "similarity": 0.0,
                "checks": {"contains": {}}, "category": "qa"}


def test_repeats_flaky_errors_and_fallback_flips(tmp_path: Path) -> None:
    with _store(tmp_path) as store:
        data = collect(store, {"categories": {"qa": {"checks": {}}}})  # no statistics for `contains` yet
    rows = {r.id: r for r in data.rows}
    c0, c1, c2 = rows["c0"], rows["c1"], rows["c2"]
    assert c0.statuses["contains"] == {"baseline": "pp", "candidate": "pf"}
    assert c0.regressed == ["contains"] and c0.flaky == ["contains"] and "divergent" in c0.flags
    assert c0.details["contains"]["candidate"] == [None, {"value": 0.5}]
    assert c0.comparison == [None, {"identical": False, "divergence_char": 0, "similarity": 0.0}]
    assert c1.improved == ["contains"] and c1.flags == ["improvement", "identical"]
    assert c2.texts["candidate"] == ["Y", None] and c2.errors["candidate"] == [None, "timeout: no answer in 120 s"]
    assert "error" in c2.flags and "divergent" not in c2.flags and "identical" not in c2.flags
    assert [r.id for r in data.rows] == ["c0", "c2", "c1"]  # regression, error, improvement
    itl = data.latency_samples["itl_ms"]["candidate"]
    assert np.allclose(sorted(set(np.round(itl, 6))), [10.0])  # 10 ms gap; 20 ms over a 2-token chunk
    assert data.latency_samples["ttft_ms"]["baseline"].tolist() == [10.0, 20.0, 10.0, 20.0, 10.0, 20.0]


def test_a_run_stored_before_comparisons_were_rows_still_shows_them(tmp_path: Path) -> None:
    with _store(tmp_path) as store:
        store.replace_comparisons([])
        store.put_artifact("comparisons", [_C0_REPEAT_1])  # the single-artifact form older runs hold
        rows = {r.id: r for r in collect(store, {}).rows}
    assert rows["c0"].comparison == [None, {"identical": False, "divergence_char": 0, "similarity": 0.0}]
    assert rows["c1"].comparison == []


def test_summary_lists_win_over_the_fallback_and_labels_show(tmp_path: Path) -> None:
    summary = {"categories": {"qa": {"checks": {"contains": {"regressions": ["c1"], "improvements": [], "flaky": ["c2"]}}}}}
    with _store(tmp_path) as store:
        data = collect(store, summary)
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
