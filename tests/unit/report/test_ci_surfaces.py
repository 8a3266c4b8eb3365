"""CI surfaces: GitHub Actions' step summary and `::error` annotations on suite lines, and `--mlflow` to a real tracking store."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from qualitycheck.cli._main import main
from qualitycheck.report._github import MAX_ANNOTATIONS, error_commands, escape_data, escape_property
from qualitycheck.testserver import TestServer
from tests.helpers import need_extra, qa_cases, run_argv, write_suite


def _actions(monkeypatch: pytest.MonkeyPatch, workspace: Path) -> Path:
    summary = workspace / "step_summary.md"
    summary.write_text("## earlier step\n", encoding="utf-8")
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    monkeypatch.setenv("GITHUB_WORKSPACE", str(workspace))
    return summary


def _suite(workspace: Path) -> Path:
    cases = qa_cases(4, checks={"contains": ["42"]})
    cases[2]["id"] = "qa:2,odd"  # a property separator in the id: escaped in the title
    return write_suite(workspace / "suites" / "risky, cases.jsonl", cases)


def _errors(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("::")]


def test_run_and_gate_point_each_counted_regression_at_its_suite_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    suite, run = _suite(tmp_path), tmp_path / "runs" / "r1"
    step_summary = _actions(monkeypatch, tmp_path)
    with TestServer(default="42") as b, TestServer(default="42", answers={"question qa 1?": "41", "question qa 2?": "forty-one"}) as c:
        assert main(run_argv(b.url, c.url, suite, run, "--no-noise-floor", model="m")) == 1
    out = capsys.readouterr().out
    expected = [
        "::error file=suites/risky%2C cases.jsonl,line=2,title=qualitycheck%3A qa-1 regressed (contains)::"
        "case qa-1 (qa): contains passed on the baseline and failed on the candidate; it counts against the quality guardrail (verdict fail)",
        "::error file=suites/risky%2C cases.jsonl,line=3,title=qualitycheck%3A qa%3A2%2Codd regressed (contains)::"
        "case qa:2,odd (qa): contains passed on the baseline and failed on the candidate; it counts against the quality guardrail (verdict fail)",
    ]
    assert sorted(_errors(out)) == expected
    signoff = (run / "signoff.md").read_text(encoding="utf-8")
    assert step_summary.read_text(encoding="utf-8") == "## earlier step\n" + signoff.rstrip("\n") + "\n\n"

    # gate DIR, from another folder: the locations come from the run store alone
    monkeypatch.chdir(tmp_path / "runs")
    assert main(["gate", str(run)]) == 1
    assert sorted(_errors(capsys.readouterr().out)) == expected
    assert step_summary.read_text(encoding="utf-8").count(signoff.rstrip("\n")) == 2

    monkeypatch.delenv("GITHUB_ACTIONS")
    assert main(["gate", str(run)]) == 1
    assert _errors(capsys.readouterr().out) == []


def test_a_store_written_before_cases_kept_their_line_still_annotates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    suite, run = _suite(tmp_path), tmp_path / "run"
    with TestServer(default="42") as b, TestServer(default="42", answers={"question qa 1?": "41"}) as c:
        assert main(run_argv(b.url, c.url, suite, run, "--no-noise-floor", model="m")) == 1
    db = sqlite3.connect(run / "run.sqlite")
    with db:
        db.execute("UPDATE cases SET body = json_remove(body, '$._file', '$._line')")
    db.close()
    _actions(monkeypatch, tmp_path)
    capsys.readouterr()
    assert main(["gate", str(run)]) == 1
    (line,) = _errors(capsys.readouterr().out)
    assert line.startswith("::error title=qualitycheck%3A qa-1 regressed (contains)::case qa-1 (qa)")


def test_workflow_command_escaping_follows_the_actions_toolkit() -> None:
    assert escape_data("50% of\r\nlines") == "50%25 of%0D%0Alines"
    assert escape_property("a:b,c%\n") == "a%3Ab%2Cc%25%0A"


def test_annotations_stop_at_githubs_limit_and_count_the_rest(tmp_path: Path) -> None:
    from qualitycheck.verdict._model import CategorySummary, CheckSummary, Summary

    ids = [f"c{i:03d}" for i in range(MAX_ANNOTATIONS + 7)]
    check = CheckSummary.model_construct(regressions=ids, tolerated=[], counted=ids)
    summary = Summary.model_construct(verdict="fail", categories={"qa": CategorySummary.model_construct(checks={"exact": check})})

    class NoPlaces:
        def case_locations(self, wanted: object) -> dict[str, tuple[None, None]]:
            return {}

    lines = error_commands(summary, NoPlaces())  # type: ignore[arg-type]
    assert len(lines) == MAX_ANNOTATIONS + 1
    assert lines[-1] == "::notice title=qualitycheck::7 more regressed case(s): see report.html"


@pytest.fixture(scope="module")
def mlflow_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One SQLite tracking store for the module: creating one migrates its schema, which takes seconds."""
    need_extra("mlflow", "mlflow")
    from mlflow.tracking import MlflowClient

    folder = tmp_path_factory.mktemp("mlflow")
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(folder)  # the store's artifact root is ./mlruns where it is created: never the checkout
        MlflowClient(tracking_uri=uri).search_experiments()
    return uri


def test_mlflow_logs_the_figures_and_files_to_a_real_sqlite_tracking_store(
    mlflow_store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from mlflow.tracking import MlflowClient

    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
    uri = mlflow_store
    suite, run = write_suite(tmp_path / "s.jsonl", qa_cases(3, checks={"contains": ["42"]})), tmp_path / "run"
    with TestServer(default="42") as b, TestServer(default="42") as c:
        assert main(run_argv(b.url, c.url, suite, run, "--mlflow", uri, model="m")) == 0
    assert "logged to MLflow" in capsys.readouterr().err
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("qualitycheck")
    (logged,) = client.search_runs([experiment.experiment_id])
    summary = json.loads((run / "summary.json").read_text(encoding="utf-8"))
    metrics = logged.data.metrics
    assert metrics["cases"] == 3 and metrics["verdict.pass"] == 1.0
    assert (
        metrics["categories.qa.checks.contains.candidate_pass_rate"]
        == summary["categories"]["qa"]["checks"]["contains"]["candidate_pass_rate"]
    )
    assert metrics["categories.qa.checks.contains.regressions.count"] == 0
    assert metrics["errors.candidate.rate"] == 0.0
    (guardrail,) = [g for g in summary["guardrails"] if g["name"] == "max_error_rate"]
    assert metrics["guardrails.max_error_rate.passed"] == (1.0 if guardrail["passed"] else 0.0)
    assert logged.data.tags["qualitycheck.verdict"] == "pass" and logged.info.run_name == "run"
    assert logged.info.status == "FINISHED"
    names = sorted(a.path for a in client.list_artifacts(logged.info.run_id))
    assert names == ["report.html", "signoff.md", "summary.json"]
    got = Path(client.download_artifacts(logged.info.run_id, "signoff.md", str(tmp_path / "dl")))
    assert got.read_bytes() == (run / "signoff.md").read_bytes()

    # the stages redone from the store log a run of their own
    assert main(["gate", str(run), "--mlflow", uri]) == 0
    assert len(client.search_runs([experiment.experiment_id])) == 2

    # and so does a comparison of two stored runs (which needs their preflight profiles)
    with TestServer(default="42") as b, TestServer(default="42") as c:
        for name in ("a", "b"):
            assert main(run_argv(b.url, c.url, suite, tmp_path / name, preflight=True)) == 0
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "ab"), "--mlflow", uri]) == 0
    compared = [r for r in client.search_runs([experiment.experiment_id]) if r.info.run_name == "ab"]
    assert len(compared) == 1 and compared[0].data.tags["qualitycheck.verdict"] == "pass"


pytest_plugins = ["pytester"]


def test_the_pytest_gate_logs_to_mlflow_with_qc_mlflow(
    mlflow_store: str, tmp_path: Path, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mlflow.tracking import MlflowClient

    suite, run = write_suite(tmp_path / "s.jsonl", qa_cases(2, checks={"contains": ["42"]})), tmp_path / "run"
    with TestServer(default="42") as b, TestServer(default="42") as c:
        assert main(run_argv(b.url, c.url, suite, run, model="m")) == 0
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "pytest-gate")
    res = pytester.runpytest("--qc-run", str(run), "--qc-mlflow", mlflow_store)
    res.assert_outcomes(passed=len(json.loads((run / "summary.json").read_text())["guardrails"]) + 1)
    client = MlflowClient(tracking_uri=mlflow_store)
    (logged,) = client.search_runs([client.get_experiment_by_name("pytest-gate").experiment_id])
    assert logged.data.metrics["verdict.pass"] == 1.0


def test_mlflow_problems_are_said_before_and_after_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import sys

    suite = write_suite(tmp_path / "s.jsonl", qa_cases(2))
    with TestServer(default="42") as b, TestServer(default="42") as c:
        monkeypatch.setitem(sys.modules, "mlflow", None)  # the extra not installed: refused before any request
        assert main(run_argv(b.url, c.url, suite, tmp_path / "run", "--mlflow", "sqlite:///x.db", model="m")) == 2
        assert "pip install 'qualitycheck[mlflow]'" in capsys.readouterr().err
        assert b.requests() == [] and c.requests() == []
        monkeypatch.undo()
        need_extra("mlflow", "mlflow")
        monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
        monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
        code = main(run_argv(b.url, c.url, suite, tmp_path / "run", "--mlflow", "http://127.0.0.1:9", model="m"))
    err = capsys.readouterr().err
    assert code == 3, err
    assert "--mlflow http://127.0.0.1:9: could not log the run" in err and "the run itself is complete in" in err
    assert (tmp_path / "run" / "summary.json").is_file()
