"""What a long stage reports as it goes: one base every stage takes, whatever draws it.

Generation, the likelihood stage, scoring and the judge each call `start`
with the work per target (or per stage), `advance` once per finished item,
and `stop`; the pipeline hands them a drawing one (`generation.RichProgress`:
bars on a terminal, a line per 10% in CI logs). The base itself draws
nothing, so a library caller gets a quiet stage.
"""

from __future__ import annotations

__all__ = ["Progress"]


class Progress:
    """Receives the work a stage plans and one call per item it finishes; draws nothing itself."""

    def start(self, totals: dict[str, int]) -> None: ...

    def advance(self, target: str, ok: bool) -> None: ...

    def stop(self) -> None: ...
