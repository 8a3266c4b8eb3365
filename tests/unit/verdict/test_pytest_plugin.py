"""The pytest gate, driven through pytester against scripted test servers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import qualitycheck.pipeline._run
import qualitycheck.verdict._summary  # noqa: F401
from qualitycheck.testserver import TestServer
from tests.helpers import write_suite

pytest_plugins = ["pytester"]


def suite(path: Path) -> Path:
    return write_suite(
        path,
        [
            {"id": f"qa-{i}", "category": "qa", "messages": [{"role": "user", "content": f"q{i}?"}], "checks": {"exact": "42"}}
            for i in range(4)
        ],
    )


@pytest.fixture
def regressing_servers():
    with TestServer(default="42") as b, TestServer(default="42", answers={"q2?": "41"}) as c:
        yield b, c


def test_run_mode_collects_one_item_per_decision_and_fails_on_the_regression(pytester: pytest.Pytester, regressing_servers) -> None:
    b, c = regressing_servers
    s = suite(pytester.path / "s.jsonl")
    out = pytester.path / "run"
    cfg = pytester.path / "qc.yaml"
    cfg.write_text("run:\n  preflight: false\n  noise_floor: none  # one flip counts: the gate mechanics, not the floor, are under test\n")
    res = pytester.runpytest(
        "--qc-baseline",
        b.url,
        "--qc-candidate",
        c.url,
        "--qc-model",
        "m",
        "--qc-suite",
        str(s),
        "--qc-out",
        str(out),
        "--qc-config",
        str(cfg),
        "--junitxml",
        "junit.xml",
    )
    res.assert_outcomes(passed=1, failed=3)  # error rate passes; quality[qa], category qa and the regression fail
    assert res.ret == 1
    res.stdout.fnmatch_lines(
        [
            "*qualitycheck::regression::qa::exact::qa-2*",
            "*qa/qa-2: exact passed on the baseline and failed*",
            "*qualitycheck verdict: FAIL*",
        ]
    )
    junit = (pytester.path / "junit.xml").read_text()
    assert "qa/qa-2: exact passed on the baseline and failed on the candidate" in junit
    assert json.loads((out / "summary.json").read_text())["verdict"] == "fail"
    assert (out / "signoff.md").is_file()


def test_stored_run_regates_with_another_config_and_exit_follows_the_verdict(pytester: pytest.Pytester, regressing_servers) -> None:
    b, c = regressing_servers
    s = suite(pytester.path / "s.jsonl")
    out = pytester.path / "run"
    from qualitycheck.cli._main import main

    assert (
        main(
            [
                "run",
                "--baseline",
                b.url,
                "--candidate",
                c.url,
                "--model",
                "m",
                "--suite",
                str(s),
                "--out",
                str(out),
                "--no-preflight",
                "--no-noise-floor",
            ]
        )
        == 1
    )
    lenient = pytester.path / "qc.yaml"
    lenient.write_text("speculative_decoding_guardrails:\n  max_quality_regression_cases: 1\n  max_error_rate: '1%'\n")
    assert main(["gate", str(out), "-c", str(lenient)]) == 0
    res = pytester.runpytest("--qc-run", str(out), "--qc-config", str(lenient))
    assert res.ret == 0
    res.assert_outcomes(passed=3, xfailed=1)
    strict = pytester.path / "strict.yaml"
    strict.write_text("speculative_decoding_guardrails:\n  min_acceptance_rate: 0.55\n  max_quality_regression_cases: 1\n")
    res = pytester.runpytest("--qc-run", str(out), "--qc-config", str(strict))
    assert res.ret == 1  # acceptance was never measured: inconclusive
    res.stdout.fnmatch_lines(["*guardrail::min_acceptance_rate*", "*not evaluated*"])


def test_xdist_workers_collect_the_same_items_from_the_stored_summary(pytester: pytest.Pytester, regressing_servers) -> None:
    pytest.importorskip("xdist")
    b, c = regressing_servers
    s = suite(pytester.path / "s.jsonl")
    out = pytester.path / "run"
    from qualitycheck.cli._main import main

    main(
        [
            "run",
            "--baseline",
            b.url,
            "--candidate",
            c.url,
            "--model",
            "m",
            "--suite",
            str(s),
            "--out",
            str(out),
            "--no-preflight",
            "--no-noise-floor",
        ]
    )
    res = pytester.runpytest_subprocess("-n", "2", "--qc-run", str(out), "--junitxml", "j.xml")
    res.assert_outcomes(passed=1, failed=3)
    assert res.ret == 1
    assert "exact passed on the baseline and failed" in (pytester.path / "j.xml").read_text()


def test_without_qc_options_the_plugin_does_nothing(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_ok():\n    assert True\n")
    res = pytester.runpytest()
    res.assert_outcomes(passed=1)
    assert "qualitycheck verdict" not in res.stdout.str() and "qualitycheck::" not in res.stdout.str()


def test_bad_input_is_a_usage_error_not_a_traceback(pytester: pytest.Pytester) -> None:
    res = pytester.runpytest("--qc-run", str(pytester.path / "nowhere"))
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["*qualitycheck:*not a qualitycheck run folder*"])


def test_repository_conftest_gates_instead_of_running_the_unit_tests(tmp_path: Path, regressing_servers) -> None:
    import subprocess
    import sys

    b, c = regressing_servers
    s = suite(tmp_path / "s.jsonl")
    out = tmp_path / "run"
    from qualitycheck.cli._main import main

    main(
        [
            "run",
            "--baseline",
            b.url,
            "--candidate",
            c.url,
            "--model",
            "m",
            "--suite",
            str(s),
            "--out",
            str(out),
            "--no-preflight",
            "--no-noise-floor",
        ]
    )
    repo = Path(__file__).resolve().parents[3]
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--qc-run", str(out), "-q"], cwd=repo, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 1, proc.stdout[-2000:]
    assert "1 passed" in proc.stdout and "3 failed" in proc.stdout  # the gate items only, no unit test
