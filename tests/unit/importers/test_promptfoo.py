"""`qualitycheck import promptfoo`: promptfoo's own example configs and test files (tests/fixtures/imports/README.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import answer_statuses

from .conftest import FIXTURES, imported, run_import

PF = FIXTURES / "promptfoo"


def test_getting_started_makes_a_case_per_prompt_and_test_with_contains_case_sensitive(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "suites" / "pf.jsonl"
    code, stdout, err = run_import(capsys, "promptfoo", str(PF / "getting-started" / "promptfooconfig.yaml"), "--out", str(out))
    assert code == 0, err
    assert "wrote 4 case(s)" in stdout
    assert "providers are not imported" in err
    cases = imported(out)
    assert sorted(cases) == ["promptfooconfig-1-p1", "promptfooconfig-1-p2", "promptfooconfig-2-p1", "promptfooconfig-2-p2"]
    first = cases["promptfooconfig-1-p1"]
    assert first.messages == [{"role": "user", "content": "Convert this English to French: Hello world"}]
    assert cases["promptfooconfig-1-p2"].messages == [{"role": "user", "content": "Translate to French: Hello world"}]
    assert first.tags == {"prompt": "1"}
    assert first.source is not None and first.source.endswith("promptfooconfig.yaml:18 (tests[0])")
    # promptfoo's contains is case-sensitive (String.includes); qualitycheck's contains ignores case unless told
    assert first.checks.contains.all == ["Bonjour le monde"] and first.checks.contains.ignore_case is False
    assert answer_statuses(first, {"Bonjour le monde !": "", "bonjour le monde": ""}) == {
        "Bonjour le monde !": {"contains": "pass"},
        "bonjour le monde": {"contains": "fail"},
    }
    spanish = cases["promptfooconfig-2-p1"]
    assert spanish.checks.contains.all == ["Dónde está la biblioteca"] and spanish.checks.contains.ignore_case is True
    assert answer_statuses(spanish, {"¿DÓNDE ESTÁ LA BIBLIOTECA?": ""})["¿DÓNDE ESTÁ LA BIBLIOTECA?"] == {"contains": "pass"}


def test_json_output_refuses_javascript_and_transform_by_name_and_position(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    src = PF / "json-output" / "promptfooconfig.yaml"
    out = tmp_path / "pf.jsonl"
    code, _, err = run_import(capsys, "promptfoo", str(src), "--out", str(out))
    assert code == 2
    assert f"{src}:14: tests[0].assert[1].type: 'javascript' runs JavaScript code" in err
    assert f"{src}:18: tests[1].options.transform: the test option 'transform' is not imported" in err
    assert "--skip-unmapped" in err and "Traceback" not in err
    assert not out.exists()

    code, _, err = run_import(capsys, "promptfoo", str(src), "--out", str(out), "--skip-unmapped")
    assert code == 0
    assert f"{src}:14: tests[0].assert[1].type: 'javascript' runs JavaScript code" in err and "(skipped)" in err
    (case,) = imported(out).values()
    assert case.checks.json.strict is True  # is-json: JSON.parse of the whole output
    statuses = answer_statuses(case, {'{"color": "yellow"}': "", '```json\n{"color": "yellow"}\n```': ""})
    assert statuses['{"color": "yellow"}'] == {"json_parse": "pass"}
    assert statuses['```json\n{"color": "yellow"}\n```'] == {"json_parse": "fail"}


def test_simple_csv_refuses_the_nunjucks_filter_prompt_once_and_renders_the_other(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    src = PF / "simple-csv" / "promptfooconfig.yaml"
    out = tmp_path / "pf.jsonl"
    code, _, err = run_import(capsys, "promptfoo", str(src), "--out", str(out))
    assert code == 2
    refusal = (
        f"{PF / 'simple-csv' / 'prompts.txt'}:1: prompt 1 of 2: uses nunjucks beyond {{{{ var }}}} ('{{{{ (style_config | load).tone }}}}')"
    )
    assert err.count(refusal) == 1

    code, _, err = run_import(capsys, "promptfoo", str(src), "--out", str(out), "--skip-unmapped")
    assert code == 0 and refusal in err
    cases = imported(out)
    assert len(cases) == 4  # the four CSV rows under the second prompt
    first = cases["promptfooconfig-1"]
    content = first.messages[0]["content"]
    assert content.startswith(
        'You are a conversational language assistant. Follow the style configuration: {"tone":"formal","length":"brief"}.'
    )
    assert '"Hello world"' in content and "to French in a natural" in content
    assert first.checks.contains.all == ["bonjour"] and first.checks.contains.ignore_case is True  # __expected: icontains:bonjour
    assert first.source is not None and first.source.endswith("tests.csv:2")


def test_each_documented_assert_maps_and_checks_as_promptfoo_does(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    src = PF / "deterministic-docs" / "tests.yaml"
    out = tmp_path / "pf.jsonl"
    code, _, err = run_import(capsys, "promptfoo", str(src), "--prompt", "Q: {{ question }}", "--out", str(out))
    assert code == 2
    assert f"{src}:68: [7].assert[0].value: equals against JSON (deep equality of the parsed answer) is not imported" in err
    code, _, err = run_import(capsys, "promptfoo", str(src), "--prompt", "Q: {{ question }}", "--out", str(out), "--skip-unmapped")
    assert code == 0
    c = imported(out)
    assert c["tests-1"].messages == [{"role": "user", "content": "Q: Say the expected substring."}]
    assert c["tests-3"].checks.contains.all == ["Value 1", "Value 2", "Value 3"]
    assert c["tests-4"].checks.contains.any == ["Value 1", "Value 2", "Value 3"]
    assert answer_statuses(c["tests-5"], {"in 2024": "", "in 24": "", "in ٢٠٢٤": ""}) == {
        "in 2024": {"regex": "pass"},
        "in 24": {"regex": "fail"},
        "in ٢٠٢٤": {"regex": "fail"},  # JavaScript's \d is ASCII; Python's would match Arabic-Indic digits
    }
    located = '{"latitude": 48.8, "longitude": 2.3}'
    fenced = f"Here:\n```json\n{located}\n```"
    assert answer_statuses(c["tests-6"], {fenced: "", '{"latitude": 100, "longitude": 2}': ""}) == {
        fenced: {"json_parse": "pass", "json_schema": "pass"},  # contains-json: JSON anywhere
        '{"latitude": 100, "longitude": 2}': {"json_parse": "pass", "json_schema": "fail"},
    }
    assert answer_statuses(c["tests-9"], {located: "", fenced: ""}) == {
        located: {"json_parse": "pass", "json_schema": "pass"},
        fenced: {"json_parse": "fail", "json_schema": "fail"},  # is-json: the whole output
    }
    assert c["tests-6"].checks.json.schema_["$schema"] == "http://json-schema.org/draft-07/schema#"  # ajv's default draft
    # equals is string equality: nothing stripped, as promptfoo compares
    assert answer_statuses(c["tests-7"], {"The expected output": "", "The expected output\n": ""}) == {
        "The expected output": {"exact": "pass"},
        "The expected output\n": {"exact": "fail"},
    }
    assert "checks" not in c["tests-8"].model_fields_set or not c["tests-8"].checks  # its only assert was skipped, and said so


def test_javascript_regex_end_anchor_and_whitespace_mean_what_they_mean_in_javascript() -> None:
    import re

    from qualitycheck.importers._promptfoo import js_regex

    assert re.search(js_regex("done$"), "done\n") is None  # JavaScript's $ (no m flag) is the end of the input only
    assert re.search(js_regex("done$"), "done")
    assert re.search(js_regex(r"a\sb"), "a\u00a0b")  # JavaScript's \s includes no-break space
    assert re.search(js_regex(r"(?<year>\d{4})-\k<year>"), "2024-2024")


def test_python_and_unknown_asserts_are_refused_by_name_with_their_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    cfg = tmp_path / "promptfooconfig.yaml"
    cfg.write_text(
        "prompts: ['Answer: {{q}}']\n"
        "tests:\n"
        "  - vars: {q: hi}\n"
        "    assert:\n"
        "      - type: python\n"
        "        value: output == 'x'\n"
        "      - type: llm-rubric\n"
        "        value: polite\n"
        "      - type: contains\n"
        "        value: x\n"
        "      - type: icontains\n"
        "        value: y\n",
        encoding="utf-8",
    )
    code, _, err = run_import(capsys, "promptfoo", str(cfg), "--out", str(tmp_path / "s.jsonl"))
    assert code == 2
    assert f"{cfg}:5: tests[0].assert[0].type: 'python' runs Python code" in err
    assert f"{cfg}:7: tests[0].assert[1].type: assert type 'llm-rubric' has no qualitycheck check" in err
    assert f"{cfg}:11: tests[0].assert[3].type: mixes case-sensitive and case-insensitive contains" in err


def test_a_tests_file_needs_a_prompt(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run_import(capsys, "promptfoo", str(PF / "simple-csv" / "tests.csv"), "--out", str(tmp_path / "s.jsonl"))
    assert code == 2 and "--prompt: " in err and "is a tests file" in err


def test_an_import_replaces_its_own_file_and_never_a_hand_written_one(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    src = str(PF / "getting-started" / "promptfooconfig.yaml")
    mine = tmp_path / "mine.jsonl"
    mine.write_text('{"id": "x", "category": "c", "prompt": "hi"}\n', encoding="utf-8")
    code, _, err = run_import(capsys, "promptfoo", src, "--out", str(mine))
    assert code == 2 and "was not written by `qualitycheck import`" in err
    assert mine.read_text(encoding="utf-8") == '{"id": "x", "category": "c", "prompt": "hi"}\n'
    out = tmp_path / "pf.jsonl"
    assert run_import(capsys, "promptfoo", src, "--out", str(out))[0] == 0
    assert run_import(capsys, "promptfoo", src, "--out", str(out), "--category", "translate")[0] == 0
    assert {c.category for c in imported(out).values()} == {"translate"}


def test_a_flag_of_another_format_is_refused_not_ignored(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    src = str(PF / "getting-started" / "promptfooconfig.yaml")
    code, _, err = run_import(capsys, "promptfoo", src, "--reference-field", "answer", "--eval", "x", "--out", str(tmp_path / "s.jsonl"))
    assert code == 2
    assert "command line: --eval: is not read by the promptfoo format" in err
    assert "command line: --reference-field: is not read by the promptfoo format" in err


def test_an_assert_refused_under_several_prompts_is_named_once(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    cfg = tmp_path / "promptfooconfig.yaml"
    cfg.write_text(
        "prompts: ['A: {{q}}', 'B: {{q}}']\ntests:\n  - vars: {q: hi}\n    assert:\n      - type: llm-rubric\n        value: polite\n",
        encoding="utf-8",
    )
    code, _, err = run_import(capsys, "promptfoo", str(cfg), "--out", str(tmp_path / "s.jsonl"))
    assert code == 2 and err.count("assert type 'llm-rubric' has no qualitycheck check") == 1


def test_json_and_jsonl_tests_files_and_a_default_test(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """promptfoo reads a `.json` tests file as a list of tests (or one test) and a `.jsonl` as one test per line;
    a config's `defaultTest` adds its vars and asserts to every test."""
    (tmp_path / "tests.json").write_text(
        '[{"vars": {"city": "Paris"}, "assert": [{"type": "contains", "value": "{{city}}"}]}]', encoding="utf-8"
    )
    (tmp_path / "more.jsonl").write_text(
        '{"vars": {"city": "Rome"}}\n\n{"vars": {"city": "Oslo"}, "assert": [{"type": "regex", "value": "^[A-Z]"}]}\n', encoding="utf-8"
    )
    cfg = tmp_path / "promptfooconfig.yaml"
    cfg.write_text(
        'prompts: [\'[{"role": "system", "content": "{{style}}"}, {"role": "user", "content": "Where is {{city}}?"}]\']\n'
        "defaultTest:\n  vars: {style: Be brief.}\n  assert:\n    - type: not-contains\n      value: sorry\n"
        "tests:\n  - file://tests.json\n  - file://more.jsonl\n",
        encoding="utf-8",
    )
    out = tmp_path / "s.jsonl"
    code, _, err = run_import(capsys, "promptfoo", str(cfg), "--out", str(out))
    assert code == 0, err
    c = imported(out)
    assert c["promptfooconfig-1"].messages == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Where is Paris?"}]
    assert c["promptfooconfig-1"].checks.contains.all == ["Paris"] and c["promptfooconfig-1"].checks.contains.none == ["sorry"]
    assert c["promptfooconfig-1"].checks.contains.ignore_case is False  # not-contains and contains: both case-sensitive
    assert c["promptfooconfig-2"].checks.contains.none == ["sorry"] and c["promptfooconfig-2"].checks.contains.ignore_case is False
    assert c["promptfooconfig-3"].source is not None and c["promptfooconfig-3"].source.endswith("more.jsonl:3")
    assert answer_statuses(c["promptfooconfig-3"], {"Oslo, sorry": ""})["Oslo, sorry"] == {"regex": "pass", "contains": "fail"}
