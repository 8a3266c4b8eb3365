from __future__ import annotations

from pathlib import Path

import pytest

from qualitycheck.core._cases import Case
from qualitycheck.core._errors import ConfigError, SuiteError
from qualitycheck.judge._judge import judge_dirs, load_judge_file, load_judges, validate_judge_checks


def test_builtin_judges_load() -> None:
    judges = load_judges(judge_dirs())
    assert {"pairwise", "rubric", "reference"} <= set(judges)
    assert judges["pairwise"].kind == "pairwise" and judges["rubric"].kind == "single"
    assert "reference" in judges["reference"].variables


def test_bad_judge_file_names_file_line_and_field(tmp_path: Path) -> None:
    f = tmp_path / "broken.yaml"
    f.write_text("kind: pairwise\nprompt: 'Compare {answer_a} with {answr_b}'\nverdict:\n  pattern: '(unclosed'\n", encoding="utf-8")
    with pytest.raises(ConfigError) as exc:
        load_judge_file(f)
    text = str(exc.value)
    assert f"{f}:2: prompt: unknown placeholder {{answr_b}}" in text
    assert f"{f}:2: prompt: a pairwise judge's prompt must show {{answer_b}}" in text
    assert f"{f}:3: verdict.pattern: not a valid regular expression" in text


def test_a_users_judge_shadows_the_builtin_and_adds_new_ones(tmp_path: Path) -> None:
    (tmp_path / "pairwise.yaml").write_text(
        "kind: pairwise\nprompt: '{answer_a} vs {answer_b}'\nverdict: {pattern: 'WINNER=(1|2|0)', map: {'1': a, '2': b, '0': tie}}\n",
        encoding="utf-8",
    )
    (tmp_path / "strict.yml").write_text(
        "kind: single\nprompt: '{answer} against {reference}'\nverdict: {pattern: 'score (\\d)', range: [0, 5]}\n", encoding="utf-8"
    )
    judges = load_judges(judge_dirs(str(tmp_path)))
    assert judges["pairwise"].parse("x WINNER=2") == ("2", "b")
    assert judges["strict"].parse("score 4") == ("4", 4)
    assert judges["rubric"].kind == "single"


def test_missing_judges_dir_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="judges_dir"):
        judge_dirs(str(tmp_path / "nope"))


def test_cases_naming_unknown_judges_or_missing_reference_are_refused() -> None:
    judges = load_judges(judge_dirs())
    msgs = [{"role": "user", "content": "2+2?"}]
    cases = [
        Case(id="a", category="m", messages=msgs, checks={"judge": {"mode": "pairwse"}}).model_copy(update={"file": "s.jsonl", "line": 3}),
        Case(id="b", category="m", messages=msgs, checks={"judge": {"mode": "reference"}}).model_copy(
            update={"file": "s.jsonl", "line": 4}
        ),
        Case(id="c", category="m", messages=msgs, checks={"judge": {"mode": "rubric"}}),
    ]
    with pytest.raises(SuiteError) as exc:
        validate_judge_checks(cases, judges)
    text = str(exc.value)
    assert "s.jsonl:3: checks.judge.mode: unknown judge 'pairwse'" in text
    assert "s.jsonl:4: checks.judge.reference: judge 'reference' needs a reference" in text
    assert len(exc.value.problems) == 2
