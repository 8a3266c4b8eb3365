"""Options are declared once: `qualitycheck run` and the pytest gate accept the same settings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import qualitycheck.pipeline._run
import qualitycheck.verdict._summary  # noqa: F401
from qualitycheck.cli._main import build_parser
from qualitycheck.testserver import TestServer
from tests.helpers import qa_cases, write_suite

pytest_plugins = ["pytester"]


def _run_flags() -> set[str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    run = sub.choices["run"]  # type: ignore[attr-defined]
    return {s for a in run._actions for s in a.option_strings if s.startswith("--") and s != "--help"}


def test_every_run_flag_has_a_pytest_twin(pytester: pytest.Pytester) -> None:
    help_text = pytester.runpytest("--help").stdout.str()
    missing = [f for f in sorted(_run_flags()) if "--qc-" + f[2:] not in help_text]
    assert not missing, f"qualitycheck run flags without a --qc- twin in the pytest gate: {missing}"


def test_a_run_option_reaches_the_run_from_pytest(pytester: pytest.Pytester) -> None:
    """`--qc-repeats 2 --qc-no-preflight` set what `qualitycheck run --repeats 2 --no-preflight` sets."""
    suite = write_suite(pytester.path / "s.jsonl", qa_cases(2, checks={"contains": "42"}))
    out = pytester.path / "run"
    with TestServer(default="42") as b, TestServer(default="42") as c:
        res = pytester.runpytest(
            "--qc-baseline",
            b.url,
            "--qc-candidate",
            c.url,
            "--qc-model",
            "m",
            "--qc-suite",
            str(suite),
            "--qc-out",
            str(out),
            "--qc-repeats",
            "2",
            "--qc-no-preflight",
        )
    assert res.ret in (0, 1), res.stdout.str()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["repeats"] == 2
    assert summary["preflight"] is None  # --qc-no-preflight reached the run


def test_a_bad_shard_is_a_usage_error_in_both(pytester: pytest.Pytester, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from qualitycheck.cli import main

    suite = write_suite(tmp_path / "s.jsonl", qa_cases(1))
    assert main(["run", "--shard", "3/2", "--baseline", "http://x", "--candidate", "http://y", "--model", "m", "--suite", str(suite)]) == 2
    assert "--shard: expected I/N" in capsys.readouterr().err
    res = pytester.runpytest(
        "--qc-baseline", "http://x", "--qc-candidate", "http://y", "--qc-model", "m", "--qc-suite", str(suite), "--qc-shard", "3/2"
    )
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert "--qc-shard: expected I/N" in res.stderr.str()
