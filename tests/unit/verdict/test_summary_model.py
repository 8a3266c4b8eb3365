"""summary.json is a typed model: the same file as before, and readers that load older files."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from qualitycheck.verdict._model import Summary, read_summary
from qualitycheck.verdict._summary import SUMMARY_NAME, build_summary, write_summary
from tests.unit.verdict.summary_scenarios import SCENARIOS, drift_features

GOLDEN = Path(__file__).parent / "golden"
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
            out[name] = write_summary(store.folder, build_summary(store, cfg))
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
        "summary.json changed (keys, order, values or types); if intended, rerun with QC_REGEN_GOLDEN=1 and review the diff")
    assert read_summary(written_for_golden[name]).to_json_text() == text  # a reader that rewrites the file changes nothing


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_a_reader_rewrites_any_summary_unchanged(name: str, written: dict[str, Path]) -> None:
    text = written[name].read_text(encoding="utf-8")
    assert read_summary(written[name]).to_json_text() == text


def test_an_older_summary_without_the_later_fields_still_loads(tmp_path: Path) -> None:
    """Contract 3's minimum: a file written before `routes`, `noise_floor`, `tolerated`, `slices`... existed."""
    old = {"format_version": 1, "verdict": "fail", "cases": 2, "targets": {"baseline": {"url": "http://b", "model": "m"}},
           "categories": {"qa": {"cases": 2, "identical_rate": 0.5, "verdict": "fail", "format_drift": {},
                                 "checks": {"exact": {"baseline_pass_rate": 1.0, "candidate_pass_rate": 0.5, "delta": -0.5,
                                                      "ci": [-1.0, 0.0], "p_value": 1.0, "regressions": ["q1"], "improvements": []}}}},
           "errors": {"baseline": {"count": 0, "rate": 0.0}}, "latency": {},
           "acceptance": {"rate": None, "mean_accepted_length": None, "draft_tokens": None, "accepted_tokens": None},
           "guardrails": [{"name": "max_quality_regression_cases", "threshold": 0, "observed": 1, "passed": False, "message": "1 case"}],
           "fallback": {"action": "disable_speculative_decoding_for_route", "routes": ["qa"]}}
    path = tmp_path / SUMMARY_NAME
    path.write_text(json.dumps(old), encoding="utf-8")
    s = read_summary(path)
    exact = s.categories["qa"].checks["exact"]
    assert exact.tolerated == [] and exact.counted == ["q1"] and s.guardrails[0].route == "*" and s.repeats == 1
    assert s.latency.baseline is None and s.preflight is None and s.not_evaluated == []
    assert Summary.model_validate_json(s.to_json_text()) == s
