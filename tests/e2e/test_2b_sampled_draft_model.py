"""Sampled traffic on real vLLM: the draft_model candidate at temperature 0.9.

A model drafting for itself should leave the distribution of answers
unchanged (rejection sampling), and greedy decoding with it is identical
here. At temperature 0.9 on this engine it is not: a few per cent of its
drafts are accepted, and its answers carry foreign tokens ("```ats
originated anatomy reconciled"), so valid JSON falls. How far it falls
differs between machines and runs (docs/ENGINE.md: from 88% to 16% and 78%
to 22% on one machine, 64% to 59% in one CI run), so the test holds the
verdict to the evidence of its own run: a loss the budget can tell apart
fails the category and names it; a loss it cannot is inconclusive, names
the budget that would decide, and is never a pass; no loss, shown within
the budget, is no regression.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.e2e.e2e_helpers import explain
from tests.e2e.test_1d_sampled_ngram import SAMPLED, _run, one_category

pytestmark = pytest.mark.e2e


def test_the_draft_model_candidates_json_loss_at_temperature_is_found_or_named_undecided(engines: Any, tmp_path: Path) -> None:
    servers = engines.use("fp32", "fp32-draft")
    # six samples per side at most: a large loss shows by the second look, and this candidate answers slowly on a CPU
    proc, s = _run(servers, "fp32-draft", one_category(SAMPLED, tmp_path, "json"), tmp_path, "sampled", max_samples_per_case=6)
    cat = s["categories"]["json"]
    parse = cat["checks"]["json_parse"]["sampled"]
    assert s["acceptance"]["draft_tokens"] > 0 and s["acceptance"]["rate"] < 0.5, "few drafts accepted when sampling"
    assert proc.returncode == 1 and s["verdict"] != "pass", explain(proc)
    (g,) = [g for g in s["guardrails"] if g["name"] == "max_quality_regression_cases"]
    if parse["decision"] == "drop":
        assert cat["verdict"] == "fail" and parse["p_value_holm"] < 0.05, (parse, explain(proc))
        assert g["passed"] is False and "json/json_parse" in g["message"]
    elif parse["decision"] == "no_drop":  # a machine on which this candidate keeps its JSON: nothing to find
        assert cat["verdict"] != "fail" and g["passed"] is not False, (parse, g)
    else:
        # the loss was too small to tell apart within the budget: said so, with what would decide it
        assert parse["decision"] == "undecided" and cat["verdict"] == "inconclusive", (parse, explain(proc))
        assert parse["samples_at_decision"] == 6, parse  # the whole budget spent before giving up
        assert g["passed"] is None and "json/json_parse" in g["message"] and "would decide" in g["message"], g
