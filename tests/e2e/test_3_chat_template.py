"""A candidate serving a different chat template: preflight catches it and the gate fails naming it.

The candidate is the same model started with `--chat-template` pointing at the
model's own template with another default system prompt — the kind of drift
that a redeploy with new serving flags brings, and that makes every answer
differ for a reason that has nothing to do with speculative decoding.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.e2e.e2e_helpers import MODEL, SUITES, explain, qc, summary_of, write_config

pytestmark = [pytest.mark.e2e, pytest.mark.engines("fp32", "fp32-template")]


@pytest.fixture(scope="module")
def template_servers(engines: Any) -> Any:
    return engines.use("fp32", "fp32-template")


def test_preflight_command_names_the_template(template_servers: Any) -> None:
    proc = qc(
        "preflight",
        "--baseline",
        template_servers["fp32"].url,
        "--candidate",
        template_servers["fp32-template"].url,
        "--model",
        MODEL,
        "--suite",
        str(SUITES / "fp32.jsonl"),
    )
    assert proc.returncode == 1, explain(proc)
    assert "template" in (proc.stdout + proc.stderr).lower(), explain(proc)


def test_run_with_drifted_template_fails_the_gate_naming_it(template_servers: Any, tmp_path: Any) -> None:
    out = tmp_path / "run"
    proc = qc(
        "run",
        "-c",
        str(write_config(tmp_path / "qc.yaml")),
        "--baseline",
        template_servers["fp32"].url,
        "--candidate",
        template_servers["fp32-template"].url,
        "--model",
        MODEL,
        "--suite",
        str(SUITES / "fp32.jsonl"),
        "--out",
        str(out),
        "--concurrency",
        "4",
    )
    assert proc.returncode == 1, explain(proc)
    s = summary_of(out)
    pre = s["preflight"]
    assert pre["ok"] is False
    failed = {c["name"]: c for c in pre["checks"] if c["passed"] is False}
    assert "tokenize" in failed, "the same messages tokenize differently once the template differs"
    assert any("template" in json.dumps(c).lower() for c in failed.values()), failed
    assert s["verdict"] == "fail"
    failed_rules = [g for g in s["guardrails"] if g["passed"] is False]
    assert any("template" in (g["name"] + " " + g["message"]).lower() for g in failed_rules), (
        f"the gate must fail on the preflight and say it is the chat template: {failed_rules}"
    )
