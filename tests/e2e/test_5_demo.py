"""`qualitycheck demo` from an unrelated folder: the README's main-job command, end to end.

Runs last: it starts its own two servers, so the pool's servers are stopped
first (three 4 GB servers plus the demo's two would not fit next to the
other test suites on this machine).
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.e2e_helpers import explain, qc, summary_of

pytestmark = pytest.mark.e2e


def test_demo_runs_the_whole_job_and_cleans_up(engines: Any, tmp_path: Path) -> None:
    engines.use()  # stop every pool server
    out = tmp_path / "demo"
    proc = qc("demo", "--out", str(out), cwd=tmp_path)
    assert proc.returncode == 0, explain(proc)
    assert f"report: {out / 'report.html'}" in proc.stderr
    for name in ("summary.json", "report.html", "signoff.md", "run.sqlite", "demo-suite.jsonl"):
        assert (out / name).is_file(), name
    s = summary_of(out)
    assert s["verdict"] in ("pass", "fail", "inconclusive") and s["cases"] >= 10
    assert s["targets"]["control"]["url"] == s["targets"]["baseline"]["url"], "documented: control = baseline server"
    # real, non-trivial pass rates: in several categories some check passes on some cases and fails on others
    mixed = {
        cat
        for cat, c in s["categories"].items()
        for ch in c["checks"].values()
        if ch.get("baseline_pass_rate") is not None and 0 < ch["baseline_pass_rate"] < 1
    }
    assert len(mixed) >= 2, json.dumps({k: v["checks"] for k, v in s["categories"].items()})[:3000]
    assert s["acceptance"]["draft_tokens"], "acceptance from the ngram candidate's /metrics"
    assert s["preflight"]["ok"] is True
    # the baseline judges the open-ended cases: a judge is configured (not 'skipped'), every judged case is decided,
    # and the identical fp32 pairs are settled without a call
    judged = {cat: c["checks"]["judge"] for cat, c in s["categories"].items() if "judge" in c["checks"]}
    assert judged, "the demo suite has judge checks"
    for cat, j in judged.items():
        assert j["n"] >= 1 and j["candidate_pass_rate"] is not None, (cat, j)
        assert j["judge_errors"] == 0 and j["skipped_identical"] + j["judged"] == j["n"], (cat, j)
    # the servers are gone: each log's first line is its command line; nothing answers on its port any more
    logs = list((out / "servers").glob("vllm-*.log"))
    assert len(logs) == 2
    for log in logs:
        port = log.read_text(errors="replace").splitlines()[0].split("--port ")[1].split()[0]
        with pytest.raises(OSError):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
