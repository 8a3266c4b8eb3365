"""fp32 baseline vs fp32 ngram candidate on real vLLM: identical answers, a pass, real acceptance.

Also hosts the pytest-gate test (issue 4, test 5), because it needs the same
two servers and a server start costs a minute.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import urllib.request
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from qualitycheck.core._store import RunStore
from tests.e2e.e2e_helpers import MODEL, SUITES, checkout_env, explain, qc, summary_of, write_config

pytestmark = [pytest.mark.e2e, pytest.mark.engines("fp32", "fp32-ngram")]


@pytest.fixture(scope="module")
def ngram_run(engines: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    servers = engines.use("fp32", "fp32-ngram")
    work = tmp_path_factory.mktemp("fp32-ngram")
    cfg = write_config(work / "qualitycheck.yaml")
    out = work / "run"
    proc = qc(
        "run",
        "-c",
        str(cfg),
        "--baseline",
        servers["fp32"].url,
        "--candidate",
        servers["fp32-ngram"].url,
        "--model",
        MODEL,
        "--suite",
        str(SUITES / "fp32.jsonl"),
        "--out",
        str(out),
        "--concurrency",
        "4",
    )
    return {"proc": proc, "out": out, "servers": servers, "config": cfg}


def _counter(metrics_text: str, name: str) -> float:
    total = 0.0
    for line in metrics_text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_fp32_ngram_answers_identically_and_passes(ngram_run: dict[str, Any]) -> None:
    proc, out = ngram_run["proc"], ngram_run["out"]
    assert proc.returncode == 0, explain(proc)
    s = summary_of(out)
    assert s["verdict"] == "pass"
    assert s["cases"] == 6
    assert set(s["categories"]) == {"qa", "json", "sql", "support"}
    for cat, c in s["categories"].items():
        assert c["identical_rate"] == 1.0, cat
        assert c["verdict"] == "pass", (cat, c.get("verdict_reason"))
        for name, check in c["checks"].items():
            assert check["regressions"] == [] and check["baseline_pass_rate"] == check["candidate_pass_rate"], (cat, name)
    assert s["errors"]["candidate"]["count"] == 0 and s["errors"]["baseline"]["count"] == 0

    # greedy fp32 on CPU is token-identical with and without speculation: compare the ids, not only the text
    with RunStore.open(out) as store:
        for case_id, responses in store.responses_by_case():
            by_target = {r.target: r for r in responses}
            b, c = by_target["baseline"], by_target["candidate"]
            assert b.token_ids, f"{case_id}: vLLM returned no token ids"
            assert b.token_ids == c.token_ids, case_id


def test_acceptance_comes_from_the_candidates_real_metrics(ngram_run: dict[str, Any]) -> None:
    s = summary_of(ngram_run["out"])
    acc = s["acceptance"]
    assert acc["draft_tokens"] and acc["draft_tokens"] > 0
    assert 0 <= acc["accepted_tokens"] <= acc["draft_tokens"]
    assert acc["rate"] == pytest.approx(acc["accepted_tokens"] / acc["draft_tokens"])
    assert 0 < acc["rate"] < 1, "ngram drafts on free text are neither all rejected nor all accepted"
    assert acc["mean_accepted_length"] >= 1
    # the run's counts are deltas of the server's own counters, so they cannot exceed what the server reports
    metrics = urllib.request.urlopen(ngram_run["servers"]["fp32-ngram"].url + "/metrics", timeout=10).read().decode()
    assert _counter(metrics, "vllm:spec_decode_num_draft_tokens_total") >= acc["draft_tokens"]
    assert _counter(metrics, "vllm:spec_decode_num_accepted_tokens_total") >= acc["accepted_tokens"]
    rule = next(g for g in s["guardrails"] if g["name"] == "min_acceptance_rate")
    assert rule["passed"] is True and rule["observed"] == pytest.approx(acc["rate"])


def test_preflight_is_clean(ngram_run: dict[str, Any]) -> None:
    s = summary_of(ngram_run["out"])
    pre = s["preflight"]
    assert pre and pre["ok"] is True
    by_name = {c["name"]: c for c in pre["checks"]}
    assert not [c for c in pre["checks"] if c["passed"] is False]
    assert by_name["tokenize"]["passed"] is True, "/tokenize applies the chat template on both servers"
    assert by_name["served_model"]["passed"] is True


def test_pytest_gate_against_live_servers(ngram_run: dict[str, Any], tmp_path: Path) -> None:
    """`pytest --qc-...` from an unrelated folder gates live servers, and `--qc-run` gates a stored run."""
    servers = ngram_run["servers"]
    out = tmp_path / "gate-run"
    junit = tmp_path / "junit.xml"
    args = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        f"--junitxml={junit}",
        "--qc-baseline",
        servers["fp32"].url,
        "--qc-candidate",
        servers["fp32-ngram"].url,
        "--qc-model",
        MODEL,
        "--qc-suite",
        str(SUITES / "fp32.jsonl"),
        "--qc-out",
        str(out),
        "--qc-config",
        str(ngram_run["config"]),
    ]
    proc = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=900, env=checkout_env())
    assert proc.returncode == 0, explain(proc)
    assert summary_of(out)["verdict"] == "pass"
    suite = ET.parse(junit).getroot()
    cases = suite.iter("testcase")
    names = [c.get("name", "") for c in cases]
    assert len(names) >= 4, "one test per gate rule and category"
    assert any("min_acceptance_rate" in n for n in names), names
    assert int(suite.find(".//testsuite").get("failures", "0") if suite.tag == "testsuites" else suite.get("failures", "0")) == 0

    # a copy of the first test's stored run, re-gated with a stricter acceptance floor, fails naming the rule
    stored = tmp_path / "stored-run"
    shutil.copytree(ngram_run["out"], stored)
    strict = write_config(tmp_path / "strict.yaml", {"min_acceptance_rate": 0.99, "max_quality_regression_cases": 0})
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--qc-run", str(stored), "--qc-config", str(strict)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=checkout_env(),
    )
    assert proc.returncode == 1, explain(proc)
    assert re.search(r"min_acceptance_rate", proc.stdout), explain(proc)
