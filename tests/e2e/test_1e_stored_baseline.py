"""A stored baseline on real vLLM: `run --baseline-run` sends the baseline nothing and reaches the live run's findings.

A live run of the fp32 pair on a few greedy cases, then the same candidate
against that run's stored baseline, then `compare` of the two stored runs.
The fp32 baseline's own counters show it was asked nothing: vLLM's
`vllm:request_success_total` and its access log, which lists every request
(preflight, /tokenize and scrapes included). Greedy fp32 is token-identical
with and without ngram speculation on this engine (test_1_fp32_ngram.py), so
the reused run must find exactly what the live one found.
"""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from qualitycheck.core._store import RunStore
from tests.e2e.e2e_helpers import MODEL, RELAXED_GUARDRAILS, SUITES, explain, qc, summary_of, write_config

pytestmark = [pytest.mark.e2e, pytest.mark.engines("fp32", "fp32-ngram")]

CASES = 3
"""The first greedy cases of the fp32 suite: enough for two categories, small enough to add seconds, not minutes."""
_ACCESS = re.compile(r'"(?:GET|POST|PUT|DELETE) /')


def _requests_served(server: Any) -> tuple[float, int]:
    """vLLM's finished generation requests, and every request its access log lists (this read's GET /metrics before it)."""
    text = urllib.request.urlopen(server.url + "/metrics", timeout=10).read().decode()
    ok = sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith("vllm:request_success_total"))
    return ok, _access_lines(server)


def _access_lines(server: Any) -> int:
    return len(_ACCESS.findall(server.log_path.read_text(encoding="utf-8", errors="replace")))


def _findings(out: Path) -> dict[str, Any]:
    """The verdict, each category's verdict and reason, each check's cases and rates, each guardrail's result."""
    s = summary_of(out)
    keys = ("regressions", "tolerated", "improvements", "baseline_pass_rate", "candidate_pass_rate")
    return {
        "verdict": s["verdict"],
        "categories": {
            cat: (
                c["verdict"],
                c["verdict_reason"],
                c["identical_rate"],
                {n: {k: ch.get(k) for k in keys} for n, ch in c["checks"].items()},
            )
            for cat, c in s["categories"].items()
        },
        "guardrails": [(g["name"], g.get("route"), g["passed"]) for g in s["guardrails"]],
    }


def _answers(out: Path, target: str) -> dict[str, list[int] | None]:
    with RunStore.open(out) as store:
        return {r.case_id: r.token_ids for r in store.responses() if r.target == target}


def test_a_stored_baseline_is_asked_nothing_and_the_findings_are_the_live_runs(engines: Any, tmp_path: Path) -> None:
    servers = engines.use("fp32", "fp32-ngram")
    base, cand = servers["fp32"], servers["fp32-ngram"]
    lines = (SUITES / "fp32.jsonl").read_text(encoding="utf-8").splitlines()[:CASES]
    assert all(json.loads(line)["params"]["temperature"] == 0 for line in lines)
    suite = tmp_path / "greedy.jsonl"
    suite.write_text("\n".join(lines) + "\n", encoding="utf-8")
    # TPOT measured by another run at another load is not evaluated against a stored baseline (a unit test shows it);
    # the guardrails here are the ones both runs can evaluate, so their verdicts can be compared
    cfg = write_config(tmp_path / "qc.yaml", {k: v for k, v in RELAXED_GUARDRAILS.items() if k != "max_tpot_p95_regression"})
    common = ["-c", str(cfg), "--candidate", cand.url, "--model", MODEL, "--suite", str(suite), "--concurrency", "4"]

    live = tmp_path / "live"
    proc = qc("run", "--baseline", base.url, *common, "--out", str(live))
    assert proc.returncode == 0, explain(proc)
    ok_before, seen_before = _requests_served(base)
    assert ok_before >= CASES and seen_before > 0, "the live run asked the baseline (the counters are not blind)"

    stored = tmp_path / "stored"
    proc = qc("run", "--baseline-run", str(live), *common, "--out", str(stored))
    assert proc.returncode == 0, explain(proc)
    assert _access_lines(base) == seen_before, "the stored baseline was sent no request at all: no preflight, scrape or generation"
    assert _requests_served(base)[0] == ok_before
    assert _findings(stored) == _findings(live)
    assert _answers(stored, "candidate") == _answers(live, "candidate"), "the candidate was asked again and answered the same"
    assert _answers(stored, "baseline") == _answers(live, "baseline"), "the baseline's answers are the stored ones"
    s = summary_of(stored)
    assert s["stored"]["baseline"]["folder"] == str(live) and s["preflight"]["ok"] is True
    assert s["likelihood"]["evaluated"] is False and "--scorer URL" in s["likelihood"]["reason"]
    assert s["acceptance"]["rate"] is not None, "acceptance is the candidate's, measured in this run"

    seen = (_access_lines(base), _access_lines(cand))
    proc = qc("compare", str(live), str(stored), "--out", str(tmp_path / "compared"))
    assert proc.returncode == 0, explain(proc)
    assert (_access_lines(base), _access_lines(cand)) == seen, "compare asks no target anything"
    c = summary_of(tmp_path / "compared")
    assert c["verdict"] == "pass" and all(cat["identical_rate"] == 1.0 for cat in c["categories"].values())
    assert c["stored"]["candidate"]["folder"] == str(stored) and c["targets"]["baseline"]["url"] == cand.url
