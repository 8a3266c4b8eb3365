"""The post-run stages read a run one case at a time: same figures as before, no whole-run lists.

`_store` builds a small run with everything that changes the figures
(repeats, a control, errors, a case nobody answered, multi-token chunks,
tags, system prompts, sampled cases, judge scores). The slices are pinned to
what the whole-run implementation produced on it; latency is checked against
the definition itself (numpy over plain lists of every sample).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from qualitycheck.core._cases import Case
from qualitycheck.core._records import ErrorInfo, Response, Score, Usage
from qualitycheck.core._store import RunStore
from qualitycheck.scoring import score_store
from qualitycheck.serving import _latency as latency
from qualitycheck.serving import slices_summary
from qualitycheck.serving._latency import LatencySamples, Samples, itl_per_token, latency_summary, tpot_s
from qualitycheck.verdict._judge_figures import judge_summary


def _store(tmp_path: Path) -> RunStore:
    rng = random.Random(7)
    cases = []
    for i in range(12):
        cat = ("qa", "json", "code")[i % 3]
        messages = [{"role": "user", "content": f"q{i}"}]
        if i % 4 == 0:
            messages.insert(0, {"role": "system", "content": "Be brief."})
        cases.append(
            Case(
                id=f"{cat}-{i:02d}",
                category=cat,
                messages=messages,
                checks={"contains": ["ok"]},
                params={"temperature": (0.0, 0.3, 0.9, 1.5)[i % 4]},
                tags={"tenant": "acme" if i % 2 else "beta", **({"route": "fast"} if i % 5 == 0 else {})},
            )
        )
    store = RunStore.create(tmp_path, {"suite_fingerprint": "x", "targets": {}, "repeats": 2}, cases)
    for i, c in enumerate(cases):
        if i == 11:
            continue  # nobody answered this one
        for rep in (0, 1):
            for t in ("baseline", "candidate", "control"):
                if t == "candidate" and i == 4 and rep == 1:
                    store.put_response(
                        Response(
                            case_id=c.id,
                            target=t,
                            repeat=rep,
                            fingerprint="f",
                            text="",
                            started_at=100.0 + i,
                            e2e_s=2.0,
                            error=ErrorInfo(kind="timeout", message="x"),
                        )
                    )
                    continue
                n = rng.randint(1, 40)
                times = sorted(rng.uniform(0.01, 0.5) for _ in range(rng.randint(0, 12)))
                toks = [rng.randint(0, 3) for _ in times] if t == "candidate" and i % 2 else []
                text = "ok" if rng.random() < 0.8 else "no"
                if t != "baseline" and rng.random() < 0.5:
                    text = "ok fine"
                store.put_response(
                    Response(
                        case_id=c.id,
                        target=t,
                        repeat=rep,
                        fingerprint="f",
                        text=text,
                        started_at=100.0 + i + rng.random(),
                        ttft_s=times[0] if times else None,
                        e2e_s=(times[-1] if times else 0.2) + 0.01,
                        chunk_times=times,
                        chunk_tokens=toks,
                        usage=Usage(prompt_tokens=rng.choice([50, 300, 900, 3000]), completion_tokens=n if i != 7 else None),
                    )
                )
    score_store(store, workers=1)
    judge = [
        Score(
            case_id=c.id,
            target=t,
            repeat=0,
            check="judge",
            status="error" if i == 5 else "pass",
            value=None if i == 5 else ("win", "loss", "tie")[i % 3],
            detail={
                "kind": "single" if i % 2 else "pairwise",
                "position_consistent": i % 2 == 0,
                "identical": i == 8,
                "rubric_delta": i % 4 - 1,
            },
        )
        for i, c in enumerate(cases[:10])
        for t in ("baseline", "candidate")
    ]
    store.replace_scores(judge, checks=["judge"])
    return store


def _no_whole_run(monkeypatch: pytest.MonkeyPatch, *also: str) -> None:
    """Make the whole-run readers fail: a stage that still calls them would hold every case or response."""

    def whole_run(*a: object, **k: object) -> Any:
        raise AssertionError("this stage must stream the run case by case")

    for name in ("cases", "responses", "responses_by_case", *also):
        monkeypatch.setattr(RunStore, name, whole_run)


BEFORE = json.loads((Path(__file__).parents[2] / "fixtures" / "serving" / "streaming_small_run.json").read_text())
"""What the whole-run implementations (dicts of every case, lists of every sample) produced on `_store`."""


def test_slices_are_unchanged_and_streamed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = _store(tmp_path)
    _no_whole_run(monkeypatch, "scores")
    assert slices_summary(store) == BEFORE["slices"]
    store.close()


def test_slices_do_not_depend_on_when_bucket_combinations_are_folded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Cases are counted per combination of buckets and folded into the buckets later; holding one at a time changes nothing."""
    from qualitycheck.serving import _slices

    store = _store(tmp_path)
    monkeypatch.setattr(_slices, "_SIGNATURES", 1)  # every new combination folds the ones held
    assert slices_summary(store) == BEFORE["slices"]
    tally = _slices.SliceTally()
    for rec in store.by_case():
        tally.add(rec)
        assert len(tally._sigs) <= 1
    assert tally.summary() == BEFORE["slices"] and tally.summary() == BEFORE["slices"]  # reading it twice gives the same
    store.close()


def test_latency_is_unchanged_and_streamed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = _store(tmp_path)
    _no_whole_run(monkeypatch, "scores")
    assert json.loads(json.dumps(latency_summary(store))) == BEFORE["latency"]
    store.close()


def test_judge_summary_is_unchanged_without_loading_cases(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = _store(tmp_path)
    _no_whole_run(monkeypatch, "iter_cases")
    assert json.loads(json.dumps(judge_summary(store))) == BEFORE["judge"]
    store.close()


def test_latency_percentiles_are_numpy_over_every_sample(tmp_path: Path) -> None:
    """The definition, independently of the pinned figures: numpy's default percentile of every value."""
    store = _store(tmp_path)
    responses = [r for r in store.responses() if r.ok]
    out = latency_summary(store)
    for side in ("baseline", "candidate", "control"):
        mine = [r for r in responses if r.target == side]
        itl = [x for r in mine for x in itl_per_token(r)]
        tpot = [t for r in mine if (t := tpot_s(r)) is not None]
        for metric, values in (("itl_ms", itl), ("tpot_ms", tpot), ("e2e_ms", [r.e2e_s for r in mine])):
            want = np.percentile(np.asarray(values, dtype=float) * 1000.0, (50, 95, 99))
            assert out[side][metric] == {f"p{p}": round(float(v), 3) for p, v in zip((50, 95, 99), want)}
        assert "percentiles" not in out[side]
    store.close()


def test_a_small_side_stays_exact_however_many_samples(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs up to EXACT_RESPONSES responses per side are exact even past the sample budget."""
    store = _store(tmp_path)
    monkeypatch.setattr(latency, "EXACT_SAMPLES", 10)
    assert json.loads(json.dumps(latency_summary(store))) == BEFORE["latency"]
    store.close()


def test_a_big_side_is_bucketed_within_the_error_bound_and_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = _store(tmp_path)
    monkeypatch.setattr(latency, "EXACT_RESPONSES", 5)
    monkeypatch.setattr(latency, "EXACT_SAMPLES", 50)
    out = latency_summary(store)
    for side in ("baseline", "candidate", "control"):
        assert "approximate" in out[side]["percentiles"]
        for metric in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
            for p, exact in BEFORE["latency"][side][metric].items():
                assert out[side][metric][p] == pytest.approx(exact, rel=2 * latency.RELATIVE_ERROR, abs=2e-3)
        for key in ("requests", "output_tokens", "error_rate", "wall_s", "requests_per_s"):
            assert out[side][key] == BEFORE["latency"][side][key]
    for cat, sides in out["per_category"].items():
        for side, block in sides.items():
            assert "percentiles" in block and block["requests"] == BEFORE["latency"]["per_category"][cat][side]["requests"]
    store.close()


def test_buckets_bound_the_relative_error_on_skewed_data() -> None:
    rng = np.random.default_rng(3)
    values = np.concatenate([rng.lognormal(-4, 1.5, 20_000), np.zeros(50), [1e-12, 30.0]])
    exact, bucketed = Samples(), Samples()
    exact.extend(values.tolist())
    bucketed.extend(values[:1000].tolist())
    bucketed.bucket()
    bucketed.extend(values[1000:].tolist())
    assert exact.exact and not bucketed.exact and bucketed.n == exact.n == len(values)
    e, b = exact.percentiles_ms(), bucketed.percentiles_ms()
    for p in e:
        assert b[p] == pytest.approx(e[p], rel=2 * latency.RELATIVE_ERROR, abs=1e-3)


def test_merged_parts_equal_one_accumulator() -> None:
    rng = random.Random(1)
    rs = [
        Response(
            case_id=f"c{i}",
            target="candidate",
            fingerprint="f",
            text="x",
            started_at=rng.uniform(0, 50),
            ttft_s=rng.uniform(0, 1),
            e2e_s=rng.uniform(1, 3),
            chunk_times=sorted(rng.uniform(0, 1) for _ in range(5)),
            usage=Usage(completion_tokens=rng.randint(1, 30)),
            error=ErrorInfo(kind="timeout", message="x") if i % 9 == 0 else None,
        )
        for i in range(60)
    ]
    whole, parts = LatencySamples(), [LatencySamples() for _ in range(3)]
    for i, r in enumerate(rs):
        whole.add(r)
        parts[i % 3].add(r)
    assert LatencySamples.merged(parts).summary(2.0) == whole.summary(2.0)
    parts[0].bucket()
    merged = LatencySamples.merged(parts)
    assert not merged.exact and merged.requests == whole.requests and merged.itl.n == whole.itl.n
