"""`qualitycheck import FORMAT SRC --out SUITE.jsonl`: another tool's eval set as a suite.

Exit codes: 0 the suite was written (what `--skip-unmapped` left out is
listed); 2 bad input, or an assert, scorer, field or case with no faithful
mapping (each named `path:line: field: message`; nothing is written).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from qualitycheck.cli._options import IMPORT_OPTIONS, add_options
from qualitycheck.core._errors import ConfigError, Problem

__all__ = ["IMPORT_FORMATS", "add_import_command", "cmd_import"]

IMPORT_FORMATS = ("promptfoo", "openai-evals", "hf-datasets", "inspect")
"""The formats `import` reads (`qualitycheck.importers.FORMATS`, named here so `--help` imports none of them)."""


def add_import_command(sub: Any) -> None:
    """The `import` subparser (options declared in `_options.IMPORT_OPTIONS`)."""
    p = sub.add_parser(
        "import",
        help="turn an eval set of another tool (promptfoo tests, OpenAI evals samples, a Hugging Face dataset, an Inspect log) into a suite",
    )
    p.add_argument("format", choices=IMPORT_FORMATS, metavar="FORMAT", help=f"one of: {', '.join(IMPORT_FORMATS)}")
    p.add_argument(
        "src",
        metavar="SRC",
        help="promptfoo: a config or tests file; openai-evals: a samples .jsonl; hf-datasets: a save_to_disk folder or a cached hub name; "
        "inspect: an eval log (.eval or .json)",
    )
    add_options(p.add_argument, IMPORT_OPTIONS)


def cmd_import(a: argparse.Namespace) -> int:
    from qualitycheck.importers import ImportOptions, import_suite

    if not a.out:
        raise ConfigError([Problem("command line", None, "--out", "required: the suite file to write (.jsonl)")])
    options = ImportOptions(
        category=a.category,
        skip_unmapped=a.skip_unmapped,
        prompt=a.prompt,
        registry=a.registry,
        eval_name=a.eval,
        split=a.split,
        prompt_field=a.prompt_field,
        reference_field=a.reference_field,
        id_field=a.id_field,
        category_field=a.category_field,
        check=a.check,
    )
    report = import_suite(a.format, a.src, a.out, options)
    lines = report.lines()
    print(lines[0])
    for line in lines[1:]:
        print(line, file=sys.stderr)
    return 0
