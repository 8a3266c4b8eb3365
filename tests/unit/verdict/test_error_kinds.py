"""Errors explain themselves: summary.json, the terminal, the sign-off and the report say why requests failed."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from qualitycheck.cli import main
from qualitycheck.core._config_file import Config
from qualitycheck.pipeline._run import finish
from qualitycheck.testserver import Fault, TestServer
from qualitycheck.verdict._model import read_summary
from qualitycheck.verdict._summary import SUMMARY_NAME
from tests.helpers import qa_cases, write_suite
from tests.unit.verdict.verdict_builders import make_store

NOT_SERVED = "The model `test-model` does not exist."


def _run(b: TestServer, c: TestServer, suite: Path, out: Path, *extra: str) -> int:
    return main(
        [
            "run",
            "--baseline",
            b.url,
            "--candidate",
            c.url,
            "--model",
            "test-model",
            "--suite",
            str(suite),
            "--out",
            str(out),
            "--no-preflight",
            "--concurrency",
            "2",
            *extra,
        ]
    )


def test_a_candidate_that_does_not_serve_the_model_says_so_everywhere(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    suite = write_suite(tmp_path / "s.jsonl", qa_cases(6))  # fewer than the runner's fail-fast window: the run completes
    out = tmp_path / "run"
    with TestServer() as b, TestServer(model="other", strict_model=True) as c:
        assert _run(b, c, suite, out) == 1
    printed = capsys.readouterr().err

    data = json.loads((out / SUMMARY_NAME).read_text(encoding="utf-8"))
    cand = data["errors"]["candidate"]
    assert (cand["count"], cand["requests"], cand["rate"]) == (6, 6, 1.0)  # Contract 3's fields, as before
    assert [k["kind"] for k in cand["kinds"]] == ["http_404"] and cand["kinds"][0]["count"] == 6
    assert NOT_SERVED in cand["kinds"][0]["message"]
    assert data["errors"]["baseline"] == {"count": 0, "requests": 6, "rate": 0.0, "kinds": []}
    error_rate = next(g for g in data["guardrails"] if g["name"] == "max_error_rate")
    assert "http_404 × 6" in error_rate["message"] and NOT_SERVED in error_rate["message"]

    flat = " ".join(printed.split())  # the terminal summary, whatever its layout
    assert "http_404" in flat and NOT_SERVED in flat

    signoff = (out / "signoff.md").read_text(encoding="utf-8")
    assert re.search(r"^- candidate: .*errors 6/6 \(100\.0%\)\n  - http_404 × 6: .*" + re.escape(NOT_SERVED), signoff, re.M), signoff

    html = (out / "report.html").read_text(encoding="utf-8")
    table = re.search(r'<table id="errors">.*?</table>', html, re.S)
    assert table is not None, "report.html has no errors table"
    assert "http_404" in table.group(0) and "The model `test-model` does not exist." in table.group(0)


def test_a_timeout_and_a_reset_mid_stream_are_told_apart(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    suite = write_suite(tmp_path / "s.jsonl", qa_cases(6))
    out = tmp_path / "run"
    faults = [
        Fault(kind="hang", match="question qa 1?", times=None),
        Fault(kind="reset", match="question qa 2?", times=None, after_chunks=2),
    ]
    answer = "The answer to this question is forty two."
    with TestServer(default=answer) as b, TestServer(default=answer, faults=faults) as c:
        assert _run(b, c, suite, out, "--timeout", "0.5", "--retries", "0") == 1
    capsys.readouterr()
    s = read_summary(out / SUMMARY_NAME)
    kinds = {k.kind: k for k in s.errors["candidate"].kinds}
    assert set(kinds) == {"timeout", "stream_cut"}, kinds
    assert kinds["timeout"].count == 1 and kinds["stream_cut"].count == 1
    assert all(k.message for k in kinds.values())
    assert s.errors["candidate"].count == 2 and s.errors["baseline"].kinds == []


def test_the_kinds_are_folded_from_the_summary_walk_not_a_pass_of_their_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Errors add no read of the store: each failed response is tallied as the one walk after scoring reads it."""
    from tests.unit.test_one_walk import READERS, _counting

    rows = [
        {
            "id": f"c{i}",
            "category": "qa",
            "texts": {"baseline": "Yes.", "candidate": None if i % 3 == 0 else "Yes."},
            "checks": {"exact": {"baseline": "pass", "candidate": "error" if i % 3 == 0 else "pass"}},
        }
        for i in range(9)
    ]
    with make_store(tmp_path, rows) as store:
        calls = _counting(monkeypatch)
        finish(store, Config(), score=False, report=False)
        # as in test_one_walk: the stored comparisons are read beside the walk, not in a pass of their own
        assert calls == {**{name: 0 for name in READERS}, "by_case": 1, "comparisons_with_inputs": 1}, calls
    s = read_summary(tmp_path / SUMMARY_NAME)
    assert [(k.kind, k.count, k.message) for k in s.errors["candidate"].kinds] == [("http_503", 3, "503")]
    assert s.errors["candidate"].count == 3 and s.errors["baseline"].kinds == []
