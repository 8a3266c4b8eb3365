"""Tool calls on real vLLM: named and required `tool_choice`, streamed, checked, compared and shown.

vLLM serves a named or "required" tool choice without a tool parser: it
constrains decoding to the tool's parameters schema (structured outputs),
so SmolLM2 produces a real call through the real streaming path. The
answers carry no text at all, so every assertion here is about the calls.
Runs on the fp32 pair test_1 started (same servers, no new start-up).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from qualitycheck.core._store import RunStore
from tests.e2e.e2e_helpers import MODEL, SUITES, explain, qc, summary_of, write_config

pytestmark = [pytest.mark.e2e, pytest.mark.engines("fp32", "fp32-ngram")]


@pytest.fixture(scope="module")
def tool_run(engines: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    servers = engines.use("fp32", "fp32-ngram")
    work = tmp_path_factory.mktemp("tool-calls")
    out = work / "run"
    proc = qc(
        "run",
        "-c",
        str(write_config(work / "qualitycheck.yaml")),
        "--baseline",
        servers["fp32"].url,
        "--candidate",
        servers["fp32-ngram"].url,
        "--model",
        MODEL,
        "--suite",
        str(SUITES / "tool_calls.jsonl"),
        "--out",
        str(out),
        "--concurrency",
        "2",
    )
    return {"proc": proc, "out": out}


def test_real_vllm_tool_calls_are_recorded_checked_and_pass(tool_run: dict[str, Any]) -> None:
    proc, out = tool_run["proc"], tool_run["out"]
    assert proc.returncode == 0, explain(proc)
    suite = {json.loads(line)["id"]: json.loads(line) for line in (SUITES / "tool_calls.jsonl").read_text().splitlines()}
    with RunStore.open(out) as store:
        answers = {(r.case_id, r.target): r for r in store.responses()}
    assert len(answers) == 2 * len(suite)
    for (case_id, target), r in answers.items():
        assert r.ok, (case_id, target, r.error)
        assert r.tool_calls, f"{case_id} on {target}: no tool call recorded (text {r.text!r})"
        choice = suite[case_id]["params"]["tool_choice"]
        if isinstance(choice, dict):
            assert [c.name for c in r.tool_calls] == [choice["function"]["name"]], case_id
        args = json.loads(r.tool_calls[0].arguments)
        assert isinstance(args, dict) and args, (case_id, r.tool_calls[0].arguments)
        assert len(r.chunk_times) > 1, f"{case_id} on {target}: the call was not streamed in pieces"
    s = summary_of(out)
    checks = s["categories"]["tool_call"]["checks"]
    assert checks["tool_calls_valid"]["baseline_pass_rate"] == 1.0, checks["tool_calls_valid"]
    assert checks["tool_calls_valid"]["candidate_pass_rate"] == 1.0
    # greedy fp32 with and without ngram speculation: the same calls, byte for byte
    assert checks["tool_calls_same_as_baseline"]["candidate_pass_rate"] == 1.0
    assert checks["exact"]["regressions"] == []
    assert s["categories"]["tool_call"]["identical_rate"] == 1.0


def test_real_tool_calls_show_in_the_report(tool_run: dict[str, Any]) -> None:
    html = (Path(tool_run["out"]) / "report.html").read_text(encoding="utf-8")
    assert "tool call: get_weather" in html and "tool call: convert_currency" in html
