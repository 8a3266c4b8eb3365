"""Paired, bounded-concurrency generation into the run store.

Both (or all three) sides of a pair are sent together, so baseline and
candidate see the same period of server load: a latency or numerics change
that depends on load then shows up in both or neither. Cases are fed lazily
and every outcome is written the moment it arrives, so memory stays flat on
100k-case runs and an interrupted run loses only what was in flight.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from .cases import Case
from .client import Endpoint, build_request
from .config import Config
from .records import Response
from .store import RunStore

__all__ = ["Progress", "RunStats", "generate", "select_shard", "work_items"]


@dataclass
class RunStats:
    """Counts per target of what this invocation did (not the whole store)."""

    sent: dict[str, int] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    skipped: int = 0
    interrupted: bool = False
    wall_s: float = 0.0


class Progress:
    """Receives one call per finished request; the CLI renders it with rich."""

    def start(self, totals: dict[str, int]) -> None: ...

    def advance(self, target: str, ok: bool) -> None: ...

    def stop(self) -> None: ...


def select_shard(cases: list[Case], shard: str | None) -> list[Case]:
    """Stable split by a hash of the case id, independent of suite order."""
    if not shard:
        return cases
    i, n = (int(x) for x in shard.split("/"))
    return [c for c in cases if int(hashlib.sha256(c.id.encode()).hexdigest()[:8], 16) % n == i - 1]


def work_items(cases: Iterable[Case], config: Config, done: dict[tuple[str, str, int], tuple[str, bool]]) -> Iterable[tuple[Case, int, list[str]]]:
    """(case, repeat, targets still needing an answer) for everything not stored yet."""
    targets = config.targets()
    for case in cases:
        for rep in range(config.run.repeats):
            need = []
            for name, t in targets.items():
                prev = done.get((case.id, name, rep))
                fp = build_request(case, t, config.run, rep).fingerprint
                if prev is None or not prev[1] or prev[0] != fp:
                    need.append(name)
            if need:
                yield case, rep, need


async def generate(
    store: RunStore,
    cases: list[Case],
    config: Config,
    *,
    progress: Progress | None = None,
    http_clients: dict[str, Any] | None = None,
    on_response: Callable[[Response], None] | None = None,
) -> RunStats:
    """Send every missing (case, target, repeat) and store each outcome as it arrives."""
    progress = progress or Progress()
    stats = RunStats()
    done = store.done_keys()
    items = list(work_items(cases, config, done))
    totals: dict[str, int] = {}
    for _, _, need in items:
        for n in need:
            totals[n] = totals.get(n, 0) + 1
    stats.skipped = len(cases) * config.run.repeats * len(config.targets()) - sum(totals.values())
    endpoints = {
        name: Endpoint(name, t, config.run, (http_clients or {}).get(name))
        for name, t in config.targets().items()
    }
    sems = {name: asyncio.Semaphore(config.run.concurrency) for name in endpoints}
    progress.start(totals)
    t0 = time.perf_counter()

    async def one(name: str, case: Case, rep: int) -> None:
        async with sems[name]:
            r = await endpoints[name].send(case, rep)
        store.put_response(r)
        stats.sent[name] = stats.sent.get(name, 0) + 1
        if not r.ok:
            stats.errors[name] = stats.errors.get(name, 0) + 1
        progress.advance(name, r.ok)
        if on_response:
            on_response(r)

    async def pair(case: Case, rep: int, need: list[str]) -> None:
        await asyncio.gather(*(one(n, case, rep) for n in need))

    # at most `concurrency` pairs in flight: each pair holds one slot per target
    window = asyncio.Semaphore(config.run.concurrency)
    tasks: set[asyncio.Task[None]] = set()
    try:
        for case, rep, need in items:
            await window.acquire()
            task = asyncio.create_task(pair(case, rep, need))
            tasks.add(task)
            task.add_done_callback(lambda t: (tasks.discard(t), window.release()))
        if tasks:
            await asyncio.gather(*tasks)
    except asyncio.CancelledError:
        stats.interrupted = True
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        stats.wall_s = time.perf_counter() - t0
        progress.stop()
        await asyncio.gather(*(e.aclose() for e in endpoints.values()), return_exceptions=True)
    return stats
