"""`qualitycheck import openai-evals`: openai/evals' registry files and README samples (tests/fixtures/imports/README.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import answer_statuses

from .conftest import FIXTURES, imported, run_import

EV = FIXTURES / "openai_evals"


def test_without_a_registry_each_sample_is_exact_against_its_ideal(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out = tmp_path / "evals.jsonl"
    code, _, err = run_import(capsys, "openai-evals", str(EV / "test_match.samples.jsonl"), "--out", str(out))
    assert code == 0 and "no --registry given" in err
    cases = imported(out)
    first = cases["test_match-1"]
    assert first.category == "test_match"
    assert first.messages == [
        {"role": "system", "content": "Complete the phrase as concisely as possible."},
        {"role": "user", "content": "Once upon a "},
    ]
    assert first.checks.exact.expected == "time"
    assert first.source is not None and first.source.endswith("test_match.samples.jsonl:1")
    # a list of ideals without a class: the answer (stripped) must be one of them
    code, _, _ = run_import(capsys, "openai-evals", str(EV / "test_fuzzy_match.samples.jsonl"), "--out", str(out))
    season = imported(out)["test_fuzzy_match-2"]
    assert answer_statuses(season, {"Season 11": "", " 11\n": "", "Season 11 of the show": ""}) == {
        "Season 11": {"regex": "pass"},
        " 11\n": {"regex": "pass"},
        "Season 11 of the show": {"regex": "fail"},
    }
    assert season.messages is not None and season.messages[1] == {
        "role": "system",
        "content": "What's the capital of France?",
        "name": "example_user",
    }


def test_match_is_a_prefix_test_at_temperature_zero_found_through_the_id(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """openai/evals' Match passes an answer that *starts with* an ideal (evals/api.py: sampled.startswith(option))."""
    out = tmp_path / "evals.jsonl"
    argv = ["openai-evals", str(EV / "test_match.samples.jsonl"), "--registry", str(EV / "born-first.yaml"), "--eval", "born-first"]
    code, _, err = run_import(capsys, *argv, "--out", str(out))
    assert code == 0, err
    case = imported(out)["born-first-2"]  # ideal: George Washington
    assert case.category == "born-first" and case.params == {"temperature": 0}
    assert answer_statuses(case, {"George Washington, in 1789.": "", "It was George Washington.": "", "george washington": ""}) == {
        "George Washington, in 1789.": {"regex": "pass"},
        "It was George Washington.": {"regex": "fail"},
        "george washington": {"regex": "fail"},
    }


def test_includes_follows_its_ignore_case_argument(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out = tmp_path / "evals.jsonl"
    samples, registry = str(EV / "test_fuzzy_match.samples.jsonl"), str(EV / "test-basic.yaml")
    assert run_import(capsys, "openai-evals", samples, "--registry", registry, "--eval", "test-includes", "--out", str(out))[0] == 0
    sensitive = imported(out)["test-includes-1"]
    assert sensitive.checks.contains.any == ["Millie Bobby Brown"] and sensitive.checks.contains.ignore_case is False
    assert answer_statuses(sensitive, {"It is millie bobby brown": ""})["It is millie bobby brown"] == {"contains": "fail"}
    assert (
        run_import(capsys, "openai-evals", samples, "--registry", registry, "--eval", "test-includes-ignore-case", "--out", str(out))[0]
        == 0
    )
    insensitive = imported(out)["test-includes-ignore-case-1"]
    assert answer_statuses(insensitive, {"It is millie bobby brown": ""})["It is millie bobby brown"] == {"contains": "pass"}


def test_fuzzy_match_is_contains_ignoring_case_and_the_import_says_what_differs(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out = tmp_path / "evals.jsonl"
    argv = [
        "openai-evals",
        str(EV / "test_fuzzy_match.samples.jsonl"),
        "--registry",
        str(EV / "test-basic.yaml"),
        "--eval",
        "test-fuzzy-match",
    ]
    code, _, err = run_import(capsys, *argv, "--out", str(out))
    assert code == 0
    assert "FuzzyMatch is imported as contains ignoring case" in err and "articles" in err
    case = imported(out)["test-fuzzy-match-2"]
    assert case.checks.contains.any == ["Season 11", "11"] and case.checks.contains.ignore_case is True
    assert case.params == {"temperature": 0, "max_tokens": 100}


def test_another_eval_class_is_refused_by_name(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    registry = EV / "test-basic.yaml"
    argv = ["openai-evals", str(EV / "test_match.samples.jsonl"), "--registry", str(registry), "--eval", "test-match"]
    code, _, err = run_import(capsys, *argv, "--out", str(tmp_path / "e.jsonl"))
    assert code == 2
    assert (
        f"{registry}: test-match.s1.simple-v0.class: the eval class 'evals.elsuite.test.match:TestMatch' has no qualitycheck mapping" in err
    )


def test_a_bad_sample_is_named_with_its_line_and_field(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    src = tmp_path / "samples.jsonl"
    src.write_text('{"input": "2+2?", "ideal": "4"}\n\n{"input": "3+3?"}\n{"input": "x", "ideal": [1]}\n', encoding="utf-8")
    code, _, err = run_import(capsys, "openai-evals", str(src), "--out", str(tmp_path / "e.jsonl"))
    assert code == 2
    assert f"{src}:3: ideal: required field is missing" in err
    assert f"{src}:4: ideal: expected a string or a non-empty list of strings" in err
    code, _, err = run_import(capsys, "openai-evals", str(src), "--eval", "x", "--out", str(tmp_path / "e.jsonl"))
    assert code == 2 and "--eval: needs --registry" in err
