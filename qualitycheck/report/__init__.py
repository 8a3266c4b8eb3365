"""Reports of a finished run: report.html and the terminal summary; review.html for blinded human spot-checks.

Both read only summary.json and the run store (through `collect`), so
`qualitycheck report DIR` rebuilds them without calling an endpoint.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from qualitycheck.core._lazy import lazy_exports
from qualitycheck.core._store import RunStore
from qualitycheck.report._data import MAX_CASES, ReportData, RowCollector, collect
from qualitycheck.report._html import REPORT_NAME, render_html, write_html, write_report
from qualitycheck.report._terminal import print_summary, summary_renderables
from qualitycheck.verdict._model import Summary

if TYPE_CHECKING:
    from qualitycheck.report._review import REVIEW_NAME as REVIEW_NAME
    from qualitycheck.report._review import import_labels as import_labels
    from qualitycheck.report._review import write_review as write_review

_HOME = {"REVIEW_NAME": "_review", "import_labels": "_review", "write_review": "_review"}
"""The blinded review page is its own command: a report never imports it."""
__getattr__ = lazy_exports(__name__, _HOME)

__all__ = [
    "MAX_CASES",
    "REPORT_NAME",
    "REVIEW_NAME",
    "ReportData",
    "RowCollector",
    "collect",
    "import_labels",
    "print_summary",
    "publish",
    "render_html",
    "summary_renderables",
    "write_html",
    "write_report",
    "write_review",
]


def publish(store: RunStore, summary: Summary, *, max_cases: int = MAX_CASES, data: ReportData | None = None) -> Path:
    """Write report.html into the run folder and print the terminal summary (stderr).

    The page embeds at most `max_cases` cases (the most important first); the
    terminal summary says when some are left out and where they are. `data`
    is the report already gathered during the summary's walk of the store
    (`RowCollector`); without it the store is walked here (`collect`).
    """
    if data is None:
        data = collect(store, summary, max_cases=max_cases)
    path = write_html(data, store.folder / REPORT_NAME)
    print_summary(summary, data, report_path=str(path))
    return path
