"""Process plumbing for the stages that start processes of their own or run long allocation-heavy loops.

vLLM servers and the report's second walk end with the process that
started them (`die_with_parent`); replay's workers and the report's second
walk fork only when that is safe (`fork_is_safe`), and the second walk
only when no other work wants the core it would take (`others_running`);
the walk of the store and replay's read of a log run with the cyclic
collector kept out of the way (`few_collections`).
"""

from __future__ import annotations

import gc
import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["die_with_parent", "few_collections", "fork_is_safe", "others_running"]

_PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGKILL, parent: int | None = None) -> None:
    """Have the kernel send `sig` to this process when its parent ends, so that nothing started here outlives it.

    Linux only (elsewhere nothing happens). `parent`, the pid the caller
    forked from: when it has ended already, before the request took effect,
    the signal is sent at once.
    """
    import ctypes

    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, sig)
    except (OSError, AttributeError):
        return
    if parent is not None and os.getppid() != parent:
        os.kill(os.getpid(), sig)


def fork_is_safe() -> bool:
    """Whether this process can fork: the system has fork, and no other thread runs.

    A fork copies only the calling thread; a lock another thread holds at
    that moment stays held in the copy forever.
    """
    return hasattr(os, "fork") and threading.active_count() == 1


def others_running(readings: int = 5, gap_s: float = 0.004, path: str = "/proc/loadavg") -> int | None:
    """Tasks other than the calling thread that are running or waiting for a core now; None where the kernel does not say.

    Linux's count of runnable tasks (the fourth field of /proc/loadavg, the
    caller included), as the median of a few readings milliseconds apart, so
    that a task which runs for an instant does not decide. The load averages
    of the same file lag by a minute: a run that ended seconds ago still
    counts there, and one that has just begun does not yet. The count is the
    whole system's, also tasks on cores this process may not use.
    """
    counts: list[int] = []
    for i in range(max(1, readings)):
        if i:
            time.sleep(gap_s)
        try:
            with open(path, encoding="ascii") as f:
                running = int(f.read().split()[3].split("/")[0])
        except (OSError, IndexError, ValueError):
            return None
        counts.append(max(0, running - 1))
    return sorted(counts)[len(counts) // 2]


@contextmanager
def few_collections(young: int, older: tuple[int, int] | None = None) -> Iterator[None]:
    """A loop over millions of short-lived records without the cyclic collector rescanning the heap every few hundred.

    Such records die by reference count, yet at the default threshold (700
    new containers) the collector runs thousands of times, and its
    collections of the older generations rescan every object alive, every
    imported module's included. Inside the block, what was loaded before it
    is frozen (never rescanned) and the young generation is collected every
    `young` containers at least (`older`: the older generations' thresholds,
    else unchanged); both are put back after.
    """
    threshold = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(max(threshold[0], young), *(older or threshold[1:]))
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        gc.unfreeze()
