"""Format features of one answer, for drift between baseline and candidate.

Speculative decoding that is not lossless rarely makes answers *wrong* first;
it changes their shape: a fence appears, JSON gets wrapped in prose, a chat
template token leaks, the text loops until `max_tokens`. The comparison calls
`format_features` on both sides and puts the rates next to each other.

Every feature is a bool or a number, and its kind is declared once in
`FEATURE_KINDS`: a bool is a *rate* (share of answers, compared pairwise by
McNemar), a number a *mean* (compared by Wilcoxon signed-rank). The kind is
a property of the feature, not of the values a category happens to produce:
a count that is 0 or 1 on every answer of one category is still a count.

=========================  ====================================================
chars                      length in characters
tokens                     completion tokens as reported; else chars/4 rounded
tokens_estimated           True when `tokens` is the chars/4 estimate
lines                      number of lines (0 for an empty answer)
empty                      nothing but whitespace
leading_whitespace         starts with whitespace
trailing_whitespace        ends with whitespace (a trailing newline counts)
trailing_newline           the last character is a newline
line_trailing_spaces       some line ends in spaces or tabs before its newline
                           (or before the end of the answer)
crlf                       holds a CRLF ("\r\n") line ending
uppercase_share            uppercase letters / cased letters (0..1; 0 when the
                           answer has no cased letter)
code_fence                 holds at least one ``` / ~~~ fenced block
code_fence_labelled        the first fence names a language (```python)
code_fence_unclosed        a fence is still open at the end (often truncation)
json_strict                the whole answer is JSON
json_lenient               JSON found anywhere (whole, fenced or in prose)
markdown_headings          number of ATX headings (`# ...` to `###### ...`)
markdown_bullets           number of `-`, `*`, `+` bullet lines
numbered_items             number of `1.` / `1)` list lines
bullets_dash               some bullet line uses `-`
bullets_star               some bullet line uses `*`
bullets_plus               some bullet line uses `+`
numbered_dot               some numbered line uses `1.`
numbered_paren             some numbered line uses `1)`
refusal                    refusal or deflection phrasing ("I can't help ...")
template_token_leak        a stop or chat-template token appears in the text
template_tokens            how many such tokens appear
repetition_loop            the text ends in, or holds, a verbatim loop
repeated_trigram_ratio     1 - distinct word trigrams / trigrams (0..1)
truncated                  finish_reason == "length"
tool_calls                 number of tool calls
tool_args_invalid_json     some call's argument text is not JSON
tool_args_whitespace       some call's argument text has whitespace outside
                           its strings (`{"a": 1}` against `{"a":1}`)
tool_args_sorted_keys      every object in every call's arguments lists its
                           keys in sorted order (True with one key or none)
=========================  ====================================================

The four `tool_*` features are computed only for answers to requests that
declare `tools` (`format_features(..., tool_calls=[...])`), on both sides,
so categories without tools keep the features they always had. They catch
what a values-equal check lets through: a candidate that starts spacing or
reordering its argument JSON has drifted, even while every parser copes.

The marker styles are one bool each (an answer mixing `-` and `*` has both),
so the paired test sees "the candidate's lists switched from `-` to `*`" as
one rate falling and another rising, which a count of bullets cannot show.

`fence_languages(text)` gives the fence labels themselves, for display.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any, Literal

from qualitycheck.core._records import ToolCall
from qualitycheck.scoring._extract import fences, find_json

__all__ = ["FEATURE_KINDS", "TEMPLATE_TOKENS", "FeatureKind", "fence_languages", "format_features", "tool_call_features"]

FeatureKind = Literal["rate", "mean"]
"""`rate`: a bool, reported as the share of answers; `mean`: a number, reported as its mean."""

FEATURE_KINDS: dict[str, FeatureKind] = {
    "chars": "mean",
    "tokens": "mean",
    "tokens_estimated": "rate",
    "lines": "mean",
    "empty": "rate",
    "leading_whitespace": "rate",
    "trailing_whitespace": "rate",
    "trailing_newline": "rate",
    "line_trailing_spaces": "rate",
    "crlf": "rate",
    "uppercase_share": "mean",
    "code_fence": "rate",
    "code_fence_labelled": "rate",
    "code_fence_unclosed": "rate",
    "json_strict": "rate",
    "json_lenient": "rate",
    "markdown_headings": "mean",
    "markdown_bullets": "mean",
    "numbered_items": "mean",
    "bullets_dash": "rate",
    "bullets_star": "rate",
    "bullets_plus": "rate",
    "numbered_dot": "rate",
    "numbered_paren": "rate",
    "refusal": "rate",
    "template_token_leak": "rate",
    "template_tokens": "mean",
    "repetition_loop": "rate",
    "repeated_trigram_ratio": "mean",
    "truncated": "rate",
    "tool_calls": "mean",
    "tool_args_invalid_json": "rate",
    "tool_args_whitespace": "rate",
    "tool_args_sorted_keys": "rate",
}
"""Every feature `format_features` returns, with its kind: the one place the drift statistics read it from."""

TEMPLATE_TOKENS = (
    "<|im_end|>",
    "<|im_start|>",
    "<|endoftext|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|end_of_text|>",
    "<|begin_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|end|>",
    "<|user|>",
    "<|assistant|>",
    "<|system|>",
    "<end_of_turn>",
    "<start_of_turn>",
    "</s>",
    "<s>",
    "[INST]",
    "[/INST]",
    "<|return|>",
    "<|channel|>",
    "<|message|>",
    "<｜end▁of▁sentence｜>",
    "<|fim_middle|>",
)
"""Stop and chat-template tokens of common model families; in an answer they mean a leak."""

_HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+\S", re.MULTILINE)
_BULLET = re.compile(r"^[ \t]*([-*+])[ \t]+\S", re.MULTILINE)
_NUMBERED = re.compile(r"^[ \t]*\d{1,3}([.)])[ \t]+\S", re.MULTILINE)
_LINE_TRAILING_SPACES = re.compile(r"(?<![ \t])[ \t]+(?:\r?\n|\Z)")
"""Anchored at the start of a run of blanks, so a long run is scanned once, not once per position."""
_REFUSAL = re.compile(
    r"\b(?:I\s*(?:'m|am)\s+(?:sorry|afraid|unable|not\s+able)|I\s+(?:can(?:no|')t|cannot|won't|will\s+not|must\s+decline)"
    r"|As\s+an\s+AI\b|I\s+apologi[sz]e,?\s+but|(?:this|that)\s+(?:request\s+)?(?:is|would\s+be)\s+(?:illegal|unethical|harmful)"
    r"|I\s+(?:do\s+not|don't)\s+(?:feel\s+comfortable|provide|assist))",
    re.IGNORECASE,
)
_LOOP_MIN_CHARS = 100
_LOOP_MAX_PERIOD = 200


def _tail_loop(text: str) -> bool:
    """The end of the text is one block repeated verbatim (>= 3 times, >= 100 chars)."""
    t = text.rstrip()
    n = len(t)
    for p in range(1, min(_LOOP_MAX_PERIOD, n // 3) + 1):
        block = t[n - p :]
        k, end = 1, n - p
        while end - p >= 0 and t[end - p : end] == block:
            k += 1
            end -= p
        if k >= 3 and k * p >= _LOOP_MIN_CHARS:
            return True
    return False


def _line_loop(text: str) -> bool:
    """A non-trivial line repeated 4 times in a row anywhere."""
    run, prev = 0, None
    for line in text.splitlines():
        s = line.strip()
        if len(s) >= 10 and s == prev:
            run += 1
            if run >= 3:
                return True
        else:
            run = 0
        prev = s
    return False


def _trigram_repetition(text: str) -> float:
    words = text.split()
    grams = [tuple(words[i : i + 3]) for i in range(len(words) - 2)]
    return 0.0 if not grams else round(1 - len(set(grams)) / len(grams), 4)


def fence_languages(text: str) -> list[str]:
    return [f.lang for f in fences(text)]


def _uppercase_share(text: str) -> float:
    upper = sum(1 for ch in text if ch.isupper())
    cased = upper + sum(1 for ch in text if ch.islower())
    return 0.0 if cased == 0 else round(upper / cased, 4)


def _whitespace_outside_strings(text: str) -> bool:
    in_string = escaped = False
    for ch in text.strip():
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch.isspace():
            return True
    return False


def _keys_sorted(text: str) -> bool | None:
    """Every object in the JSON text lists its keys in sorted order; None when it is not JSON."""
    ok = True

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        nonlocal ok
        keys = [k for k, _ in items]
        ok = ok and keys == sorted(keys)
        return dict(items)

    try:
        json.loads(text, object_pairs_hook=pairs)
    except ValueError:
        return None
    return ok


def tool_call_features(calls: Sequence[ToolCall]) -> dict[str, Any]:
    """The `tool_*` features of one answer's calls (empty list: an answer with no call)."""
    sorted_keys, invalid = True, False
    for c in calls:
        found = _keys_sorted(c.arguments) if c.arguments.strip() else True
        invalid = invalid or found is None
        sorted_keys = sorted_keys and found is not False
    return {
        "tool_calls": len(calls),
        "tool_args_invalid_json": invalid,
        "tool_args_whitespace": any(_whitespace_outside_strings(c.arguments) for c in calls),
        "tool_args_sorted_keys": sorted_keys,
    }


def format_features(
    text: str, finish_reason: str | None = None, completion_tokens: int | None = None, tool_calls: Sequence[ToolCall] | None = None
) -> dict[str, Any]:
    """The drift features of one answer (see the module docstring for each; `FEATURE_KINDS` lists them).

    `tool_calls` None: the request declared no tools, and the `tool_*`
    features are left out; a list (empty when the answer made no call) adds them.
    """
    fs = fences(text)
    js = find_json(text)
    leaks = sum(text.count(t) for t in TEMPLATE_TOKENS)
    bullets = _BULLET.findall(text)
    numbered = _NUMBERED.findall(text)
    out: dict[str, Any] = {
        "chars": len(text),
        "tokens": completion_tokens if completion_tokens is not None else round(len(text) / 4),
        "tokens_estimated": completion_tokens is None,
        "lines": len(text.splitlines()),
        "empty": not text.strip(),
        "leading_whitespace": text[:1].isspace(),
        "trailing_whitespace": text[-1:].isspace(),
        "trailing_newline": text.endswith("\n"),
        "line_trailing_spaces": _LINE_TRAILING_SPACES.search(text) is not None,
        "crlf": "\r\n" in text,
        "uppercase_share": _uppercase_share(text),
        "code_fence": bool(fs),
        "code_fence_labelled": bool(fs) and fs[0].lang != "",
        "code_fence_unclosed": any(not f.closed for f in fs),
        "json_strict": js.mode == "strict",
        "json_lenient": js.mode is not None,
        "markdown_headings": len(_HEADING.findall(text)),
        "markdown_bullets": len(bullets),
        "numbered_items": len(numbered),
        "bullets_dash": "-" in bullets,
        "bullets_star": "*" in bullets,
        "bullets_plus": "+" in bullets,
        "numbered_dot": "." in numbered,
        "numbered_paren": ")" in numbered,
        "refusal": bool(_REFUSAL.search(text)),
        "template_token_leak": leaks > 0,
        "template_tokens": leaks,
        "repetition_loop": _tail_loop(text) or _line_loop(text),
        "repeated_trigram_ratio": _trigram_repetition(text),
        "truncated": finish_reason == "length",
    }
    if tool_calls is not None:
        out.update(tool_call_features(tool_calls))
    return out
