"""The shipped suites are usable: they load, every reference is right on its own fixture.

A suite whose reference SQL returns nothing, or whose MBPP reference fails its
own tests, would make every model look broken (or every regression invisible),
so these are checked on the data itself, not on a model.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import pytest
from jsonschema import validators

from qualitycheck.core._cases import Case, load_suite

ROOT = Path(__file__).resolve().parents[2]
SUITES = ROOT / "suites"
CATEGORIES = (
    "qa",
    "long_context_qa",
    "code",
    "json",
    "sql",
    "config",
    "multi_turn",
    "tool_call_explanation",
    "summarization",
    "rag",
    "high_risk",
    "json_sampled",
)
OPEN_ENDED = ("summarization", "multi_turn", "rag", "high_risk", "tool_call_explanation")


@pytest.fixture(scope="module")
def cases() -> list[Case]:
    return load_suite([SUITES])


def _by_category(cases: list[Case], category: str) -> list[Case]:
    return [c for c in cases if c.category == category]


def test_validate_command_accepts_the_suites() -> None:
    from qualitycheck.cli._main import main

    assert main(["validate", str(SUITES)]) == 0


@pytest.mark.parametrize("category", CATEGORIES)
def test_each_category_has_at_least_25_cases(cases: list[Case], category: str) -> None:
    assert len(_by_category(cases, category)) >= 25


def test_every_case_is_attributed_and_greedy_unless_it_is_sampled_traffic(cases: list[Case]) -> None:
    for c in cases:
        assert c.source, c.id
        if c.tags.get("traffic") == "sampled":
            assert c.sampled and c.category == "json_sampled", c.id
        else:
            assert c.params.get("temperature") == 0, c.id
        assert isinstance(c.params.get("max_tokens"), int) and c.params["max_tokens"] > 0, c.id
        assert c.check_names(), f"{c.id} has no checks"


@pytest.mark.parametrize("category", OPEN_ENDED)
def test_open_ended_categories_have_a_judge_and_a_deterministic_check(cases: list[Case], category: str) -> None:
    for c in _by_category(cases, category):
        names = c.check_names()
        if category == "tool_call_explanation" and "json_parse" in names:
            continue  # the tool-call JSON itself is checked by its schema
        assert "judge" in names, c.id
        assert set(names) - {"judge"}, f"{c.id} has only a judge"


def test_sql_references_return_rows_on_their_fixtures(cases: list[Case]) -> None:
    sql_cases = [c for c in cases if c.checks.sql is not None]
    assert len(sql_cases) >= 25
    scripts: dict[str, str] = {}
    for c in sql_cases:
        spec = c.checks.sql
        assert spec.db and spec.reference and spec.dialect == "sqlite", c.id
        script = scripts.setdefault(spec.db, Path(spec.db).read_text(encoding="utf-8"))
        con = sqlite3.connect(":memory:")
        try:
            con.executescript(script)
            rows = con.execute(spec.reference).fetchall()
        finally:
            con.close()
        assert rows, f"{c.id}: reference returns no rows on {spec.db}"
        assert any(v not in (None, 0) for r in rows for v in r), f"{c.id}: only empty values"


def test_mbpp_reference_solutions_pass_their_tests(cases: list[Case]) -> None:
    refs = json.loads((SUITES / "fixtures" / "mbpp_reference.json").read_text(encoding="utf-8"))
    code_cases = [c for c in cases if c.checks.unit_tests is not None and c.id in refs]
    assert len(code_cases) >= 25
    # one process for all of them keeps this fast; each task runs in its own namespace
    programs = {c.id: f"{c.checks.unit_tests.setup}\n{refs[c.id]}\n{c.checks.unit_tests.tests}\n" for c in code_cases}
    runner = (
        "import json, sys\n"
        "failed = {}\n"
        "for cid, src in json.load(open(sys.argv[1])).items():\n"
        "    try:\n"
        "        exec(compile(src, cid, 'exec'), {'__name__': '__main__'})\n"
        "    except BaseException as exc:\n"
        "        failed[cid] = repr(exc)\n"
        "print(json.dumps(failed))\n"
    )
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "programs.json").write_text(json.dumps(programs), encoding="utf-8")
        proc = subprocess.run([sys.executable, "-c", runner, "programs.json"], cwd=tmp, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {}


def test_code_entry_points_are_defined_by_the_reference(cases: list[Case]) -> None:
    refs = json.loads((SUITES / "fixtures" / "mbpp_reference.json").read_text(encoding="utf-8"))
    for c in cases:
        if c.checks.unit_tests is not None and c.id in refs:
            assert f"def {c.checks.unit_tests.entry_point}(" in refs[c.id], c.id


def _schemas(c: Case) -> list[dict]:
    out = []
    if c.checks.json_ is not None and isinstance(c.checks.json_.schema_, dict):
        out.append(c.checks.json_.schema_)
    rf = c.params.get("response_format")
    if isinstance(rf, dict) and rf.get("type") == "json_schema":
        out.append(rf["json_schema"]["schema"])
    return out


def test_every_json_schema_is_valid(cases: list[Case]) -> None:
    n = 0
    for c in cases:
        for schema in _schemas(c):
            validators.validator_for(schema, default=validators.Draft202012Validator).check_schema(schema)
            n += 1
    assert n >= 25


def test_structured_output_requests_exist_where_speculation_breaks_them(cases: list[Case]) -> None:
    guided = Counter(c.category for c in cases if isinstance(c.params.get("response_format"), dict))
    assert guided["json"] >= 5 and guided["tool_call_explanation"] >= 3


def test_guided_extraction_enforces_the_schema_it_is_checked_against(cases: list[Case]) -> None:
    """For extraction the guided schema is the checked one (a guided answer that fails it is a server bug);
    tool calls are guided by the generic call shape and checked for the right tool and arguments."""
    for c in _by_category(cases, "json"):
        rf = c.params.get("response_format")
        if isinstance(rf, dict) and rf.get("type") == "json_schema":
            assert rf["json_schema"]["schema"] == c.checks.json_.schema_, c.id


def test_long_context_prompts_are_several_thousand_tokens(cases: list[Case]) -> None:
    for c in _by_category(cases, "long_context_qa"):
        chars = sum(len(m.get("content") or "") for m in c.messages)
        assert chars >= 10_000, f"{c.id}: only {chars} characters"  # ~4 characters a token


def test_answers_checked_by_contains_appear_in_the_given_text(cases: list[Case]) -> None:
    """For answer-from-the-text categories the expected fact must be in the prompt."""
    for c in cases:
        if c.category not in ("long_context_qa", "rag") or c.checks.contains is None:
            continue
        text = " ".join(m.get("content") or "" for m in c.messages).lower()
        wanted = c.checks.contains.any or c.checks.contains.all
        if not wanted:
            continue  # an answer that must be absent ("not in the passages")
        assert any(w.lower() in text for w in wanted), c.id


def test_demo_selection_fits_a_tiny_cpu_model(cases: list[Case]) -> None:
    demo = [c for c in cases if c.tags.get("demo") == "yes" and not c.sampled]
    by_cat = Counter(c.category for c in demo)
    assert len(by_cat) >= 8, by_cat
    assert 16 <= len(demo) <= 32
    assert max(by_cat.values()) <= 4, by_cat
    sampled = [c for c in cases if c.tags.get("demo") == "yes" and c.sampled]
    assert 10 <= len(sampled) <= 16, "the sampled path: enough cases for a clear drop to be decided, few enough for two cores"
    demo += sampled
    assert "long_context_qa" not in by_cat
    for c in demo:
        assert c.params["max_tokens"] <= 64, c.id
        chars = sum(len(m.get("content") or "") for m in c.messages)
        assert chars <= 1600, f"{c.id}: {chars} characters is too long for the demo"


def _deterministic_outcomes(c: Case, text: str) -> dict[str, str]:
    """Status of every check that needs no model and no sandbox (judge and unit_tests are left out)."""
    from qualitycheck.core._records import Response
    from qualitycheck.scoring._registry import build_scorers

    answer = Response(case_id=c.id, target="candidate", fingerprint="suite-self-test", text=text, finish_reason="stop")
    out = {}
    for scorer in build_scorers(c):
        if scorer.check in ("judge", "unit_tests"):
            continue
        if scorer.check == "exact" and c.checks.exact.expected is None:
            continue  # `exact: true` compares with the baseline's answer
        out[scorer.check] = scorer.score(answer, None).status
    return out


def test_a_known_good_answer_passes_every_deterministic_check(cases: list[Case]) -> None:
    """No check is impossible to pass: the reference answer of each case passes them all."""
    answers = json.loads((SUITES / "fixtures" / "reference_answers.json").read_text(encoding="utf-8"))
    assert set(answers) == {c.id for c in cases}
    failures = {}
    for c in cases:
        bad = {k: v for k, v in _deterministic_outcomes(c, answers[c.id]).items() if v != "pass"}
        if bad:
            failures[c.id] = bad
    assert failures == {}


@pytest.mark.parametrize("non_answer", ["OK.", "Sure! Here is what you asked for."])
def test_a_non_answer_fails_some_deterministic_check(cases: list[Case], non_answer: str) -> None:
    """No check is vacuous: an empty pleasantry fails every case that has deterministic checks."""
    passing = []
    for c in cases:
        outcomes = _deterministic_outcomes(c, non_answer)
        if outcomes and all(v == "pass" for v in outcomes.values()):
            passing.append(c.id)
    assert passing == []


def test_generator_is_reproducible(tmp_path: Path) -> None:
    """The committed suites are exactly what scripts/build_suites.py produces."""
    data = ROOT.parent / "shared" / "data"
    if not (data / "mbpp").is_dir():
        pytest.skip("public data folder not present on this machine")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "build_suites.py"), "--check"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_open_ended_suite_is_what_its_script_builds_from_the_bundled_suites() -> None:
    """tests/e2e/suites/open_ended.jsonl: the 16 shortest summarization, qa and rag cases at temperature 0.8, no judge."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "build_open_ended.py"), "--check"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    cases = load_suite([ROOT / "tests" / "e2e" / "suites" / "open_ended.jsonl"])
    assert {c.category: sum(x.category == c.category for x in cases) for c in cases} == {"summarization": 16, "qa": 16, "rag": 16}
    assert all(c.sampled and c.params["max_tokens"] == 64 and c.checks.get("judge") is None for c in cases)
    assert all(c.tags["derived_from"].startswith(f"suites/{c.category}.jsonl#") for c in cases)
