"""The `qualitycheck` command (Contract 2): thin commands over the pipeline; exit codes in one place.
"""

from __future__ import annotations

from qualitycheck.cli._main import (
    main as main,
)
from qualitycheck.cli._serving import (
    add_preflight_parser as add_preflight_parser,
    add_sweep_parser as add_sweep_parser,
    cmd_preflight as cmd_preflight,
    cmd_sweep as cmd_sweep,
)

__all__ = [
    "add_preflight_parser",
    "add_sweep_parser",
    "cmd_preflight",
    "cmd_sweep",
    "main",
]
