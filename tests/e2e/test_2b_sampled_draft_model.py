"""Sampled traffic on real vLLM: the draft_model candidate at temperature 0.9.

A model drafting for itself should leave the distribution of answers
unchanged (rejection sampling), and greedy decoding with it is identical
here. At temperature 0.9 on this engine it is not: a few per cent of its
drafts are accepted, and its answers carry foreign tokens ("```ats
originated anatomy reconciled"), so valid JSON falls. How far it falls
differs between machines and runs (docs/ENGINE.md, "Sampled traffic,
measured"), so the test holds the verdict to the evidence of its own run,
over the category's three sampled cells (its two checks and the likelihood
of its samples under the baseline model): a loss the budget tells apart
fails the category and the guardrail names the cell; a loss it cannot is
inconclusive and says what would decide it, never a pass; a loss ruled out
is no regression.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.e2e.e2e_helpers import explain
from tests.e2e.test_1d_sampled_ngram import SAMPLED, _run, of_categories

pytestmark = [pytest.mark.e2e, pytest.mark.engines("fp32", "fp32-draft")]


SAMPLES = 2
"""Samples per case and side: one look. The loss this candidate shows differs between machines and between runs,
and the test holds the verdict to whatever its run shows, so the budget decides only which losses are found rather
than named undecided. Replaying the gate's test on the per-case rates measured (tests/e2e/sizing.py, 2,000 runs):
one look of 2 samples finds a loss of 40 points or more (both JSON checks) in 99% of runs (4 samples: 35 points;
6: 25), which covers the 56 and 72 points measured on an AMD EPYC (docs/ENGINE.md) and the 47 points of one run
here (75% → 28% valid JSON, found at Holm p 3e-4). Another run here lost 9 points of valid JSON and 6 to the schema
(67% → 57%, 55% → 49%): no budget the test could afford decides that reliably (10 samples in 33% of runs, 6 in
23%, 2 in 9%), so most runs name it undecided with what would decide it, at any budget; 2 samples do so for a third
of the 6-sample run's requests."""


def test_the_draft_model_candidates_json_loss_at_temperature_is_found_or_named_undecided(engines: Any, tmp_path: Path) -> None:
    servers = engines.use("fp32", "fp32-draft")
    proc, s = _run(servers, "fp32-draft", of_categories(SAMPLED, tmp_path, "json"), tmp_path, "sampled", max_samples_per_case=SAMPLES)
    cat = s["categories"]["json"]
    cells = {check: cat["checks"][check]["sampled"] for check in ("json_parse", "json_schema")}
    decided = {check: c["decision"] for check, c in cells.items()}
    assert cat.get("likelihood") is not None, ("the likelihood stage scored the samples", s.get("likelihood"))
    lik = cat["likelihood"]
    decided["likelihood"] = {"shift": "drop", "no_shift": "no_drop"}.get(lik["decision"], lik["decision"])
    assert s["acceptance"]["draft_tokens"] > 0 and s["acceptance"]["rate"] < 0.5, "few drafts accepted when sampling"
    (g,) = [g for g in s["guardrails"] if g["name"] == "max_quality_regression_cases"]
    if "drop" in decided.values():
        assert cat["verdict"] == "fail" and proc.returncode == 1 and g["passed"] is False, (decided, explain(proc))
        for check, c in [*cells.items(), ("likelihood", lik)]:
            if decided[check] == "drop":
                assert c["p_value_holm"] < 0.05 and f"json/{check}" in g["message"], (c, g)
        for c in cells.values():
            if c["decision"] == "drop":
                assert c["delta"] < 0, c
        if lik["decision"] == "shift":  # corrupted samples are ones the baseline model would rarely write
            assert lik["direction"] == "lower" and lik["candidate_mean_logprob"] < lik["baseline_mean_logprob"], lik
    elif "undecided" in decided.values():
        # too small a loss to tell apart within the budget: said so, with what would decide it, never a pass
        assert cat["verdict"] == "inconclusive" and proc.returncode == 1 and g["passed"] is None, (decided, explain(proc))
        for check in cells:
            if decided[check] == "undecided":
                assert f"json/{check}" in g["message"], g
        assert any(w in g["message"] for w in ("would decide", "not after Holm", "between the bounds")), g
    else:  # a machine on which this candidate keeps its JSON and its distribution: a loss ruled out is no regression
        assert set(decided.values()) == {"no_drop"} and cat["verdict"] != "fail" and g["passed"] is not False, (decided, g)
