"""Helpers the end-to-end tests share: the CLI in a subprocess, configs, summaries."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest

SUITES = Path(__file__).with_name("suites")
MODEL = "smollm2-135m-instruct"

RELAXED_GUARDRAILS = {
    # ngram drafting on this 135M model accepts ~0.2-0.3 of draft tokens, and on a shared 2-core CPU
    # latency moves with other work: the e2e tests gate on quality, so these two are set loose here
    # (the seed's values are what the demo shows).
    "min_acceptance_rate": 0.05,
    "max_tpot_p95_regression": "400%",
    "max_error_rate": "1%",
    "max_quality_regression_cases": 0,
    "fallback_action": "disable_speculative_decoding_for_route",
}


CHECKOUT = Path(__file__).resolve().parents[2]


def checkout_env(**extra: str) -> dict[str, str]:
    """The environment for a subprocess that imports qualitycheck: this checkout's package first, whatever the cwd.

    From another folder, `python -m qualitycheck` would import the package the venv's editable install points at:
    the checkout scripts/dev.sh last set up, which in a second worktree is not the code under test.
    """
    path = os.pathsep.join(p for p in (str(CHECKOUT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, **extra}


def qc(*args: str, cwd: Path | None = None, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """Run the real `qualitycheck` CLI in a subprocess, as users and CI do."""
    return subprocess.run(
        [sys.executable, "-m", "qualitycheck", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=checkout_env(NO_COLOR="1", COLUMNS="200"),
    )


def write_config(path: Path, guardrails: dict[str, Any] | None = None, **run: Any) -> Path:
    import yaml

    body: dict[str, Any] = {"speculative_decoding_guardrails": guardrails or RELAXED_GUARDRAILS}
    if run:
        body["run"] = run
    path.write_text(yaml.safe_dump(body), encoding="utf-8")
    return path


def summary_of(out: Path) -> dict[str, Any]:
    return json.loads((out / "summary.json").read_text(encoding="utf-8"))


def explain(proc: subprocess.CompletedProcess[str]) -> str:
    """What a failed assertion shows: the CLI's own output, tail first."""
    return f"exit {proc.returncode}\n--- stderr (tail) ---\n{proc.stderr[-6000:]}\n--- stdout (tail) ---\n{proc.stdout[-2000:]}"


STRONG_EVIDENCE_P = 1e-4
"""A Holm p-value that a faithful candidate reaches at most about once in ten thousand runs: evidence far past the
test's alpha, which a biased comparison reaches at once (losing every pass of 4 cases × 4 samples: p near 1e-7)."""


def assert_no_sampled_loss(s: dict[str, Any], proc: subprocess.CompletedProcess[str]) -> None:
    """A faithful sampled candidate: no strong evidence of a drop anywhere (a check's pass rate, or the likelihood of its
    samples under the baseline model), and a verdict that follows the evidence it has.

    The sampled test holds its false alarms at its alpha (0.05; bench's `gate_sampled_false_alarm`), so a faithful
    candidate is failed on up to one run in twenty, each time at a p-value near alpha: a test asking for no alarm at
    all fails as often. What must never happen is evidence far past alpha for a drop that is not there, which is what
    a biased comparison gives (samples against a greedy floor, one side's samples miscounted or dropped).
    """
    quality = {g["route"]: g for g in s["guardrails"] if g["name"] == "max_quality_regression_cases"}
    assert quality, explain(proc)
    for cat, c in s["categories"].items():
        alarms = []
        cells = {name: check["sampled"] for name, check in c["checks"].items() if check.get("sampled")}
        if c.get("likelihood"):  # the samples under the baseline model: a shift either way is an alarm
            cells["likelihood"] = {**c["likelihood"], "decision": "drop" if c["likelihood"]["decision"] == "shift" else "-"}
        for name, sp in cells.items():
            p = sp["p_value_holm"] if sp.get("p_value_holm") is not None else sp["p_value"]
            assert p >= STRONG_EVIDENCE_P, (cat, name, sp)
            if sp["decision"] == "drop":
                alarms.append(name)
        routes = [quality[r] for r in c["routes"] if r in quality]
        if alarms:  # a marginal alarm, as often as alpha allows: the verdict still says what its evidence says
            assert c["verdict"] == "fail" and routes and all(g["passed"] is False for g in routes), (cat, alarms, c["verdict_reason"])
        else:
            assert c["verdict"] != "fail", (cat, c["verdict_reason"])
            assert all(g["passed"] is not False for g in routes), routes


def answer_of(raw: bytes, stream: bool) -> dict[str, Any]:
    """What a client assembles from one chat answer: its text, finish reason and usage.

    Streams are compared by this, not by their bytes: when vLLM's API server
    falls behind its engine it merges the tokens waiting for a request into
    one event, so where the events break depends on the machine's load, not
    on the answer (the ids and timestamps differ per request anyway).
    """
    if not stream:
        body = json.loads(raw)
        choice = body["choices"][0]
        return {"content": choice["message"]["content"], "finish_reason": choice["finish_reason"], "usage": body.get("usage")}
    events = [line[6:] for line in raw.decode().split("\n") if line.startswith("data: ")]
    assert events and events[-1] == "[DONE]", "the stream did not end with [DONE]"
    content, finish, usage = "", None, None
    for e in events[:-1]:
        event = json.loads(e)
        usage = event.get("usage") or usage
        for choice in event.get("choices") or []:
            content += (choice.get("delta") or {}).get("content") or ""
            finish = choice.get("finish_reason") or finish
    return {"content": content, "finish_reason": finish, "usage": usage}


def assert_demo_servers_gone(out: Path, log_prefix: str) -> None:
    """A demo's two servers answer no more: each log's first line is its command line, which names its port."""
    logs = sorted((out / "servers").glob(f"{log_prefix}-*.log"))
    assert len(logs) == 2, logs
    for log in logs:
        port = log.read_text(errors="replace").splitlines()[0].split("--port ")[1].split()[0]
        with pytest.raises(OSError):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
