"""fp32 baseline vs a draft_model candidate (the model drafting for itself) on real vLLM."""

from __future__ import annotations

from typing import Any

import pytest

from qualitycheck.core._store import RunStore
from tests.e2e.e2e_helpers import MODEL, SUITES, explain, qc, summary_of, write_config

pytestmark = [pytest.mark.e2e, pytest.mark.engines("fp32", "fp32-draft")]


def test_draft_model_candidate_passes_with_acceptance(engines: Any, tmp_path: Any) -> None:
    servers = engines.use("fp32", "fp32-draft")
    out = tmp_path / "run"
    proc = qc(
        "run",
        "-c",
        str(write_config(tmp_path / "qc.yaml")),
        "--baseline",
        servers["fp32"].url,
        "--candidate",
        servers["fp32-draft"].url,
        "--model",
        MODEL,
        "--suite",
        str(SUITES / "fp32.jsonl"),
        "--out",
        str(out),
        "--concurrency",
        "4",
    )
    assert proc.returncode == 0, explain(proc)
    s = summary_of(out)
    assert s["verdict"] == "pass"
    assert all(c["identical_rate"] == 1.0 for c in s["categories"].values())
    acc = s["acceptance"]
    assert acc["draft_tokens"] and acc["draft_tokens"] > 0
    # a model drafting for itself proposes exactly what it would generate: (nearly) every draft is accepted
    assert acc["rate"] >= 0.9, acc
    assert acc["mean_accepted_length"] > 2, acc
    assert s["preflight"]["ok"] is True
    with RunStore.open(out) as store:
        for case_id, rs in store.responses_by_case():
            t = {r.target: r for r in rs}
            assert t["baseline"].token_ids == t["candidate"].token_ids, case_id
