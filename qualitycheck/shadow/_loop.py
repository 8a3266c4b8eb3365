"""How each process of `qualitycheck shadow` runs: its event loop, its garbage collection, its log line.

The listening process (`shadow._serve`) and the mirror process
(`shadow._handoff.child_main`) both move bytes on one event loop while a
thread of theirs may want the GIL, so both run the same way; this module is
below both, so neither imports the other for it.
"""

from __future__ import annotations

import asyncio
import gc
import sys
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["GC_YOUNG", "SWITCH_INTERVAL_S", "log", "run_loop", "tune_gc"]

T = TypeVar("T")

SWITCH_INTERVAL_S = 0.0005
"""How long another thread (the writer, in the mirror process) may hold the GIL while the event loop has bytes to move."""
GC_YOUNG = 50_000
"""Allocations between young-generation collections once serving (Python's default is 700): see `tune_gc`."""


def tune_gc() -> None:
    """Collect garbage cycles less often, and never walk what was loaded before serving.

    Every request allocates a few hundred container objects (aiohttp's request
    and response objects, coroutines, futures, headers), so with the default
    threshold a young collection runs every request or two, the requests in
    flight survive it and are promoted, and the full collections that follow
    walk every imported module's objects as well. Frozen start-up objects are
    skipped by every collection; a larger young generation lets a request's
    objects die by reference count before a collection sees them.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG, *gc.get_threshold()[1:])


def log(message: str) -> None:
    """The proxy's log line: events and counts, never a request or an answer."""
    print(f"qualitycheck shadow: {message}", file=sys.stderr, flush=True)


def run_loop(main: Coroutine[Any, Any, T]) -> T:
    """Run on uvloop when it is installed (a faster event loop for the same aiohttp code), else on asyncio's own."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)
