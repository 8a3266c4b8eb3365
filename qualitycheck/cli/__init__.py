"""The `qualitycheck` command (Contract 2): thin commands over the pipeline; exit codes in one place.

`_options` declares every flag once (the pytest plugin adds the same ones
with a `--qc-` prefix), `_main` builds the parser and dispatches,
`_commands` holds what each subcommand does.
"""

from __future__ import annotations

from qualitycheck.cli._main import build_parser as build_parser
from qualitycheck.cli._main import main as main

__all__ = ["build_parser", "main"]
