"""Format features of one answer, for drift between baseline and candidate.

Speculative decoding that is not lossless rarely makes answers *wrong* first;
it changes their shape: a fence appears, JSON gets wrapped in prose, a chat
template token leaks, the text loops until `max_tokens`. The comparison calls
`format_features` on both sides and puts the rates next to each other.

Every feature is a bool or a number (so rates and means are well defined):

=========================  ====================================================
chars                      length in characters
tokens                     completion tokens as reported; else chars/4 rounded
tokens_estimated           True when `tokens` is the chars/4 estimate
lines                      number of lines (0 for an empty answer)
empty                      nothing but whitespace
leading_whitespace         starts with whitespace
trailing_whitespace        ends with whitespace (a trailing newline counts)
code_fence                 holds at least one ``` / ~~~ fenced block
code_fence_labelled        the first fence names a language (```python)
code_fence_unclosed        a fence is still open at the end (often truncation)
json_strict                the whole answer is JSON
json_lenient               JSON found anywhere (whole, fenced or in prose)
markdown_headings          number of ATX headings (`# ...` to `###### ...`)
markdown_bullets           number of `-`, `*`, `+` bullet lines
numbered_items             number of `1.` / `1)` list lines
refusal                    refusal or deflection phrasing ("I can't help ...")
template_token_leak        a stop or chat-template token appears in the text
template_tokens            how many such tokens appear
repetition_loop            the text ends in, or holds, a verbatim loop
repeated_trigram_ratio     1 - distinct word trigrams / trigrams (0..1)
truncated                  finish_reason == "length"
=========================  ====================================================

`fence_languages(text)` gives the fence labels themselves, for display.
"""

from __future__ import annotations

import re
from typing import Any

from qualitycheck.scoring._extract import fences, find_json

__all__ = ["TEMPLATE_TOKENS", "fence_languages", "format_features"]

TEMPLATE_TOKENS = (
    "<|im_end|>", "<|im_start|>", "<|endoftext|>", "<|eot_id|>", "<|eom_id|>", "<|end_of_text|>",
    "<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|end|>", "<|user|>", "<|assistant|>",
    "<|system|>", "<end_of_turn>", "<start_of_turn>", "</s>", "<s>", "[INST]", "[/INST]", "<|return|>",
    "<|channel|>", "<|message|>", "<｜end▁of▁sentence｜>", "<|fim_middle|>",
)
"""Stop and chat-template tokens of common model families; in an answer they mean a leak."""

_HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+\S", re.MULTILINE)
_BULLET = re.compile(r"^[ \t]*[-*+][ \t]+\S", re.MULTILINE)
_NUMBERED = re.compile(r"^[ \t]*\d{1,3}[.)][ \t]+\S", re.MULTILINE)
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


def format_features(text: str, finish_reason: str | None = None, completion_tokens: int | None = None) -> dict[str, Any]:
    """The drift features of one answer (see the module docstring for each)."""
    fs = fences(text)
    js = find_json(text)
    leaks = sum(text.count(t) for t in TEMPLATE_TOKENS)
    return {
        "chars": len(text),
        "tokens": completion_tokens if completion_tokens is not None else round(len(text) / 4),
        "tokens_estimated": completion_tokens is None,
        "lines": len(text.splitlines()),
        "empty": not text.strip(),
        "leading_whitespace": text[:1].isspace(),
        "trailing_whitespace": text[-1:].isspace(),
        "code_fence": bool(fs),
        "code_fence_labelled": bool(fs) and fs[0].lang != "",
        "code_fence_unclosed": any(not f.closed for f in fs),
        "json_strict": js.mode == "strict",
        "json_lenient": js.mode is not None,
        "markdown_headings": len(_HEADING.findall(text)),
        "markdown_bullets": len(_BULLET.findall(text)),
        "numbered_items": len(_NUMBERED.findall(text)),
        "refusal": bool(_REFUSAL.search(text)),
        "template_token_leak": leaks > 0,
        "template_tokens": leaks,
        "repetition_loop": _tail_loop(text) or _line_loop(text),
        "repeated_trigram_ratio": _trigram_repetition(text),
        "truncated": finish_reason == "length",
    }
