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
