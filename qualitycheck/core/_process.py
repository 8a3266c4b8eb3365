"""Process plumbing for the stages that start processes of their own: vLLM servers, the report's second walk."""

from __future__ import annotations

import os
import signal

__all__ = ["die_with_parent"]

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
