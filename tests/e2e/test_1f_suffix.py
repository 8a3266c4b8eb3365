"""vLLM's suffix decoding (`method: "suffix"`, Arctic Inference) against the fp32 baseline.

vLLM imports arctic-inference for it; scripts/dev.sh builds its wheel
once and installs it (docs/ENGINE.md says why it is built). A Python
without it skips this test and says why (a skip the pool sees, so it never
starts that server); in CI (env CI set) that is a failure, as a missing
engine is. Verified like ngram: greedy answers identical, acceptance read
from the real counters and gated.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.e2e_helpers import MODEL, RELAXED_GUARDRAILS, SUITES, explain, qc, summary_of, write_config

MISSING = "arctic-inference is not installed in this Python (suffix decoding needs it; bash scripts/dev.sh setup installs it)"
ARCTIC = importlib.util.find_spec("arctic_inference") is not None

pytestmark = [pytest.mark.e2e, pytest.mark.engines("fp32", "fp32-suffix")]
if not ARCTIC and not os.environ.get("CI"):
    pytestmark.append(pytest.mark.skip(reason=MISSING))


@pytest.fixture(autouse=True)
def _arctic_inference() -> None:
    if not ARCTIC:
        pytest.fail(f"CI is set but {MISSING}")


def test_suffix_decoding_candidate_keeps_greedy_answers_and_reports_acceptance(engines: Any, tmp_path: Path) -> None:
    servers = engines.use("fp32", "fp32-suffix")
    out = tmp_path / "run"
    proc = qc(
        "run",
        "-c",
        str(write_config(tmp_path / "qc.yaml", {**RELAXED_GUARDRAILS, "min_acceptance_rate": 0.05})),
        "--baseline",
        servers["fp32"].url,
        "--candidate",
        servers["fp32-suffix"].url,
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
