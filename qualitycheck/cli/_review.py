"""`qualitycheck review DIR`: write the blinded spot-check page, or `--import` its labels and re-gate the run.

Exit codes as for `report`: writing the page exits 0; an import re-gates the
run (summary.json, report.html, signoff.md with the human figures) and
exits with its verdict (0 pass, 1 fail or inconclusive); a bad labels file
exits 2 with nothing imported.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from qualitycheck.cli._options import REVIEW_OPTIONS, add_options
from qualitycheck.core._errors import ConfigError, Problem

__all__ = ["add_review_command", "cmd_review"]


def add_review_command(sub: Any) -> None:
    """The `review` subparser (options declared in `_options.REVIEW_OPTIONS`)."""
    p = sub.add_parser("review", help="blinded human spot-checks: write DIR/review.html, or --import the labels it exported")
    p.add_argument("dir", metavar="DIR")
    add_options(p.add_argument, REVIEW_OPTIONS)


def cmd_review(a: argparse.Namespace) -> int:
    from qualitycheck.core._store import RunStore

    folder = Path(a.dir)
    if not (folder / "run.sqlite").exists():
        raise ConfigError([Problem(str(folder), None, "DIR", "not a run folder (no run.sqlite): run `qualitycheck run --out DIR` first")])
    imports: list[str] = getattr(a, "import") or []  # `import` is a keyword: argparse stores it under that name
    if imports:
        from qualitycheck.pipeline._run import redo
        from qualitycheck.report._review import import_labels

        with RunStore.open(folder) as store:
            labels = import_labels(store, imports)
        n = sum(len(r.labels) for r in labels.reviewers)
        print(f"qualitycheck: imported labels; the run now holds {n} from {len(labels.reviewers)} reviewer(s)")
        return redo(folder, "report", None)
    from qualitycheck.report._review import DEFAULT_SAMPLE, write_review

    with RunStore.open(folder) as store:
        path, divergent, attention = write_review(
            store, sample=a.sample if a.sample is not None else DEFAULT_SAMPLE, per_category=a.per_category, seed=a.seed or 0
        )
    print(f"qualitycheck: {path}: {divergent} divergent pair(s) and {attention} attention check(s); the key stays in the run folder")
    return 0
