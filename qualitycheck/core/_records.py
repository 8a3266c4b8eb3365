"""The records each stage writes and the next stage reads.

They are pydantic models because every one of them is persisted (in the run
store or in summary.json) and read back by a later stage; each carries the
`format_version` of the store it lives in. Records are frozen: a stage that
wants to change a result writes a new record instead of editing one.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "FORMAT_VERSION",
    "ErrorInfo",
    "Response",
    "Score",
    "ScoreStatus",
    "ToolCall",
    "Usage",
    "render_tool_calls",
]

FORMAT_VERSION = 1
"""Bumped when a persisted record changes shape; readers refuse newer versions."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Usage(_Frozen):
    """Token counts as the server reported them (None when it did not)."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None


class ErrorInfo(_Frozen):
    """Why a request has no usable answer after all retries."""

    kind: str
    """One of: http_status, timeout, connection, stream_cut, malformed, bad_response."""
    message: str
    status: int | None = None


class ToolCall(_Frozen):
    """One function call in an answer, as the server sent it.

    `arguments` is the exact text the model produced, not a parsed value:
    a change of key order or spacing is a change of output, and checks that
    want JSON values parse it themselves.
    """

    name: str
    arguments: str = ""
    id: str | None = None


def render_tool_calls(calls: list[ToolCall]) -> str:
    """One line per call, `name(arguments)` with the arguments as sent; the text form of an answer's calls."""
    return "\n".join(f"{c.name}({c.arguments})" for c in calls)


class Response(_Frozen):
    """One answer of one target to one case (one repeat), with its timings.

    Times are seconds relative to the moment the request was sent, measured
    with a monotonic clock on the client; `chunk_times[i]` is when the i-th
    content-bearing chunk arrived and `chunk_tokens[i]` how many tokens it
    carried when the server said so (speculative servers send several).
    """

    case_id: str
    target: str
    repeat: int = 0
    fingerprint: str
    """Hash of the exact request (endpoint, model, body); resume compares it."""
    text: str = ""
    tool_calls: list[ToolCall] | None = None
    """The answer's tool calls in order; None when it made none (and in records stored before tool calls were kept)."""
    token_ids: list[int] | None = None
    finish_reason: str | None = None
    usage: Usage = Usage()
    ttft_s: float | None = None
    chunk_times: list[float] = Field(default_factory=list)
    chunk_tokens: list[int] | None = None
    e2e_s: float | None = None
    started_at: float = 0.0
    """Wall-clock (epoch seconds) when the first attempt was sent."""
    attempts: int = 1
    error: ErrorInfo | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def answer(self) -> str:
        """The whole answer as one string: the text, then its tool calls (`render_tool_calls`).

        Everything that asks "did the answer change" (identity, divergence,
        similarity, the noise floor, the report's diff) compares this, so a
        changed tool call is a changed answer even when both texts are empty.
        Without tool calls it is the text itself.
        """
        if not self.tool_calls:
            return self.text
        calls = render_tool_calls(self.tool_calls)
        return f"{self.text}\n{calls}" if self.text else calls


ScoreStatus = Literal["pass", "fail", "error", "skipped"]


class Score(_Frozen):
    """One check's outcome on one response.

    `error` means the check itself could not decide (e.g. no response, a judge
    that never answered); it is never counted as a pass or a fail.
    """

    case_id: str
    target: str
    repeat: int = 0
    check: str
    status: ScoreStatus
    value: Any = None
    detail: dict[str, Any] = Field(default_factory=dict)
