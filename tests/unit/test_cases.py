"""Suite loading: every problem reported as path:line: field: message."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from qualitycheck.cli._main import main
from qualitycheck.core._cases import load_suite
from qualitycheck.core._errors import SuiteError
from tests.helpers import write_suite


def problems(paths: list[Path]) -> list[str]:
    with pytest.raises(SuiteError) as exc:
        load_suite(paths)
    return [str(p) for p in exc.value.problems]


def test_jsonl_problems_carry_file_line_and_field(tmp_path: Path) -> None:
    f = tmp_path / "s.jsonl"
    f.write_text(
        '{"id": "a", "category": "qa", "prompt": "p"}\n'
        "\n"
        '{"id": "b", "category": "qa", "prompt": "p", "colour": "red"}\n'
        '{"id": "a", "category": "qa", "prompt": "p"}\n'
        "{not json\n"
        '{"id": "c", "category": "qa"}\n'
        '{"id": "d", "category": "qa", "prompt": "p", "params": []}\n'
        '{"id": "e", "category": "qa", "prompt": "p", "checks": {"json": {"schema_file": "missing.json"}}}\n'
        '{"id": "f", "category": "qa", "prompt": "p", "checks": {"regex": "("}}\n'
        "[1, 2]\n",
        encoding="utf-8",
    )
    got = problems([f])
    assert got == [
        f"{f}:3: colour: unknown key",
        f"{f}:4: id: duplicate id 'a' (first at {f}:1)",
        f"{f}:5: bad JSON: Expecting property name enclosed in double quotes (column 2)",
        f"{f}:6: messages: give exactly one of messages (chat) or prompt (completions)",
        f"{f}:7: params: Input should be a valid dictionary",
        f"{f}:8: checks.json.schema_file: cannot read {tmp_path / 'missing.json'}: No such file or directory",
        f"{f}:9: checks.regex.pattern: not a valid regular expression: missing ), unterminated subpattern at position 0",
        f"{f}:10: expected a case object, got list",
    ]


def test_yaml_problems_point_at_the_offending_line(tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text(
        "- id: ok\n"
        "  category: qa\n"
        "  messages:\n"
        "    - {role: user, content: hi}\n"
        "- id: bad\n"
        "  category: qa\n"
        "  messages:\n"
        "    - {role: wizard, content: hi}\n"
        "  checks:\n"
        "    exact: {expected: x, shout: true}\n",
        encoding="utf-8",
    )
    assert problems([f]) == [
        f"{f}:7: messages: message 0 has unknown role 'wizard'",
        f"{f}:10: checks.exact.shout: unknown key",
    ]


def test_bad_yaml_and_non_list(tmp_path: Path) -> None:
    bad = tmp_path / "a.yaml"
    bad.write_text("- id: x\n  category: [unclosed\n", encoding="utf-8")
    scalar = tmp_path / "b.yaml"
    scalar.write_text("just a string\n", encoding="utf-8")
    got = problems([bad, scalar])
    assert got[0].startswith(f"{bad}:3: bad YAML")
    assert got[1] == f"{scalar}:1: expected a list of cases (or a mapping with key 'cases')"


def test_unreadable_schema_file_and_invalid_schema(tmp_path: Path) -> None:
    (tmp_path / "broken.json").write_text("{", encoding="utf-8")
    f = write_suite(
        tmp_path / "s.jsonl",
        [
            {"id": "a", "category": "json", "prompt": "p", "checks": {"json": {"schema_file": "broken.json"}}},
            {"id": "b", "category": "json", "prompt": "p", "checks": {"json": {"schema": {"type": "wat"}}}},
        ],
    )
    got = problems([f])
    assert got[0].startswith(f"{f}:1: checks.json.schema_file: {tmp_path / 'broken.json'} is not JSON")
    assert got[1].startswith(f"{f}:2: checks.json.schema: not a valid JSON Schema")


def test_valid_suite_loads_shorthands_and_resolves_files(tmp_path: Path) -> None:
    (tmp_path / "schema.json").write_text(json.dumps({"type": "object"}), encoding="utf-8")
    (tmp_path / "db.sql").write_text("CREATE TABLE t (x INT);", encoding="utf-8")
    f = write_suite(
        tmp_path / "s.yaml",
        [
            {
                "id": "a",
                "category": "qa",
                "messages": [{"role": "user", "content": "hi"}],
                "checks": {"exact": "Paris", "contains": ["Par"], "regex": "^P"},
                "tags": {"route": "geo", "tier": 1},
            },
            {"id": "b", "category": "json", "prompt": "p", "checks": {"json": {"schema_file": "schema.json"}, "exact": True}},
            {"id": "c", "category": "sql", "prompt": "p", "checks": {"sql": {"db": "db.sql", "reference": "SELECT x FROM t"}}},
        ],
    )
    a, b, c = load_suite([tmp_path])
    assert a.checks.exact.expected == "Paris" and a.checks.contains.all == ["Par"]
    assert a.route == "geo" and a.tags["tier"] == "1"
    assert b.checks.exact.expected is None and b.checks.json_.schema_ == {"type": "object"}
    assert b.check_names() == ["exact", "json_parse", "json_schema"]
    assert Path(c.checks.sql.db).is_absolute() and c.check_names() == ["sql_parse", "sql_result"]
    assert a.file == str(f) and a.line == 1


def test_validate_command_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = write_suite(tmp_path / "good.jsonl", [{"id": "a", "category": "qa", "prompt": "p"}])
    assert main(["validate", str(good)]) == 0
    assert "1 cases OK" in capsys.readouterr().out
    bad = write_suite(tmp_path / "bad.jsonl", [{"id": "a", "category": "qa"}, {"id": "b", "prompt": "p"}])
    assert main(["validate", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:1: messages:" in err and f"{bad}:2: category: required field is missing" in err
    assert "Traceback" not in err
    assert main(["validate", str(tmp_path / "nope")]) == 2


def test_unknown_judge_is_refused_before_any_request(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = write_suite(
        tmp_path / "s.jsonl",
        [
            {"id": "a", "category": "qa", "prompt": "p", "checks": {"judge": {"mode": "astrology"}}},
            {"id": "b", "category": "qa", "prompt": "p", "checks": {"judge": {"mode": "reference"}}},
        ],
    )
    assert main(["validate", str(f)]) == 2
    err = capsys.readouterr().err
    assert f"{f}:1: checks.judge.mode: unknown judge 'astrology'" in err
    assert f"{f}:2: checks.judge.reference: judge 'reference' needs a reference" in err
    assert (
        main(
            [
                "run",
                "--baseline",
                "http://127.0.0.1:9",
                "--candidate",
                "http://127.0.0.1:9",
                "--model",
                "m",
                "--suite",
                str(f),
                "--out",
                str(tmp_path / "run"),
            ]
        )
        == 2
    )
    assert not (tmp_path / "run").exists()


def test_lines_are_numbered_across_every_line_break_and_bad_utf8_by_file_offset(tmp_path: Path) -> None:
    f = tmp_path / "s.jsonl"
    f.write_bytes(
        '{"id": "a", "category": "qa", "prompt": "p"}\r\n'
        '{"id": "b", "category": "qa", "prompt": "x\u2028y"}\n'  # a raw U+2028 ends the line for str.splitlines
        '{"id": "c", "category": "qa"}\n'.encode()
    )
    assert problems([f]) == [
        f"{f}:2: bad JSON: Unterminated string starting at (column 41)",
        f"{f}:3: bad JSON: Expecting value (column 1)",
        f"{f}:4: messages: give exactly one of messages (chat) or prompt (completions)",
    ]
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"id": "a", "category": "qa", "prompt": "p"}\n{"id": "b\xff"}\n')
    assert problems([bad]) == [f"{bad}: not UTF-8 text (invalid start byte at byte 54)"]


def test_scan_suite_streams_with_load_suites_problems_and_the_manifests_fingerprint(tmp_path: Path) -> None:
    from qualitycheck.core._cases import SuiteCases, scan_suite
    from qualitycheck.core._config_file import Config
    from qualitycheck.pipeline._run import manifest_for

    good = write_suite(
        tmp_path / "good" / "s.jsonl",
        [{"id": f"c{i}", "category": "qa", "prompt": f"p{i}"} for i in range(20)]
        + [{"id": "j", "category": "qa", "prompt": "p", "checks": {"judge": "pairwise"}}],
    )
    cases = load_suite([good])
    cfg = Config.model_validate({"baseline": {"url": "http://127.0.0.1:9", "model": "m"}})
    scan = scan_suite([good])
    assert (scan.count, scan.fingerprint, scan.judged) == (21, manifest_for(cases, cfg, [str(good)])["suite_fingerprint"], True)
    odd = [c for c in cases if int(c.id[1:] or 1) % 2]  # "j" counts as odd
    part = scan_suite([good], keep=lambda c: c in odd)
    assert (part.count, part.fingerprint) == (len(odd), manifest_for(odd, cfg, [str(good)])["suite_fingerprint"])
    assert not scan_suite([good], keep=lambda c: c.checks.judge is None).judged
    again = SuiteCases([good], keep=lambda c: c in odd)
    assert list(again) == list(again) == odd  # re-iterable: every pass reads the files again
    assert len(again) == len(odd) and len(SuiteCases([tmp_path / "gone.jsonl"], count=7)) == 7  # the scan's count spares a pass

    bad = write_suite(tmp_path / "bad.jsonl", [{"id": "a", "category": "qa", "prompt": "p"}, {"id": "a", "category": "qa"}])
    with pytest.raises(SuiteError) as exc:
        scan_suite([bad])
    assert [str(p) for p in exc.value.problems] == problems([bad])


def test_scan_suite_holds_far_less_than_the_cases(tmp_path: Path) -> None:
    """What validation keeps per case (id, first line, content hash) must stay well under a Case."""
    import tracemalloc

    from qualitycheck.core._cases import scan_suite

    n = 4000
    suite = write_suite(
        tmp_path / "s.jsonl",
        [
            {
                "id": f"case-{i}",
                "category": "qa",
                "params": {"max_tokens": 64},
                "messages": [{"role": "user", "content": f"Say something {i}"}],
            }
            for i in range(n)
        ],
    )
    scan_suite([suite])  # imports and caches out of the measurement
    tracemalloc.start()
    try:
        scan_suite([suite])
        scanned = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        held = load_suite([suite])
        loaded = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(held) == n
    assert scanned / n < 400, f"{scanned / n:.0f} bytes per case"
    assert scanned < loaded / 3


def test_content_hashes_stay_those_of_stored_runs() -> None:
    """Run folders store these hashes (the resume check): the same case must hash the same across versions."""
    from qualitycheck.core._cases import Case

    cases = {
        "a": {"id": "a", "category": "qa", "messages": [{"role": "user", "content": "hi"}]},
        "b": {
            "id": "b",
            "category": "json",
            "messages": [{"role": "user", "content": "x"}],
            "params": {"temperature": 0, "max_tokens": 20},
            "checks": {"json": {"schema": {"type": "object"}}, "exact": True},
            "tags": {"route": "r"},
        },
        "c": {
            "id": "c",
            "category": "sql",
            "prompt": "p",
            "checks": {"sql": {"dialect": "sqlite"}, "contains": ["x"], "regex": "a+", "yaml": {"format": "toml"}, "judge": "pairwise"},
        },
        "d": {"id": "d", "category": "code", "prompt": "p", "checks": {"unit_tests": {"tests": "assert 1"}, "exact": "Paris"}},
    }
    # `exact: true` became byte-equal (it stripped before): written out as the old default, it hashes as before
    cases["b"]["checks"] = {"json": {"schema": {"type": "object"}}, "exact": {"strip": True}}
    hashes = {k: Case.model_validate(v).content_hash() for k, v in cases.items()}
    # computed by the release before the check registry (commit a2ed116)
    assert hashes == {"a": "836d48566e6beb98", "b": "5fc06981b6655ec3", "c": "8f3aeaaa19213071", "d": "3e78ad35432ab1b9"}


def test_json_strict_false_leaves_the_content_hash_of_existing_cases_alone() -> None:
    """`strict` came after run folders were written: a case that does not set it hashes as before (resume)."""
    from qualitycheck.core._cases import Case

    plain = Case.model_validate({"id": "a", "category": "c", "prompt": "x", "checks": {"json": {}}})
    lenient = Case.model_validate({"id": "a", "category": "c", "prompt": "x", "checks": {"json": {"strict": False}}})
    strict = Case.model_validate({"id": "a", "category": "c", "prompt": "x", "checks": {"json": {"strict": True}}})
    assert plain.content_hash() == lenient.content_hash() == "2f48ae2e701fb933"  # the hash this case had before the option
    assert strict.content_hash() != plain.content_hash()
    assert strict.model_dump(mode="json", exclude_none=True)["checks"] == {"json": {"strict": True}}
