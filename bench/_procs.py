"""Every process the bench starts ends with the bench, also when the bench is SIGKILLed (a CI timeout, a closed terminal).

The processes go in one process group, led by a keeper: a small process
that sleeps until the bench ends (`die_with_parent` has the kernel signal
it then, whatever ended the bench) and kills the group. The group takes
their descendants too (the proxy's, replay's workers) without any of them
doing anything. The group is not the bench's own: a bench started from a
script or `flock` stays in its caller's group, so Ctrl-C still reaches it
(and its context managers stop what it started, the keeper the rest).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

__all__ = ["group", "popen", "run"]

ROOT = Path(__file__).resolve().parents[1]

_KEEPER = r"""
import os, signal, sys
from qualitycheck.core._process import die_with_parent

def end(*_):
    os.killpg(os.getpgrp(), signal.SIGKILL)

signal.signal(signal.SIGTERM, end)
signal.signal(signal.SIGINT, signal.SIG_IGN)
die_with_parent(signal.SIGTERM, int(sys.argv[1]))  # after the handler: a bench already gone is a SIGTERM to handle
print("ready", flush=True)
while True:
    signal.pause()
"""

_group: int | None = None


def group() -> int:
    """The bench's process group (the keeper's pid), started on first use."""
    global _group
    if _group is None:
        env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        keeper = subprocess.Popen(
            [sys.executable, "-c", _KEEPER, str(os.getpid())],
            process_group=0,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            env=env,
            text=True,
        )
        line = keeper.stdout.readline() if keeper.stdout else ""
        if line.strip() != "ready":
            keeper.kill()
            raise RuntimeError(f"the bench's process keeper did not start: {line!r}")
        _group = keeper.pid
    return _group


def popen(cmd: list[str], **kw: Any) -> subprocess.Popen[Any]:
    """`subprocess.Popen` in the bench's group."""
    return subprocess.Popen(cmd, process_group=group(), **kw)


def run(cmd: list[str], **kw: Any) -> subprocess.CompletedProcess[Any]:
    """`subprocess.run` in the bench's group."""
    return subprocess.run(cmd, process_group=group(), **kw)
