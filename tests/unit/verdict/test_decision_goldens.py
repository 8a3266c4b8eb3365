"""The quality decision holds to goldens written before it moved into one function.

Every scenario of `decision_scenarios` (the summary scenarios, and stores that
reach each branch of the decision: a floor that explains, a thin floor, sampled
drops, per-route overrides), and the bundled suites run against the test
server, must give the same summary.json, signoff.md and verdict. p-values may
differ in their last bits where one implementation of a test replaced another
(`tests.helpers.P_TOLERANCE`); nothing else may. Regenerate with `QC_REGEN_GOLDENS=1` only
for a change of behaviour that the commit names.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from qualitycheck.cli._main import main
from qualitycheck.pipeline._run import summarize
from qualitycheck.testserver import TestServer
from qualitycheck.verdict._summary import write_summary
from tests.helpers import json_diff
from tests.unit.verdict.decision_scenarios import DECISION_SCENARIOS
from tests.unit.verdict.summary_scenarios import drift_features

GOLDEN = Path(__file__).parent / "golden_decision"
SUITES = Path(__file__).resolve().parents[3] / "suites"
REGEN = bool(os.environ.get("QC_REGEN_GOLDENS"))


def _hold(name: str, summary: dict[str, Any], signoff: str) -> None:
    folder = GOLDEN / name
    if REGEN:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        (folder / "signoff.md").write_text(signoff, encoding="utf-8")
        return
    expected = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    expected_signoff = (folder / "signoff.md").read_text(encoding="utf-8")
    diffs = [d for d in json_diff(expected, summary) if not d.startswith(".signoff:")]  # the sign-off is compared as text below
    diffs += json_diff(expected.get("signoff"), summary.get("signoff"), ".signoff") and ["summary.json's signoff differs (as signoff.md)"]
    lines = difflib.unified_diff(expected_signoff.splitlines(), signoff.splitlines(), "golden signoff.md", "signoff.md", lineterm="", n=0)
    assert not diffs and signoff == expected_signoff, f"{name} differs from its golden:\n" + "\n".join([*sorted(diffs)[:40], *lines])


@pytest.mark.parametrize("name", sorted(DECISION_SCENARIOS))
def test_each_scenario_decides_as_before(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("qualitycheck.scoring._format.format_features", drift_features)
    store, cfg = DECISION_SCENARIOS[name](tmp_path / name)
    with store:
        summary = summarize(store, cfg)
        path = write_summary(store.folder, summary)
    _hold(name, json.loads(path.read_text(encoding="utf-8")), summary.signoff or "")


def _answer(side: str) -> Any:
    """A deterministic answer per prompt: JSON for some, prose for others; the candidate garbles one prompt in five."""

    def answer(body: dict[str, Any]) -> str:
        messages = body.get("messages") or [{"content": body.get("prompt", "")}]
        prompt = str(messages[-1].get("content", ""))
        h = int(hashlib.sha256(prompt.encode()).hexdigest()[:8], 16)
        if side == "candidate" and h % 5 == 0:
            return "garbled ¿¿ output"
        if h % 3 == 0:
            return json.dumps({"answer": prompt[:20], "ok": True})
        words = re.findall(r"[A-Za-z]+", prompt)
        return " ".join(words[:12]) or "OK."

    return answer


_VOLATILE_SUMMARY = ("latency", "gpu")
_PORT = re.compile(r"127\.0\.0\.1:\d+")
_LATENCY_LINE = re.compile(r"^.*(TTFT|TPOT|ITL|latency|ms\b|GPU).*\n?", re.MULTILINE)


def _normalised(summary: dict[str, Any], signoff: str, tmp: Path) -> tuple[dict[str, Any], str]:
    """The test server's summary without what differs run to run: timings, ports and the run's temporary folder."""

    def steady(text: str) -> str:
        return _LATENCY_LINE.sub("", _PORT.sub("HOST", text).replace(str(tmp), "TMP"))

    for key in _VOLATILE_SUMMARY:
        summary.pop(key, None)
    if summary.get("likelihood"):
        summary["likelihood"].pop("wall_s", None)  # the stage's time
    summary["signoff"] = steady(summary.get("signoff") or "")
    return json.loads(_PORT.sub("HOST", json.dumps(summary)).replace(str(tmp), "TMP")), steady(signoff)


@pytest.mark.parametrize("floor", ["default", "control"])
def test_the_bundled_suites_decide_as_before(floor: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every bundled suite against the test server: the default floor (the baseline asked again), and a control."""
    with (
        TestServer(default=_answer("baseline")) as base,
        TestServer(default=_answer("candidate")) as cand,
        TestServer(default=_answer("baseline")) as ctrl,
    ):
        out = tmp_path / "run"
        extra = ["--control", ctrl.url] if floor == "control" else []
        argv = ["run", "--baseline", base.url, "--candidate", cand.url, "--model", "test-model", "--suite", str(SUITES)]
        code = main([*argv, "--out", str(out), "--no-preflight", *extra])
    capsys.readouterr()
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    signoff = (out / "signoff.md").read_text(encoding="utf-8")
    summary, signoff = _normalised(summary, signoff, tmp_path)
    summary["exit_code"] = code
    _hold(f"suites_{floor}", summary, signoff)
