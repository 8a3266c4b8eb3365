"""vLLM's suffix decoding (`method: "suffix"`, Arctic Inference) against the fp32 baseline.

vLLM imports arctic-inference for it; scripts/dev.sh builds its wheel
once and installs it (docs/ENGINE.md says why it is built). A Python
without it skips this test and says why; in CI (env CI set) that is a
failure, as a missing engine is. Verified like ngram: greedy answers
identical, acceptance read from the real counters and gated.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

import pytest

from qualitycheck.engines._launcher import launch, suffix_config
from tests.e2e.e2e_helpers import MODEL, RELAXED_GUARDRAILS, SUITES, explain, qc, summary_of, write_config

pytestmark = pytest.mark.e2e

MISSING = "arctic-inference is not installed in this Python (suffix decoding needs it; bash scripts/dev.sh setup installs it)"


@pytest.fixture(autouse=True)
def _arctic_inference() -> None:
    if importlib.util.find_spec("arctic_inference") is None:
        if os.environ.get("CI"):
            pytest.fail(f"CI is set but {MISSING}")
        pytest.skip(MISSING)


def test_suffix_decoding_candidate_keeps_greedy_answers_and_reports_acceptance(engines: Any, model_dir: Path, tmp_path: Path) -> None:
    base = engines.use("fp32")["fp32"]
    with launch(model_dir, served_name=MODEL, name="fp32-suffix", core=1, speculative_config=suffix_config(), log_dir=tmp_path) as cand:
        out = tmp_path / "run"
        proc = qc(
            "run",
            "-c",
            str(write_config(tmp_path / "qc.yaml", {**RELAXED_GUARDRAILS, "min_acceptance_rate": 0.05})),
            "--baseline",
            base.url,
            "--candidate",
            cand.url,
            "--model",
            MODEL,
            "--suite",
            str(SUITES / "fp32.jsonl"),
            "--out",
            str(out),
            "--concurrency",
            "4",
        )
    s = summary_of(out)
    assert proc.returncode == 0 and s["verdict"] == "pass", explain(proc)
    assert all(c["identical_rate"] == 1.0 for c in s["categories"].values())
    acc = s["acceptance"]
    assert acc["speculating"] is True and acc["draft_tokens"] > 0 and acc["rate"] is not None, acc
    rule = next(g for g in s["guardrails"] if g["name"] == "min_acceptance_rate")
    assert rule["passed"] is True and rule["observed"] == pytest.approx(acc["rate"]), rule
    assert s["preflight"]["ok"] is True
