"""Finding the payload inside a chat answer: fenced blocks and embedded JSON.

Models wrap code and data in markdown fences, or add a sentence around it.
Scorers record *where* the payload was found, because a change from a bare
answer to a fenced one is format drift even when both parse.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

__all__ = ["Fence", "JsonFound", "fences", "find_json", "loads_strict_json"]

# A fence opens with ``` or ~~~ (3+), an optional info string, and closes with
# the same marker on its own line; an unclosed fence runs to the end (truncation).
_FENCE = re.compile(
    r"^(?P<indent>[ \t]{0,3})(?P<mark>`{3,}|~{3,})[ \t]*(?P<info>[^\n`]*)\n(?P<body>.*?)(?:(?P<close>^[ \t]{0,3}(?P=mark)[ \t]*$)|\Z)",
    re.MULTILINE | re.DOTALL,
)


@dataclass(frozen=True)
class Fence:
    lang: str
    """First word of the info string, lower-cased ("" when none)."""
    body: str
    closed: bool


def fences(text: str) -> list[Fence]:
    """Every fenced block, in order; an unclosed last fence is kept (closed=False)."""
    out = []
    for m in _FENCE.finditer(text):
        info = m.group("info").strip().split()
        out.append(Fence(info[0].lower() if info else "", m.group("body"), m.group("close") is not None))
    return out


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def loads_strict_json(text: str) -> Any:
    """RFC 8259 JSON: Python's NaN/Infinity extensions are refused."""
    return json.loads(text, parse_constant=_reject_constant)


@dataclass(frozen=True)
class JsonFound:
    """Result of looking for JSON in an answer.

    `mode` is "strict" (the whole answer is JSON), "fenced" (inside a code
    fence), "embedded" (an object or array inside prose), or None.
    """

    mode: str | None
    value: Any = None
    error: str | None = None


_JSON_LANGS = {"", "json", "jsonc", "json5", "javascript", "js"}
_MAX_STARTS = 200


def find_json(text: str) -> JsonFound:
    """Strict first, then a fenced block, then the longest object/array in prose."""
    try:
        return JsonFound("strict", loads_strict_json(text))
    except (ValueError, RecursionError) as exc:
        strict_error = str(exc)
    for f in fences(text):
        if f.lang in _JSON_LANGS:
            try:
                return JsonFound("fenced", loads_strict_json(f.body))
            except (ValueError, RecursionError):
                continue
    dec = json.JSONDecoder(parse_constant=_reject_constant)
    best: tuple[int, Any] | None = None  # (length, value) of the longest decoded span
    covered = 0  # starts inside an already decoded span are nested values: skip them
    starts = [m.start() for m in re.finditer(r"[\[{]", text)][:_MAX_STARTS]
    for i in starts:
        if i < covered:
            continue
        try:
            value, end = dec.raw_decode(text, i)
        except (ValueError, RecursionError):
            continue
        if isinstance(value, (dict, list)):
            covered = end
            if best is None or end - i > best[0]:
                best = (end - i, value)
    if best is not None:
        return JsonFound("embedded", best[1])
    return JsonFound(None, None, strict_error)
