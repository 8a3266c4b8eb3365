"""Tool calls as answers: valid against the declared tools, the same as the baseline's, or as expected.

Speculative decoding has broken tool calls while the text stayed empty on
both sides (vLLM #40875: n-gram speculation corrupted half of them), so the
calls are checked as values: a call's arguments are JSON text, parsed here,
and two calls are the same when their names match and their arguments are
equal as JSON values. Whether the text itself changed (key order, spacing)
is kept in the detail and in the format features, where it is drift, not a
failure.

`tool_calls: true` means `{valid: true, same_as_baseline: true}`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pydantic import Field, model_validator

from qualitycheck.core._cases import Case
from qualitycheck.core._records import Response, ToolCall
from qualitycheck.scoring._base import BASELINE, CheckSpec, Outcome, Scorer, check_family
from qualitycheck.scoring._structured import canonical_json, json_path

__all__ = ["ExpectedCall", "ToolCallsCheck", "declared_tools", "parse_arguments"]

_MAX_ERRORS = 10
_MSG_CHARS = 300


class ExpectedCall(CheckSpec):
    """One call the answer must make: the tool's name and, when given, its arguments as a JSON value."""

    name: str = Field(min_length=1)
    arguments: dict[str, Any] | None = None
    """Compared as a JSON value (key order and spacing do not matter); None: any arguments."""


class ToolCallsCheck(CheckSpec):
    valid: bool = False
    """Every call names a declared tool (`params.tools`) and its arguments validate against its `parameters`."""
    same_as_baseline: bool = False
    """The same tool names in the same order as the baseline's, with arguments equal as JSON values."""
    expected: list[ExpectedCall] | None = None
    """The calls the answer must make, in order."""

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        return {"valid": True, "same_as_baseline": True} if data is True else data

    @model_validator(mode="after")
    def _something(self) -> ToolCallsCheck:
        if not (self.valid or self.same_as_baseline or self.expected is not None):
            raise ValueError("asks for nothing: set valid, same_as_baseline or expected (or write `tool_calls: true`)")
        return self


def declared_tools(params: dict[str, Any]) -> dict[str, Any]:
    """Tool name → its `parameters` schema (True when it declares none), from a request's `tools`."""
    out: dict[str, Any] = {}
    for tool in params.get("tools") or []:
        fn = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            out[fn["name"]] = fn.get("parameters", True)
    return out


def parse_arguments(call: ToolCall) -> tuple[Any, str | None]:
    """(value, None) when the arguments text is JSON, else (None, the parse error); empty text is `{}`."""
    text = call.arguments
    if not text.strip():
        return {}, None
    try:
        return json.loads(text), None
    except json.JSONDecodeError as exc:
        return None, f"arguments are not JSON: {exc.msg} at character {exc.pos}"


def _calls(answer: Response) -> list[ToolCall]:
    return list(answer.tool_calls or [])


def _as_values(calls: list[ToolCall]) -> list[tuple[str, str]]:
    """Each call as (name, canonical JSON of its arguments, or the raw text when it is not JSON)."""
    out = []
    for c in calls:
        value, err = parse_arguments(c)
        out.append((c.name, c.arguments if err else canonical_json(value)))
    return out


def _pretty(calls: list[ToolCall]) -> list[dict[str, Any]]:
    return [{"name": c.name, "arguments": c.arguments} for c in calls]


class ToolCallsValidScorer:
    """`tool_calls_valid`: each call names a declared tool and its arguments validate.

    With `tool_choice` "required" or a named function an answer without a
    call fails: the request demanded one. Otherwise no call is valid (there
    is nothing to be wrong), and the detail says there were none.
    """

    check = "tool_calls_valid"

    def __init__(self, case: Case):
        from jsonschema import validators

        self._validators = {}
        for name, schema in declared_tools(case.params).items():
            cls = validators.validator_for(schema, default=validators.Draft202012Validator)
            self._validators[name] = cls(schema, format_checker=cls.FORMAT_CHECKER)
        choice = case.params.get("tool_choice")
        self._required = choice == "required" or isinstance(choice, dict)

    def score(self, answer: Response, baseline: Response | None) -> Outcome:
        calls = _calls(answer)
        if not calls:
            if self._required:
                return Outcome("fail", 0, {"calls": 0, "reason": "the request requires a tool call and the answer made none"})
            return Outcome("pass", 0, {"calls": 0})
        problems: list[dict[str, Any]] = []
        for i, c in enumerate(calls):
            if c.name not in self._validators:
                known = ", ".join(sorted(self._validators)) or "none"
                problems.append({"call": i, "name": c.name, "message": f"calls undeclared tool {c.name!r} (declared: {known})"})
                continue
            value, err = parse_arguments(c)
            if err:
                problems.append({"call": i, "name": c.name, "message": err})
                continue
            errors = sorted(self._validators[c.name].iter_errors(value), key=lambda e: (list(e.absolute_path), e.message))
            for e in errors[:_MAX_ERRORS]:
                problems.append({"call": i, "name": c.name, "path": json_path(e.absolute_path), "message": e.message[:_MSG_CHARS]})
        detail: dict[str, Any] = {"calls": len(calls)}
        if problems:
            detail["errors"] = problems[:_MAX_ERRORS]
            detail["reason"] = f"call {problems[0]['call']} ({problems[0]['name']}): {problems[0]['message']}"
            return Outcome("fail", len(problems), detail)
        return Outcome("pass", 0, detail)


class ToolCallsSameScorer:
    """`tool_calls_same_as_baseline`: the calls equal the baseline's as values, in order.

    The baseline passes by definition; with no baseline answer the check
    cannot decide (`error`), as `exact: true`. `same_text` in the detail
    says whether the argument texts were also byte-equal: equal values with
    different text is key-order or spacing drift, not a failure.
    """

    check = "tool_calls_same_as_baseline"
    against_baseline = True
    """Identity with the baseline's calls: not for sampled cases."""

    def score(self, answer: Response, baseline: Response | None) -> Outcome:
        if answer.target == BASELINE:
            return Outcome("pass", True, {"is_baseline": True, "calls": len(_calls(answer))})
        if baseline is None or baseline.error is not None:
            return Outcome("error", None, {"reason": "the baseline has no answer for this repeat"})
        got, want = _calls(answer), _calls(baseline)
        detail: dict[str, Any] = {"calls": len(got), "baseline_calls": len(want)}
        if _as_values(got) == _as_values(want):
            detail["same_text"] = [c.arguments for c in got] == [c.arguments for c in want]
            return Outcome("pass", True, detail)
        detail["reason"] = _first_difference(got, want)
        detail["answer"], detail["baseline"] = _pretty(got), _pretty(want)
        return Outcome("fail", False, detail)


def _first_difference(got: list[ToolCall], want: list[ToolCall]) -> str:
    for i, (g, w) in enumerate(zip(got, want, strict=False)):
        if g.name != w.name:
            return f"call {i} is {g.name!r}, expected {w.name!r}"
        if _as_values([g]) != _as_values([w]):
            return f"call {i} ({g.name}) has different arguments"
    return f"{len(got)} calls, expected {len(want)}"


class ToolCallsExpectedScorer:
    """`tool_calls_expected`: the answer makes exactly the calls the case lists, in order."""

    check = "tool_calls_expected"

    def __init__(self, expected: list[ExpectedCall]):
        self.expected = expected

    def score(self, answer: Response, baseline: Response | None) -> Outcome:
        got = _calls(answer)
        detail: dict[str, Any] = {"calls": len(got), "expected_calls": len(self.expected)}
        for i, (g, w) in enumerate(zip(got, self.expected, strict=False)):
            if g.name != w.name:
                return Outcome("fail", False, {**detail, "reason": f"call {i} is {g.name!r}, expected {w.name!r}"})
            if w.arguments is not None:
                value, err = parse_arguments(g)
                if err:
                    return Outcome("fail", False, {**detail, "reason": f"call {i} ({g.name}): {err}"})
                if canonical_json(value) != canonical_json(w.arguments):
                    reason = f"call {i} ({g.name}) has arguments {canonical_json(value)[:_MSG_CHARS]}, expected {canonical_json(w.arguments)[:_MSG_CHARS]}"
                    return Outcome("fail", False, {**detail, "reason": reason})
        if len(got) != len(self.expected):
            return Outcome("fail", False, {**detail, "reason": f"{len(got)} calls, expected {len(self.expected)}"})
        return Outcome("pass", True, detail)


def _names(spec: ToolCallsCheck) -> list[str]:
    out = []
    if spec.valid:
        out.append("tool_calls_valid")
    if spec.same_as_baseline:
        out.append("tool_calls_same_as_baseline")
    if spec.expected is not None:
        out.append("tool_calls_expected")
    return out


@check_family(
    "tool_calls",
    spec=ToolCallsCheck,
    names=("tool_calls_valid", "tool_calls_same_as_baseline", "tool_calls_expected"),
    produces=_names,
)
def tool_calls_family(spec: ToolCallsCheck, case: Case) -> Sequence[Scorer]:
    out: list[Scorer] = []
    if spec.valid:
        out.append(ToolCallsValidScorer(case))
    if spec.same_as_baseline:
        out.append(ToolCallsSameScorer())
    if spec.expected is not None:
        out.append(ToolCallsExpectedScorer(spec.expected))
    return out
