"""summary.json is a typed model: the same file as before, a published schema, and readers that load older files."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from qualitycheck.cli._main import main
from qualitycheck.pipeline._run import summarize
from qualitycheck.testserver import TestServer
from qualitycheck.verdict._model import Summary, read_summary, summary_json_schema
from qualitycheck.verdict._summary import SUMMARY_NAME, write_summary
from tests.helpers import qa_cases, write_suite
from tests.unit.verdict.summary_scenarios import SCENARIOS, drift_features

GOLDEN = Path(__file__).parent / "golden"
SCHEMA_FILE = Path(__file__).resolve().parents[3] / "docs" / "schema" / "summary.schema.json"
ADDED = {"tolerated"}
"""Fields the model added after the golden files were written (by the dict-built summary)."""


def _without_added(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_added(v) for k, v in value.items() if k not in ADDED}
    if isinstance(value, list):
        return [_without_added(v) for v in value]
    return value


def _write_all(folder: Path) -> dict[str, Path]:
    out = {}
    for name, make in SCENARIOS.items():
        store, cfg = make(folder / name)
        with store:
            out[name] = write_summary(store.folder, summarize(store, cfg))  # as `finish` writes it, sign-off included
    return out


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every scenario's summary.json as write_summary writes it, with scoring's own format features."""
    return _write_all(tmp_path_factory.mktemp("real"))


@pytest.fixture(scope="module")
def written_for_golden(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The same with the golden files' fixed format features (`summary_scenarios.drift_features`)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("qualitycheck.scoring._format.format_features", drift_features)
        return _write_all(tmp_path_factory.mktemp("golden"))


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_the_model_writes_every_field_exactly_as_the_dict_did(name: str, written_for_golden: dict[str, Path]) -> None:
    text = written_for_golden[name].read_text(encoding="utf-8")
    got = json.dumps(_without_added(json.loads(text)), indent=2) + "\n"
    if os.environ.get("QC_REGEN_GOLDEN") == "1":  # after an intended change of summary.json: rewrite, then review the diff
        (GOLDEN / f"{name}.json").write_text(got, encoding="utf-8")
    assert got == (GOLDEN / f"{name}.json").read_text(encoding="utf-8"), (
        "summary.json changed (keys, order, values or types); if intended, rerun with QC_REGEN_GOLDEN=1 and review the diff"
    )
    assert read_summary(written_for_golden[name]).to_json_text() == text  # a reader that rewrites the file changes nothing


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_a_reader_rewrites_any_summary_unchanged(name: str, written: dict[str, Path]) -> None:
    text = written[name].read_text(encoding="utf-8")
    assert read_summary(written[name]).to_json_text() == text


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_written_summary_validates_against_the_published_schema(name: str, written: dict[str, Path]) -> None:
    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(schema)
    errors = sorted(Draft202012Validator(schema).iter_errors(json.loads(written[name].read_text(encoding="utf-8"))), key=str)
    assert not errors, [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in errors[:5]]


def test_a_real_run_writes_a_summary_the_schema_accepts(tmp_path: Path) -> None:
    """Through the CLI: preflight, /metrics windows per category, a control, repeats, an error."""
    cases = qa_cases(4, "qa", checks={"exact": "42"}) + qa_cases(2, "json", tags={"route": "billing"}, checks={"contains": "42"})
    suite = write_suite(tmp_path / "s.jsonl", cases)
    with (
        TestServer(default="42") as b,
        TestServer(default="42", answers={"qa 2?": "41"}, speculative={"k": 3, "acceptance": 0.5}) as c,
        TestServer(default="42", answers={"qa 1?": "43"}) as k,
    ):
        rc = main(
            [
                "run",
                "--baseline",
                b.url,
                "--candidate",
                c.url,
                "--control",
                k.url,
                "--model",
                "test-model",
                "--suite",
                str(suite),
                "--out",
                str(tmp_path / "run"),
                "--repeats",
                "2",
                "--acceptance-by-category",
            ]
        )
    assert rc in (0, 1)
    data = json.loads((tmp_path / "run" / SUMMARY_NAME).read_text(encoding="utf-8"))
    assert data["preflight"] and data["acceptance"]["rate"] is not None and data["latency"]["control"]
    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    errors = list(Draft202012Validator(schema).iter_errors(data))
    assert not errors, [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in errors[:5]]


def test_the_committed_schema_is_what_the_command_prints(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema", "summary"]) == 0
    printed = capsys.readouterr().out
    assert printed == SCHEMA_FILE.read_text(encoding="utf-8"), "run `qualitycheck schema summary > docs/schema/summary.schema.json`"
    schema = json.loads(printed)
    assert schema == summary_json_schema() and schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert {"verdict", "categories", "guardrails", "fallback"} <= set(schema["required"])


def test_an_unknown_schema_name_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["schema", "report"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'report'" in err and "summary" in err


def test_an_older_summary_without_the_later_fields_still_loads(tmp_path: Path) -> None:
    """Contract 3's minimum: a file written before `routes`, `noise_floor`, `tolerated`, `slices`... existed."""
    old = {
        "format_version": 1,
        "verdict": "fail",
        "cases": 2,
        "targets": {"baseline": {"url": "http://b", "model": "m"}},
        "categories": {
            "qa": {
                "cases": 2,
                "identical_rate": 0.5,
                "verdict": "fail",
                "format_drift": {},
                "checks": {
                    "exact": {
                        "baseline_pass_rate": 1.0,
                        "candidate_pass_rate": 0.5,
                        "delta": -0.5,
                        "ci": [-1.0, 0.0],
                        "p_value": 1.0,
                        "regressions": ["q1"],
                        "improvements": [],
                    }
                },
            }
        },
        "errors": {"baseline": {"count": 0, "rate": 0.0}},
        "latency": {},
        "acceptance": {"rate": None, "mean_accepted_length": None, "draft_tokens": None, "accepted_tokens": None},
        "guardrails": [{"name": "max_quality_regression_cases", "threshold": 0, "observed": 1, "passed": False, "message": "1 case"}],
        "fallback": {"action": "disable_speculative_decoding_for_route", "routes": ["qa"]},
    }
    path = tmp_path / SUMMARY_NAME
    path.write_text(json.dumps(old), encoding="utf-8")
    s = read_summary(path)
    exact = s.categories["qa"].checks["exact"]
    assert exact.tolerated == [] and exact.counted == ["q1"] and s.guardrails[0].route == "*" and s.repeats == 1
    assert s.latency.baseline is None and s.preflight is None and s.not_evaluated == []
    assert Summary.model_validate_json(s.to_json_text()) == s
