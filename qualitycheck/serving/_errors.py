"""Why requests failed: stored errors grouped by kind, each with a count and one sample message.

"error rate 100%" tells an operator that something is wrong but not what; a
kind such as `http_404` with the server's own message ("The model `x` does
not exist") tells them what to fix. Kinds come from the one HTTP layer's
error mapping (`ErrorInfo.kind`), with HTTP failures split by status,
because a 401 and a 503 call for different fixes. The first message seen of
each kind is kept as its sample (already redacted of credentials when the
response was stored); memory is one entry per kind.
"""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict

from qualitycheck.core._records import ErrorInfo, Response

__all__ = ["ErrorKind", "ErrorTally", "error_kind"]

MESSAGE_CHARS = 300
"""A sample message is cut here: enough for a server's explanation, not a whole HTML error page."""


class ErrorKind(BaseModel):
    """One kind of failure on one side: `summary.json` `errors.<side>.kinds[]`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: str
    """`http_<status>` (e.g. `http_404`), `timeout`, `connection`, `stream_cut` (reset mid-answer), `malformed`, `bad_response`."""
    count: int
    message: str
    """The first message seen of this kind."""


def error_kind(info: ErrorInfo) -> str:
    """The kind a failure is counted under: HTTP failures by status, the rest by the client's kind."""
    if info.kind == "http_status" and info.status is not None:
        return f"http_{info.status}"
    return info.kind


class ErrorTally:
    """Failures of one side folded as they are read: kind → count and first message."""

    __slots__ = ("_kinds",)

    def __init__(self) -> None:
        self._kinds: dict[str, list[int | str]] = {}

    def add(self, r: Response) -> None:
        if r.error is None:
            return
        entry = self._kinds.get(kind := error_kind(r.error))
        if entry is None:
            self._kinds[kind] = [1, r.error.message[:MESSAGE_CHARS]]
        else:
            entry[0] = int(entry[0]) + 1

    def merge(self, later: ErrorTally) -> None:
        """Fold in the failures of the responses after this tally's: counts add up, each kind keeps its first message."""
        for kind, (n, message) in later._kinds.items():
            entry = self._kinds.get(kind)
            if entry is None:
                self._kinds[kind] = [n, message]
            else:
                entry[0] = int(entry[0]) + int(n)

    def kinds(self) -> list[ErrorKind]:
        """Most frequent first (ties by kind), so the first line says what mostly went wrong."""
        rows = [ErrorKind(kind=k, count=int(n), message=str(m)) for k, (n, m) in self._kinds.items()]
        return sorted(rows, key=lambda e: (-e.count, e.kind))

    @classmethod
    def of(cls, responses: Iterable[Response]) -> ErrorTally:
        tally = cls()
        for r in responses:
            tally.add(r)
        return tally
