"""The trip state in OUT, shared by every canary process that watches into the same folder.

Hysteresis needs memory that outlives a process: a route stays tripped until
`qualitycheck canary --rearm ROUTE`, cron-driven `--once` runs accumulate
consecutive failures, and an action that failed is tried again by the next
process rather than forgotten. The state is one JSON file replaced
atomically under an exclusive lock (`canary.lock`), re-read at every window
so a re-arm from another process takes effect at once. A dry run keeps its
own file, so what it decided is never mistaken for an action taken.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from qualitycheck.canary._record import ActionRecord, RouteState
from qualitycheck.core._errors import StoreError

__all__ = ["CanaryState", "locked_state", "read_state", "state_path"]

STATE_VERSION = 1


class CanaryState(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format_version: int = STATE_VERSION
    routes: dict[str, RouteState] = Field(default_factory=dict)
    streaks: dict[str, int] = Field(default_factory=dict)
    """`route/guardrail` → consecutive failing windows with enough evidence."""
    actions: dict[str, ActionRecord] = Field(default_factory=dict)
    """route → its fallback action (done, pending or recorded)."""

    def route(self, name: str) -> RouteState:
        return self.routes.setdefault(name, RouteState(route=name, state="armed"))

    def tripped(self) -> list[str]:
        return sorted(r for r, s in self.routes.items() if s.state == "tripped")

    def pending(self) -> list[ActionRecord]:
        return [a for a in self.actions.values() if a.status == "pending"]


def state_path(out: Path, dry_run: bool) -> Path:
    return out / ("canary_state.dry-run.json" if dry_run else "canary_state.json")


@contextmanager
def locked_state(out: Path, dry_run: bool = False) -> Iterator[CanaryState]:
    """The state, read under the folder's lock and written back (atomically) when the block ends without error."""
    out.mkdir(parents=True, exist_ok=True)
    path = state_path(out, dry_run)
    with open(out / "canary.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            state = _read(path)
            yield state
            tmp = path.with_suffix(".tmp")
            tmp.write_text(state.model_dump_json(indent=2), encoding="utf-8")
            os.replace(tmp, path)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def read_state(out: Path, dry_run: bool = False) -> CanaryState:
    """The state as it is now, for a reader that must not wait (the HTTP answers); never written.

    Read without the lock: the file is only ever replaced whole (`os.replace`),
    so a reader sees the state before or after a window, never half of one. A
    window holds the lock while its fallback action runs, on the same event
    loop as the answers, so waiting for the lock there would wait for ever.
    """
    return _read(state_path(out, dry_run))


def _read(path: Path) -> CanaryState:
    if not path.is_file():
        return CanaryState()
    try:
        return CanaryState.model_validate(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, ValidationError) as exc:
        raise StoreError(f"{path}: not a canary state file ({str(exc).splitlines()[0]}); move it aside to start afresh") from None
