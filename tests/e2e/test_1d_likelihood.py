"""The likelihood stage on real vLLM: the fp32 baseline scores a small run's answers, both sides, greedy and sampled.

What must hold for the stored figures to be real: the baseline model's own
greedy answers are made of its first-choice tokens, and the ngram
candidate's samples at temperature 0.8 (which it corrupts on this engine,
docs/stages/likelihood.md) score lower than the baseline's own samples by
nats per token, not by rounding. A second pass over the finished folder
prefills nothing.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import pytest

from qualitycheck.core._records import LikelihoodRecord, LikelihoodStage
from qualitycheck.core._store import RunStore
from tests.e2e.e2e_helpers import MODEL, SUITES, explain, qc, write_config

pytestmark = [pytest.mark.e2e, pytest.mark.engines("fp32", "fp32-ngram")]

SAMPLED_CASES = 8
GREEDY_CASES = 4


def _suite(folder: Path) -> Path:
    """The open-ended suite's first qa cases at temperature 0.8, and a few of them again at temperature 0."""
    qa = [json.loads(line) for line in (SUITES / "open_ended.jsonl").read_text(encoding="utf-8").splitlines()]
    qa = [c for c in qa if c["category"] == "qa"][:SAMPLED_CASES]
    greedy = [{**c, "id": c["id"] + "-greedy", "params": {**c["params"], "temperature": 0}} for c in qa[:GREEDY_CASES]]
    path = folder / "likelihood.jsonl"
    path.write_text("".join(json.dumps(c) + "\n" for c in qa + greedy), encoding="utf-8")
    return path


def test_the_baseline_ranks_its_own_greedy_tokens_first_and_scores_ngrams_samples_lower(engines: Any, tmp_path: Path) -> None:
    servers = engines.use("fp32", "fp32-ngram")
    out = tmp_path / "run"
    proc = qc(
        "run",
        "-c",
        str(write_config(tmp_path / "c.yaml")),
        "--baseline",
        servers["fp32"].url,
        "--candidate",
        servers["fp32-ngram"].url,
        "--model",
        MODEL,
        "--suite",
        str(_suite(tmp_path)),
        "--out",
        str(out),
        "--repeats",
        "2",
        "--concurrency",
        "8",
    )
    assert proc.returncode in (0, 1), explain(proc)
    assert "qualitycheck: likelihood: scored" in proc.stderr, explain(proc)
    with RunStore.open(out) as store:
        stage = store.record(LikelihoodStage)
        answered = {(r.case_id, r.target, r.repeat) for r in store.responses() if r.ok}
        records: list[LikelihoodRecord] = list(store.likelihoods())
    assert stage is not None and stage.evaluated and stage.engine == "vllm", explain(proc)
    assert {(r.case_id, r.target, r.repeat) for r in records} == answered and all(r.status == "scored" for r in records)
    assert stage.prefilled_tokens > 0 and stage.seconds > 0 and all(r.tokens_from == "token_ids" for r in records)

    greedy = [r for r in records if r.case_id.endswith("-greedy") and r.target == "baseline"]
    ranks = [rank for r in greedy for rank in r.token_ranks]
    assert len(greedy) == 2 * GREEDY_CASES and ranks
    assert sum(rank == 1 for rank in ranks) / len(ranks) >= 0.98, f"the baseline's greedy tokens are its first choices: {ranks}"

    def mean(side: str) -> float:
        return statistics.fmean(
            r.mean_logprob for r in records if not r.case_id.endswith("-greedy") and r.target == side and r.mean_logprob
        )

    baseline, candidate = mean("baseline"), mean("candidate")
    assert candidate < baseline - 1.0, f"ngram's samples: {candidate:.2f} nats/token, the baseline's own: {baseline:.2f}"
    for r in records:
        if r.divergence is not None and r.divergence.answer_token is not None:
            assert r.divergence.margin is not None and r.divergence.margin >= -1e-3, r.divergence

    again = qc("likelihood", str(out))
    assert again.returncode == 0 and "every answer already has a record" in again.stderr, explain(again)
