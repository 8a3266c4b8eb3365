"""`--peers`: the same requests through lm-eval, promptfoo and inspect-ai, when installed.

Only tools already on this machine are driven (never installed from here);
each prints `not installed` otherwise. How each is driven offline is in
/work/shared/PEERS.md; the figures there were measured the same way.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

PEERS = {
    "lm_eval": "lm_eval",
    "promptfoo": "promptfoo",
    "inspect_ai": "inspect",
}


def _executable(name: str) -> str | None:
    venv_bin = Path(sys.executable).parent / name
    return str(venv_bin) if venv_bin.exists() else shutil.which(name)


def run_peers(
    figure: Callable[..., None],
    skipped: Callable[[str, str], None],
    tmp: Path,
    bench_server: Any,
    run_process: Any,
    mode: dict[str, float],
    n: int,
) -> None:
    for peer, exe in PEERS.items():
        path = _executable(exe)
        if path is None:
            print(f"peer_{peer}_ratio: not installed", flush=True)
            continue
        # Installed peers are not driven yet: their offline set-up (task YAMLs, provider configs)
        # is documented in PEERS.md; reporting a figure we did not measure would be worse than none.
        skipped(f"peer_{peer}_ratio", f"{path} found, but driving it is not automated in bench/peers.py")
