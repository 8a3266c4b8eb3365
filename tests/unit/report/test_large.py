"""A run larger than the report's case cap: which cases are embedded, what the page says, counts over all cases."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import numpy as np
import pytest

from qualitycheck.core._cases import Case
from qualitycheck.core._records import ErrorInfo, Response, Score
from qualitycheck.core._store import RunStore
from qualitycheck.report import collect, print_summary, render_html, write_report
from qualitycheck.report._data import _mixed, _Reservoir
from qualitycheck.report._terminal import make_console
from qualitycheck.verdict._compare import similarity
from qualitycheck.verdict._model import Summary
from qualitycheck.verdict._summary import build_summary

N = 40
RIGHT, WRONG = "The answer is 42.", "The answer is 41."


def _kind(i: int) -> str:
    """Case i's outcome; suite order is not id order (ids are zero-padded backwards) to prove the page uses suite order."""
    if i in (33, 5, 21):
        return "regression"
    if i in (30, 2):
        return "error"
    if i == 17:
        return "improvement"
    if i % 4 == 1:
        return "divergent"
    return "identical"


def _store(folder: Path, regressions: tuple[int, ...] | None = None) -> tuple[RunStore, Summary]:
    """The run and its summary (which compares it: the comparison rows are the compare stage's)."""
    kinds = {i: _kind(i) for i in range(N)}
    if regressions is not None:
        kinds = {i: "regression" if i in regressions else "identical" for i in range(N)}
    cases = [Case(id=f"q{N - i:03d}", category=f"cat{i % 3}", prompt=f"question {i}") for i in range(N)]
    manifest = {
        "suite_fingerprint": "f",
        "cases": N,
        "repeats": 1,
        "targets": {"baseline": {"url": "http://b", "model": "m"}, "candidate": {"url": "http://c", "model": "m"}},
    }
    store = RunStore.create(folder, manifest, cases)
    scores = []
    for i, c in enumerate(cases):
        kind = kinds[i]
        answers = {
            "baseline": WRONG if kind == "improvement" else RIGHT,
            "candidate": {"regression": WRONG, "divergent": RIGHT + " Indeed.", "error": ""}.get(kind, RIGHT),
        }
        for side, text in answers.items():
            err = ErrorInfo(kind="timeout", message="no answer") if side == "candidate" and kind == "error" else None
            store.put_response(
                Response(
                    case_id=c.id,
                    target=side,
                    fingerprint="x",
                    text=text,
                    error=err,
                    ttft_s=0.01 * (i + 1),
                    e2e_s=0.5,
                    chunk_times=[0.0, 0.01, 0.03],
                )
            )
            status = "error" if err else ("pass" if text.startswith(RIGHT) else "fail")
            scores.append(Score(case_id=c.id, target=side, check="exact", status=status))
    store.replace_scores(scores)
    return store, build_summary(store)


def _suite_index(case_id: str) -> int:
    return N - int(case_id[1:])


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Summary]:
    """The run of every kind of case, summarised once (the tests only read it)."""
    folder = tmp_path_factory.mktemp("large")
    store, summary = _store(folder)
    store.close()
    return folder, summary


def test_a_capped_report_keeps_the_most_important_cases_in_suite_order(mixed: tuple[Path, Summary]) -> None:
    folder, summary = mixed
    with RunStore.open(folder) as store:
        data = collect(store, summary, max_cases=8)
        full = collect(store, summary, max_cases=1_000)
    kept = [(_suite_index(r.id), r.flags[0]) for r in data.rows]
    # every regression, error and improvement, then the first divergent cases in suite order
    assert kept == [
        (5, "regression"),
        (21, "regression"),
        (33, "regression"),
        (2, "error"),
        (30, "error"),
        (17, "improved"),
        (1, "divergent"),
        (9, "divergent"),
    ]
    assert [r.id for r in data.rows] == [r.id for r in full.rows][:8]  # the cap cuts the uncapped order, nothing else
    assert all(r.prompt and r.texts for r in data.rows) and data.rows[0].comparison[0] is not None
    shown = data.rows[0].comparison[0]  # the compare stage's record of that regression
    assert (shown["identical"], shown["divergence_char"], shown["similarity"]) == (False, 15, similarity(RIGHT, WRONG)[0])
    # counts cover every case, embedded or not
    assert data.total_cases == N and data.flag_counts == full.flag_counts
    assert data.flag_counts["regression"] == 3 and data.flag_counts["divergent"] == 10 and data.flag_counts["identical"] == 28
    assert sum(n["identical"] for n in data.category_flags.values()) == 28
    assert data.omitted == {"divergent": 4, "identical": 28} and data.omitted_total == N - 8 and data.regressions_omitted == 0
    assert full.omitted == {} and len(full.rows) == N
    assert len(data.latency_samples["ttft_ms"]["baseline"]) == N  # charts see every response too


def test_the_page_says_what_is_not_embedded_and_counts_all_cases(mixed: tuple[Path, Summary]) -> None:
    folder, summary = mixed
    with RunStore.open(folder) as store:
        html = render_html(collect(store, summary, max_cases=8))
        small = render_html(collect(store, summary, max_cases=N))
    embedded = json.loads(re.search(r'<script type="application/json" id="qc-cases">(.*?)</script>', html, re.S).group(1))  # type: ignore[union-attr]
    assert len(embedded) == 8
    note = re.search(r'<p id="not-embedded".*?</p>', html, re.S).group(0)  # type: ignore[union-attr]
    assert "embeds 8 of 40 cases" in note and "32 cases are not embedded" in note and "4 divergent, 28 identical" in note
    assert f"load_run(&#39;{folder}&#39;)" in note
    assert '<option value="identical">identical (28; 0 embedded)</option>' in html  # all cases counted, embedded said
    assert '<option value="regression">regression (3)</option>' in html  # all embedded: no "embedded" remark
    assert '<option value="divergent">divergent (10; 6 embedded)</option>' in html  # 3 regressions + 1 improvement diverge too
    assert 'data-omitted="32"' in html and "40 cases</span>" in html
    assert "regressions-omitted" not in html
    assert "not-embedded" not in small and "data-omitted" not in small and '<option value="identical">identical (28)</option>' in small


def test_regressions_beyond_the_cap_are_announced_loudly(tmp_path: Path) -> None:
    regs = (3, 7, 11, 19, 23, 29)
    store, summary = _store(tmp_path, regressions=regs)
    with store:
        data = collect(store, summary, max_cases=4)
        path = write_report(store, summary, tmp_path / "r.html", max_cases=4)
    assert [_suite_index(r.id) for r in data.rows] == [3, 7, 11, 19]  # the first regressions in suite order
    assert data.regressions_omitted == 2 and data.flag_counts["regression"] == 6
    html = path.read_text(encoding="utf-8")
    warn = re.search(r'<div class="warn-note" id="regressions-omitted">.*?</div>', html, re.S).group(0)  # type: ignore[union-attr]
    assert "6 regressions: more than the 4 cases this report embeds" in warn and "first 4 in suite order" in warn
    assert "2 regressions are counted here but not listed" in warn
    buf = io.StringIO()
    print_summary(summary, data, console=make_console(buf))
    out = " ".join(buf.getvalue().split())  # rich wraps at the CI width of 140
    assert "WARNING: 6 regressions exceed the report's 4-case cap: 2 regressions are not listed" in out
    assert "report embeds 4 of 40 cases (36 not embedded; load_run(" in out and "Top regressions (4 of 6)" in out


def test_a_sampled_chart_says_so(mixed: tuple[Path, Summary]) -> None:
    folder, summary = mixed
    with RunStore.open(folder) as store:
        data = collect(store, summary, itl_sample=50)  # 40 responses × 2 gaps per side
        html = render_html(data)
    assert data.latency_sampled == {"itl_ms": {"baseline": 80, "candidate": 76}}  # two candidate answers are errors (2 gaps each)
    assert len(data.latency_samples["itl_ms"]["baseline"]) == 50
    assert "histogram of a uniform random sample: baseline 50 of 80, candidate 50 of 76" in html


def test_the_itl_chart_samples_uniformly_past_its_bound() -> None:
    res = _Reservoir(1_000)
    keys = _mixed(np.arange(100_000, dtype=np.uint64) + np.uint64(3 << 32))  # each value's key: a hash of where it comes from
    for chunk, chunk_keys in zip(np.array_split(np.arange(100_000, dtype=np.float64), 700), np.array_split(keys, 700)):
        res.add(chunk, chunk_keys)
    sample = res.values()
    assert res.seen == 100_000 and len(sample) == 1_000 and len(set(sample.tolist())) == 1_000
    assert 40_000 < float(np.median(sample)) < 60_000 and sample.min() < 5_000 and sample.max() > 95_000  # spans the stream
    small = _Reservoir(1_000)
    small.add(np.array([3.0, 1.0]), np.array([9, 8], dtype=np.uint64))
    small.add(np.array([2.0]), np.array([7], dtype=np.uint64))
    assert small.values().tolist() == [3.0, 1.0, 2.0]  # under the bound: every value, in order
