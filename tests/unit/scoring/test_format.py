"""format_features: the drift signals the comparison puts side by side."""

from __future__ import annotations

from qualitycheck.scoring import format_features
from qualitycheck.scoring._format import fence_languages


def test_fenced_json_is_lenient_not_strict() -> None:
    f = format_features('```json\n{"a": 1}\n```', "stop", 9)
    assert f["code_fence"] and f["code_fence_labelled"] and not f["code_fence_unclosed"]
    assert f["json_lenient"] and not f["json_strict"]
    assert f["tokens"] == 9 and not f["tokens_estimated"] and not f["truncated"]


def test_bare_json_is_strict() -> None:
    f = format_features('{"a": 1}')
    assert f["json_strict"] and not f["code_fence"] and f["tokens_estimated"]


def test_truncation_and_unclosed_fence() -> None:
    f = format_features("```python\ndef f(x):\n    return", "length", 12)
    assert f["truncated"] and f["code_fence_unclosed"] and fence_languages("```python\nx\n```") == ["python"]


def test_whitespace_lines_and_markdown() -> None:
    text = "\n# Plan\n\n## Steps\n- one\n- two\n* three\n1. first\n2) second\n"
    f = format_features(text)
    assert f["leading_whitespace"] and f["trailing_whitespace"]
    assert f["markdown_headings"] == 2 and f["markdown_bullets"] == 3 and f["numbered_items"] == 2
    assert f["lines"] == 9 and f["chars"] == len(text)


def test_template_token_leak() -> None:
    assert format_features("Paris.<|im_end|>")["template_token_leak"]
    f = format_features("Done</s><|eot_id|>")
    assert f["template_tokens"] == 2
    assert not format_features("Use the <strong> tag.")["template_token_leak"]


def test_refusal_phrasing() -> None:
    assert format_features("I'm sorry, but I can't help with that.")["refusal"]
    assert format_features("As an AI, I cannot provide medical advice.")["refusal"]
    assert not format_features("The refund was approved; I can help with anything else.")["refusal"]


def test_repetition_loops() -> None:
    assert format_features("The answer is 4. " + "and so on, " * 20)["repetition_loop"]
    lines = "Intro\n" + "Check the invoice total.\n" * 4
    assert format_features(lines)["repetition_loop"]
    normal = "The invoice total is 41.50 EUR. It was paid on March 3 by card. No refund is due."
    f = format_features(normal)
    assert not f["repetition_loop"] and f["repeated_trigram_ratio"] == 0.0
    assert format_features("a b c " * 30)["repeated_trigram_ratio"] > 0.9


def test_empty_answer_and_types() -> None:
    f = format_features("", None, None)
    assert f["empty"] and f["lines"] == 0 and f["chars"] == 0
    assert all(isinstance(v, (bool, int, float)) for v in f.values())


def test_letter_case_is_the_uppercase_share_of_cased_letters() -> None:
    assert format_features("PARIS")["uppercase_share"] == 1.0
    assert format_features("paris")["uppercase_share"] == 0.0
    assert format_features("Paris 2024!")["uppercase_share"] == 0.2  # digits and punctuation are not letters
    assert format_features("東京 Tokyo")["uppercase_share"] == 0.2  # letters without case are not counted
    assert format_features("42")["uppercase_share"] == 0.0


def test_bullet_marker_style_is_one_bool_per_marker() -> None:
    dash = format_features("Steps:\n- one\n- two")
    star = format_features("Steps:\n* one\n* two")
    assert (dash["bullets_dash"], dash["bullets_star"], dash["bullets_plus"]) == (True, False, False)
    assert (star["bullets_dash"], star["bullets_star"], star["bullets_plus"]) == (False, True, False)
    assert dash["markdown_bullets"] == star["markdown_bullets"] == 2  # the count alone cannot see the switch
    mixed = format_features("+ one\n  - nested\n")
    assert mixed["bullets_plus"] and mixed["bullets_dash"] and not mixed["bullets_star"]
    assert not format_features("**bold** and a - dash")["bullets_star"]


def test_numbered_marker_style() -> None:
    dot, paren = format_features("1. one\n2. two"), format_features("1) one\n2) two")
    assert dot["numbered_dot"] and not dot["numbered_paren"]
    assert paren["numbered_paren"] and not paren["numbered_dot"]
    assert not format_features("In 2024. sales rose")["numbered_dot"]


def test_line_endings_and_trailing_whitespace() -> None:
    f = format_features("Paris\r\nLondon\r\n")
    assert f["crlf"] and f["trailing_newline"] and not f["line_trailing_spaces"]
    f = format_features("Paris  \nLondon")
    assert f["line_trailing_spaces"] and not f["trailing_newline"] and not f["crlf"] and not f["trailing_whitespace"]
    assert format_features("Paris\t")["line_trailing_spaces"]
    assert format_features("Paris \r\nLondon")["line_trailing_spaces"]
    f = format_features("Paris\n\nLondon\n")
    assert not f["line_trailing_spaces"] and f["trailing_newline"] and f["trailing_whitespace"]
    f = format_features("Paris ")
    assert f["trailing_whitespace"] and not f["trailing_newline"]


def test_every_feature_declares_its_kind_matching_its_type() -> None:
    from qualitycheck.core._records import ToolCall
    from qualitycheck.scoring._format import FEATURE_KINDS

    f = format_features("- one\n1. two\n", tool_calls=[ToolCall(name="f", arguments="{}")])  # with tools: every feature
    assert list(FEATURE_KINDS) == list(f)
    for name, value in f.items():
        assert FEATURE_KINDS[name] == ("rate" if isinstance(value, bool) else "mean"), name
