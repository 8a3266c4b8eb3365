"""Sampled traffic on real vLLM: the draft_model candidate at temperature 0.9 keeps quality and must not fail on it.

On this engine a model drafting for itself accepts only a few per cent of its
drafts when sampling, but what it answers is drawn from the baseline's
distribution: the sampled comparison must not turn that into a false alarm.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.e2e.e2e_helpers import explain
from tests.e2e.test_1d_sampled_ngram import SAMPLED, _run

pytestmark = pytest.mark.e2e


def test_a_faithful_draft_model_candidate_does_not_fail_on_quality_at_temperature(engines: Any, tmp_path: Path) -> None:
    servers = engines.use("fp32", "fp32-draft")
    proc, s = _run(servers, "fp32-draft", SAMPLED, tmp_path, "sampled")
    quality = [g for g in s["guardrails"] if g["name"] == "max_quality_regression_cases"]
    assert quality and not any(g["passed"] is False for g in quality), explain(proc)
    for cat, c in s["categories"].items():
        assert c["verdict"] != "fail", (cat, c["verdict_reason"])
        for name, k in c["checks"].items():
            if k.get("sampled"):
                assert k["sampled"]["decision"] != "drop", (cat, name, k["sampled"])
    assert s["acceptance"]["draft_tokens"] > 0 and s["acceptance"]["rate"] is not None
    assert s["sampling"]["mean_samples_per_case"] <= s["sampling"]["max_samples_per_case"]
