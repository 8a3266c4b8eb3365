"""From one logged request to one case: its category (the rules file), its checks (the request itself), redacted.

The rules file (YAML) is an ordered list of `{match: {...}, category: NAME}`;
the first rule whose every `match` key holds names the category. A request
no rule matches is `json` when it asks for a JSON schema, `tool_call` when it
declares tools, and `qa` otherwise. The same file maps the columns of CSV and
Parquet logs and names the judge for open-ended requests:

    rules:
      - match: {route: billing}
        category: billing
      - match: {prompt_regex: "(?i)\\bSELECT\\b", has_tools: false}
        category: sql
    columns: {prompt: question, response: answer, tags.route: route}
    judge: pairwise            # or {mode: rubric, rubric: "..."}; none: no judge check

Checks come from what the request asked for, because that is what the
application relies on: a JSON schema is checked as one, declared tools as
tool calls (valid, and the same as the baseline's), a greedy request
(temperature 0) as exact identity with the baseline. What is left is open
text, for which the configured judge compares the two answers; without a
judge such a case has no check (the manifest counts them) and its category
can only be `inconclusive` when answers differ.

`case_from_request` is the one place a request becomes a case: replay calls
it per log line, and the shadow proxy per live request.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, model_validator

from qualitycheck.core._errors import ConfigError, Problem
from qualitycheck.traffic._formats import Columns, Logged
from qualitycheck.traffic._redact import Redactor

__all__ = [
    "KEPT_PARAMS",
    "ROLES",
    "Drafted",
    "JudgeChoice",
    "Match",
    "Rule",
    "Rules",
    "case_from_request",
    "content_text",
    "draft_case",
    "load_rules",
    "redact_case",
    "redact_fields",
]

KEPT_PARAMS = (
    "temperature",
    "top_p",
    "max_tokens",
    "max_completion_tokens",
    "stop",
    "seed",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "response_format",
    "presence_penalty",
    "frequency_penalty",
)
"""Request fields a case keeps exactly: they shape the answer. Dropped: `model` (the run's targets name it),
`stream` and `n` (the runner decides), and bookkeeping (`user`, `metadata`, `store`, `logprobs`)."""
_KEPT = frozenset(KEPT_PARAMS)
ROLES = ("system", "user", "assistant", "tool", "developer")
"""The roles a case may send (Contract 1)."""
OPENAI_DEFAULT_TEMPERATURE = 1.0
"""What the API samples at when a request names no temperature; the runner's own default is 0."""
_CATEGORY = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"


class Match(BaseModel):
    """What a request must have for its rule to apply: every key given must hold."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    route: str | list[str] | None = None
    """The request's `route` tag, or one of several."""
    tag: dict[str, str] | None = None
    """Tags and the values they must have."""
    model: str | None = None
    """The requested model, as a glob (`gpt-4o*`)."""
    system_regex: re.Pattern[str] | None = None
    """Searched in the system (and developer) messages."""
    prompt_regex: re.Pattern[str] | None = None
    """Searched in the user messages (or a completion's prompt)."""
    has_tools: bool | None = None
    response_format: Literal["text", "json_object", "json_schema"] | None = None
    """The request's `response_format.type`; a request without one is `text`."""

    @model_validator(mode="after")
    def _something(self) -> Match:
        if all(getattr(self, f) is None for f in type(self).model_fields):
            raise ValueError("matches every request: give at least one of " + ", ".join(type(self).model_fields))
        return self

    def holds(self, view: _View) -> bool:
        if self.route is not None and view.tags.get("route") not in ([self.route] if isinstance(self.route, str) else self.route):
            return False
        if self.tag is not None and any(view.tags.get(k) != v for k, v in self.tag.items()):
            return False
        if self.model is not None and not fnmatch.fnmatchcase(view.model, self.model):
            return False
        if self.has_tools is not None and self.has_tools != view.has_tools:
            return False
        if self.response_format is not None and self.response_format != view.response_format:
            return False
        if self.system_regex is not None and not self.system_regex.search(view.system):
            return False
        return self.prompt_regex is None or self.prompt_regex.search(view.prompt) is not None


class Rule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    match: Match
    category: str = Field(pattern=_CATEGORY)
    """Also the suite file's name (`<category>.jsonl`): letters, digits, `_`, `.`, `-`."""


class JudgeChoice(BaseModel):
    """The judge for open-ended requests: a judge definition's name (`judge: pairwise` is the short form)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: str = "pairwise"
    """pairwise, rubric, reference (the logged answer is the reference), or a user's own judge."""
    rubric: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        return {"mode": data} if isinstance(data, str) else data


class Rules(BaseModel):
    """The rules file: categories, the column mapping of tables, the judge, and the sampling minimum."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    rules: list[Rule] = Field(default_factory=list)
    """Tried in order; the first that matches names the category."""
    columns: Columns | None = None
    """CSV/Parquet: which column holds what (default: columns named like the fields)."""
    judge: JudgeChoice | None = None
    """The judge check given to requests no other check covers; none: no check."""
    min_per_stratum: int = Field(default=1, ge=1)
    """With --sample: cases every non-empty stratum gets at least (when it has them)."""
    source: str | None = Field(default=None, exclude=True)
    _column_lines: dict[str, int] = PrivateAttr(default_factory=dict)

    @property
    def column_lines(self) -> dict[str, int]:
        """Line of each mapped column in the rules file, for problems about a table that lacks it."""
        return self._column_lines

    def category(self, view: _View) -> str:
        for rule in self.rules:
            if rule.match.holds(view):
                return rule.category
        if view.response_format == "json_schema":
            return "json"
        if view.has_tools:
            return "tool_call"
        return "qa"


def load_rules(path: str | Path | None) -> Rules:
    """The rules file, or the defaults without one; every problem as `path:line: field: message` (exit 2)."""
    if path is None:
        return Rules()
    from qualitycheck.core._cases import _yaml_line_finder, yaml_problem
    from qualitycheck.core._config import _problems

    src = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except OSError as exc:
        raise ConfigError([Problem(src, None, "", f"cannot read rules: {exc.strerror}")]) from None
    except UnicodeDecodeError as exc:
        raise ConfigError([Problem(src, None, "", f"not UTF-8 text: {exc.reason}")]) from None
    except yaml.YAMLError as exc:
        raise ConfigError([yaml_problem(src, exc)]) from None
    if data is None:
        data = {}
    if isinstance(data, list):  # a bare list of rules
        data = {"rules": data}
    if not isinstance(data, dict):
        raise ConfigError([Problem(src, 1, "", "expected a mapping (rules, columns, judge) or a list of rules")])
    finder = _yaml_line_finder(node) if node is not None else None
    try:
        rules = Rules.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_problems(exc, src, finder)) from None
    rules = rules.model_copy(update={"source": src})
    if rules.columns is not None and finder is not None:
        rules._column_lines.update({f: finder(("columns", f)) for f in rules.columns.used()})
    return rules


# ------------------------------------------------------------------ a request as a case


def content_text(content: Any) -> str:
    """A message's text: the string, or the text parts of a multi-part content."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


class _View:
    """What rules match on, read from the unredacted request (patterns are written against real traffic).

    The texts are joined only when a rule asks for them.
    """

    __slots__ = ("_messages", "_prompt", "has_tools", "model", "response_format", "tags")

    def __init__(self, body: dict[str, Any], tags: dict[str, str], has_tools: bool, response_format: str):
        model = body.get("model")
        self._messages: list[dict[str, Any]] | None = body.get("messages")
        self._prompt = body.get("prompt")
        self.tags = tags
        self.model = model if isinstance(model, str) else ""
        self.has_tools = has_tools
        self.response_format = response_format

    def _text(self, roles: tuple[str, ...]) -> str:
        return "\n".join(content_text(m.get("content")) for m in self._messages or [] if m.get("role") in roles)

    @property
    def system(self) -> str:
        return self._text(("system", "developer"))

    @property
    def prompt(self) -> str:
        return self._text(("user",)) if self._messages is not None else str(self._prompt)


@dataclass(slots=True)
class Drafted:
    """A request turned into a case, with what sampling and the manifest need to know about it.

    `draft_case` makes it from the request as logged (`redactions` None);
    `redact_case` returns it redacted. Replay drafts every line and, with a
    sample, redacts only the cases the sample takes (`redact_fields`, as
    they are written).
    """

    case: dict[str, Any]
    """A Contract 1 case."""
    category: str
    prompt_chars: int
    has_system: bool
    temperature: float
    """The temperature the request was sampled at (the API default when it named none)."""
    output_tokens: int | None
    """The logged answer's length in tokens (None: nothing logged)."""
    redactions: dict[str, int] | None = None
    """Kind → values replaced (messages, params, tags, the logged answer); None: not redacted (yet)."""


def _read_messages(messages: Any) -> tuple[int, bool] | str:
    """(characters of text, whether a system or developer message leads the way), or why a case cannot send them."""
    if not isinstance(messages, list) or not messages:
        return "messages is not a non-empty list"
    chars, has_system = 0, False
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            return f"message {i} is not an object"
        role = m.get("role")
        if role not in ROLES:
            return f"message {i} has a role a case cannot send"
        content = m.get("content")
        if content is None and not m.get("tool_calls"):
            return f"message {i} has no content"
        chars += len(content_text(content))
        has_system = has_system or role in ("system", "developer")
    return chars, has_system


def _judge_check(judge: JudgeChoice, logged: Logged | None) -> dict[str, Any]:
    """The judge check; `logged` is the reference of the `reference` judge."""
    spec: dict[str, Any] = {"mode": judge.mode}
    if judge.rubric is not None:
        spec["rubric"] = judge.rubric
    if judge.mode == "reference":
        if logged is not None and logged.text:
            spec["reference"] = logged.text
        else:  # nothing logged to compare with: the two answers are compared with each other
            spec = {"mode": "pairwise"}
    return spec


def _checks(params: dict[str, Any], rules: Rules, logged: Logged | None) -> dict[str, Any]:
    """The checks the request itself asks for; the judge only where none does."""
    checks: dict[str, Any] = {}
    fmt = params.get("response_format")
    fmt_type = fmt.get("type") if isinstance(fmt, dict) else None
    if fmt_type == "json_schema":
        spec = fmt.get("json_schema")  # type: ignore[union-attr]
        schema = spec.get("schema") if isinstance(spec, dict) else None
        checks["json"] = {"schema": schema} if isinstance(schema, (dict, bool)) else True
    elif fmt_type == "json_object":
        checks["json"] = True
    if params.get("tools"):
        checks["tool_calls"] = {"valid": True, "same_as_baseline": True}
    if params["temperature"] == 0:
        checks["exact"] = True
    if not checks and rules.judge is not None:
        checks["judge"] = _judge_check(rules.judge, logged)
    return checks


def draft_case(
    body: dict[str, Any],
    tags: dict[str, str],
    rules: Rules,
    *,
    case_id: str,
    logged: Logged | None = None,
    source: str | None = None,
) -> Drafted | str:
    """One request body as a case, not yet redacted, or the reason it cannot be one (never quoting the request)."""
    messages = body.get("messages")
    prompt = body.get("prompt")
    if messages is not None:
        read = _read_messages(messages)
        if isinstance(read, str):
            return read
        prompt_chars, has_system = read
    elif prompt is not None:
        if not isinstance(prompt, str):
            return "prompt is not a single string"
        if not prompt.strip():
            return "prompt is empty"
        prompt_chars, has_system = len(prompt), False
    else:
        return "no messages or prompt"
    params = {k: v for k, v in body.items() if k in _KEPT and v is not None}
    temperature = params.get("temperature", OPENAI_DEFAULT_TEMPERATURE)
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
        return "temperature is not a number"
    params["temperature"] = temperature  # explicit: the runner would send 0 for a case without one
    fmt = params.get("response_format")
    fmt_type = fmt.get("type") if isinstance(fmt, dict) else None
    category = rules.category(_View(body, tags, bool(params.get("tools")), fmt_type if isinstance(fmt_type, str) else "text"))
    case: dict[str, Any] = {"id": case_id, "category": category}
    if messages is not None:
        case["messages"] = messages
    else:
        case["prompt"] = prompt
    case["params"] = params
    checks = _checks(params, rules, logged)
    if checks:
        case["checks"] = checks
    if tags:
        case["tags"] = tags
    if source is not None:
        case["source"] = source
    return Drafted(
        case=case,
        category=category,
        prompt_chars=prompt_chars,
        has_system=has_system,
        temperature=float(temperature),
        output_tokens=logged.output_tokens() if logged is not None else None,
    )


def redact_case(d: Drafted, redactor: Redactor | None, raw: bytes | None = None) -> Drafted:
    """The drafted case with every PII value replaced, consistently across its messages, params, tags and
    reference; `redactor` None keeps it as logged (`--keep-pii`). `raw`, the bytes the request came from,
    lets the redactor skip the scans those bytes rule out."""
    if redactor is None:
        return replace(d, redactions={})
    case, counts = redact_fields(d.case, redactor, raw)
    return replace(d, case=case, redactions=counts)


_REDACTED_FIELDS = ("messages", "prompt", "params", "checks", "tags")


def redact_fields(case: dict[str, Any], redactor: Redactor, raw: bytes | None = None) -> tuple[dict[str, Any], dict[str, int]]:
    """A Contract 1 case with every PII value replaced, and kind → values replaced: `redact_case`'s work on the case alone.

    One call over everything written, so a value is replaced wherever it
    appears; a schema in the checks is the params' own and a reference the
    logged answer: the same values get the same placeholders.
    """
    conv = redactor.conversation(raw)
    return {**case, **conv.value({k: case[k] for k in _REDACTED_FIELDS if k in case})}, dict(conv.counts)


def case_from_request(
    body: dict[str, Any],
    tags: dict[str, str],
    rules: Rules,
    redactor: Redactor | None,
    *,
    case_id: str,
    logged: Logged | None = None,
    source: str | None = None,
    raw: bytes | None = None,
) -> Drafted | str:
    """One request body as a redacted case, or the reason it cannot be one (never quoting the request).

    The one function the shadow proxy calls per request: `draft_case` then
    `redact_case`. `redactor` None keeps every value as logged (`--keep-pii`).
    """
    d = draft_case(body, tags, rules, case_id=case_id, logged=logged, source=source)
    return d if isinstance(d, str) else redact_case(d, redactor, raw)
