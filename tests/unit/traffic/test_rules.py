"""A logged request as a case: its category from the rules file, its checks from the request, its params kept."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from qualitycheck.core._cases import Case
from qualitycheck.core._errors import ConfigError
from qualitycheck.traffic._formats import Logged
from qualitycheck.traffic._redact import Redactor
from qualitycheck.traffic._rules import Drafted, Rules, case_from_request, draft_case, load_rules

TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
SCHEMA = {"type": "object", "properties": {"email": {"type": "string", "examples": ["maria.keller@example.com"]}}}


def chat(text: str = "What is the capital of France?", **body: Any) -> dict[str, Any]:
    return {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": text}], **body}


def drafted(body: dict[str, Any], rules: Rules | None = None, tags: dict[str, str] | None = None, **kw: Any) -> Drafted:
    d = case_from_request(body, tags or {}, rules or Rules(), Redactor(), case_id="c1", **kw)
    assert isinstance(d, Drafted), d
    Case.model_validate(d.case)  # every case made is a valid one
    return d


def rules(text: str, tmp_path: Path) -> Rules:
    f = tmp_path / "rules.yaml"
    f.write_text(text, encoding="utf-8")
    return load_rules(f)


# ------------------------------------------------------------------ checks from the request


def test_a_json_schema_request_is_checked_against_that_schema() -> None:
    d = drafted(chat(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMA}}))
    assert d.category == "json"
    assert d.case["checks"] == {
        "json": {"schema": {"type": "object", "properties": {"email": {"type": "string", "examples": ["<EMAIL_1>"]}}}}
    }
    assert d.case["params"]["response_format"]["json_schema"]["schema"] == d.case["checks"]["json"]["schema"]  # redacted alike
    assert drafted(chat(response_format={"type": "json_schema", "json_schema": {"name": "x"}})).case["checks"] == {"json": True}


def test_json_mode_is_checked_to_parse() -> None:
    d = drafted(chat(response_format={"type": "json_object"}))
    assert d.case["checks"] == {"json": True} and d.category == "qa"


def test_tools_are_checked_as_tool_calls() -> None:
    d = drafted(chat(tools=TOOLS, tool_choice="auto"))
    assert d.category == "tool_call" and d.case["checks"] == {"tool_calls": {"valid": True, "same_as_baseline": True}}


def test_a_greedy_request_is_checked_for_identity_and_an_unset_temperature_is_the_api_default() -> None:
    greedy = drafted(chat(temperature=0))
    assert greedy.case["checks"] == {"exact": True} and greedy.temperature == 0
    unset = drafted(chat())
    assert "checks" not in unset.case and unset.case["params"] == {"temperature": 1.0} and unset.temperature == 1.0
    assert "checks" not in drafted(chat(temperature=0.7)).case


def test_open_requests_get_the_configured_judge(tmp_path: Path) -> None:
    r = rules("judge: pairwise\n", tmp_path)
    assert drafted(chat(), r).case["checks"] == {"judge": {"mode": "pairwise"}}
    assert drafted(chat(temperature=0), r).case["checks"] == {"exact": True}  # a request with a check of its own gets no judge
    r = rules('judge: {mode: rubric, rubric: "Is it polite?"}\n', tmp_path)
    assert drafted(chat(), r).case["checks"] == {"judge": {"mode": "rubric", "rubric": "Is it polite?"}}


def test_the_reference_judge_compares_with_the_logged_answer_redacted_like_the_request(tmp_path: Path) -> None:
    r = rules("judge: reference\n", tmp_path)
    d = drafted(chat("Mail maria.keller@example.com the plan"), r, logged=Logged("Sent to maria.keller@example.com.", (), 9))
    assert d.case["messages"][0]["content"] == "Mail <EMAIL_1> the plan"
    assert d.case["checks"] == {"judge": {"mode": "reference", "reference": "Sent to <EMAIL_1>."}}
    assert drafted(chat(), r).case["checks"] == {"judge": {"mode": "pairwise"}}  # nothing logged: the answers are compared


def test_the_request_params_are_kept_exactly_and_the_rest_dropped() -> None:
    body = chat(
        temperature=0.2,
        top_p=0.9,
        max_tokens=77,
        stop=["\n\n"],
        seed=11,
        tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "lookup"}},
        response_format={"type": "json_object"},
        n=3,
        stream=True,
        user="maria",
        metadata={"team": "a"},
        logprobs=True,
    )
    params = drafted(body).case["params"]
    assert params == {
        "temperature": 0.2,
        "top_p": 0.9,
        "max_tokens": 77,
        "stop": ["\n\n"],
        "seed": 11,
        "tools": TOOLS,
        "tool_choice": {"type": "function", "function": {"name": "lookup"}},
        "response_format": {"type": "json_object"},
    }


def test_a_completions_prompt_stays_a_prompt() -> None:
    d = drafted({"model": "m", "prompt": "def add(a, b):", "temperature": 0})
    assert d.case["prompt"] == "def add(a, b):" and "messages" not in d.case and d.case["checks"] == {"exact": True}


# ------------------------------------------------------------------ categories


def test_default_categories() -> None:
    assert drafted(chat()).category == "qa"
    assert drafted(chat(tools=TOOLS)).category == "tool_call"
    schema_and_tools = chat(tools=TOOLS, response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {}}})
    assert drafted(schema_and_tools).category == "json"


def test_the_first_matching_rule_names_the_category(tmp_path: Path) -> None:
    r = rules(
        """\
rules:
  - match: {route: [billing, refunds]}
    category: billing
  - match: {tag: {tier: gold}, model: "gpt-4o*"}
    category: vip
  - match: {system_regex: "(?i)sqlite"}
    category: sql
  - match: {prompt_regex: "\\\\bSELECT\\\\b", has_tools: false}
    category: sql
  - match: {response_format: json_object}
    category: json_mode
  - match: {has_tools: true}
    category: agents
""",
        tmp_path,
    )
    assert drafted(chat(), r, {"route": "refunds"}).category == "billing"
    assert drafted(chat(), r, {"tier": "gold"}).category == "vip"
    assert drafted({**chat(), "model": "llama"}, r, {"tier": "gold"}).category == "qa"
    sql = {"model": "m", "messages": [{"role": "system", "content": "You write SQLite."}, {"role": "user", "content": "count rows"}]}
    assert drafted(sql, r).category == "sql"
    assert drafted(chat("explain SELECT * FROM t"), r).category == "sql"
    assert drafted(chat("explain SELECT * FROM t", tools=TOOLS), r).category == "agents"
    assert drafted(chat(response_format={"type": "json_object"}), r).category == "json_mode"
    assert drafted(chat("hello"), r).category == "qa"


def test_rules_match_the_request_as_logged_not_as_redacted(tmp_path: Path) -> None:
    r = rules('rules:\n  - match: {prompt_regex: "@example\\\\.com"}\n    category: internal\n', tmp_path)
    d = drafted(chat("from maria.keller@example.com"), r)
    assert d.category == "internal" and "example.com" not in d.case["messages"][0]["content"]


# ------------------------------------------------------------------ what cannot be a case


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ({"model": "m"}, "no messages or prompt"),
        ({"messages": []}, "messages is not a non-empty list"),
        ({"messages": ["maria.keller@example.com"]}, "message 0 is not an object"),
        ({"messages": [{"role": "maria.keller@example.com", "content": "x"}]}, "message 0 has a role a case cannot send"),
        ({"messages": [{"role": "user"}]}, "message 0 has no content"),
        ({"prompt": ["a", "b"]}, "prompt is not a single string"),
        ({"prompt": "  "}, "prompt is empty"),
        ({"messages": [{"role": "user", "content": "x"}], "temperature": "maria.keller@example.com"}, "temperature is not a number"),
    ],
)
def test_a_request_that_cannot_be_a_case_says_why_without_quoting_it(body: dict[str, Any], reason: str) -> None:
    assert case_from_request(body, {}, Rules(), Redactor(), case_id="c") == reason
    assert draft_case(body, {}, Rules(), case_id="c") == reason


def test_keep_pii_writes_values_as_logged() -> None:
    d = case_from_request(chat("mail maria.keller@example.com"), {"user": "maria.keller@example.com"}, Rules(), None, case_id="c")
    assert isinstance(d, Drafted) and d.redactions == {}
    assert d.case["messages"][0]["content"] == "mail maria.keller@example.com" and d.case["tags"] == {"user": "maria.keller@example.com"}


def test_tags_are_redacted_with_the_conversation() -> None:
    d = drafted(chat("I am maria.keller@example.com"), tags={"user": "maria.keller@example.com", "route": "faq"})
    assert d.case["tags"] == {"user": "<EMAIL_1>", "route": "faq"} and d.redactions == {"email": 2}


# ------------------------------------------------------------------ the rules file


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("rules:\n  - match: {route: a}\n    category: a b\n", "rules.yaml:3: rules.0.category: String should match pattern"),
        ("rules:\n  - match: {}\n    category: a\n", "rules.yaml:2: rules.0.match: matches every request"),
        ("rules:\n  - match: {route: a, colour: red}\n    category: a\n", "rules.yaml:2: rules.0.match.colour: unknown key"),
        ("rules:\n  - match:\n      prompt_regex: '(unclosed'\n    category: a\n", "rules.yaml:3: rules.0.match.prompt_regex:"),
        ("rules:\n  - match: {has_tools: maybe}\n    category: a\n", "rules.yaml:2: rules.0.match.has_tools:"),
        ("columns:\n  prompt: q\n  answer: a\n", "rules.yaml:3: columns.answer: unknown key"),
        ("columns:\n  response: a\n", "rules.yaml:1: columns: map `messages` or `prompt` to a column"),
        ("min_per_stratum: 0\n", "rules.yaml:1: min_per_stratum: Input should be greater than or equal to 1"),
        ("judge: {mode: pairwise, colour: red}\n", "rules.yaml:1: judge.colour: unknown key"),
        ("rules: [\n", "rules.yaml:2: bad YAML"),
        ("- 1\n- 2\n", "rules.yaml:1: rules.0: Input should be a valid dictionary"),
        ("42\n", "rules.yaml:1: expected a mapping"),
    ],
)
def test_a_bad_rules_file_names_file_line_and_field(tmp_path: Path, text: str, problem: str) -> None:
    with pytest.raises(ConfigError) as e:
        rules(text, tmp_path)
    assert e.value.exit_code == 2
    assert problem in str(e.value).replace(str(tmp_path) + "/", ""), str(e.value)


def test_no_rules_file_means_the_defaults(tmp_path: Path) -> None:
    assert load_rules(None) == Rules()
    with pytest.raises(ConfigError, match="cannot read rules"):
        load_rules(tmp_path / "missing.yaml")
    r = rules("rules:\n  - match: {route: a}\n    category: a\ncolumns:\n  prompt: q\n  tags.route: r\n", tmp_path)
    assert r.source == str(tmp_path / "rules.yaml") and r.column_lines == {"prompt": 5, "tags.route": 6}
