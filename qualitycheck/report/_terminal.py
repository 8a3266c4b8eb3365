"""The summary printed after every run: per category, guardrails, top regressions.

It must read the same in a CI log as in a terminal, so every verdict is a
word (PASS/FAIL), never only a colour; off a TTY the console writes no colour
codes, plain ASCII borders, and a fixed width so lines do not wrap at 80.
It reads summary.json only (plus the report's rows when they are at hand),
so printing it costs nothing next to the run.
"""

from __future__ import annotations

import sys
from typing import IO

from rich import box
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from qualitycheck.report._data import ReportData
from qualitycheck.verdict._gate import ALL_ROUTES
from qualitycheck.verdict._model import CheckSummary, Summary
from qualitycheck.verdict._status import check_statuses

__all__ = ["make_console", "print_summary", "summary_renderables"]

_STYLE = {"pass": "bold green", "fail": "bold red", "inconclusive": "bold yellow"}
_TOP = 10


def make_console(file: IO[str] | None = None) -> Console:
    """A console that colours only a real terminal and keeps CI logs plain and wide."""
    file = file or sys.stderr
    tty = hasattr(file, "isatty") and file.isatty()
    return Console(file=file, force_terminal=tty, no_color=not tty, highlight=False, soft_wrap=False,
                   width=None if tty else 140, emoji=False, legacy_windows=False)


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{x * 100:.1f}%"


def _word(verdict: str) -> Text:
    return Text(verdict.upper(), style=_STYLE.get(verdict, ""))


def _check_line(name: str, st: CheckSummary) -> str:
    d = "" if st.delta is None else f" ({st.delta * 100:+.1f}pp)"
    ps = "" if st.p_value is None else f" p={st.p_value:.3f}"
    return f"{name} {_pct(st.baseline_pass_rate)}→{_pct(st.candidate_pass_rate)}{d}{ps}"


def _category_table(summary: Summary, ascii_box: bool) -> Table:
    t = Table(title="Categories", box=box.ASCII2 if ascii_box else box.SIMPLE_HEAVY, title_justify="left")
    for col, kw in (("category", {}), ("cases", {"justify": "right"}), ("identical", {"justify": "right"}),
                    ("checks: baseline→candidate (Δ)", {}), ("regr.", {"justify": "right"}), ("verdict", {})):
        t.add_column(col, **kw)  # type: ignore[arg-type]
    for name, cat in summary.categories.items():
        lines = "\n".join(_check_line(k, v) for k, v in cat.checks.items()) or "–"
        regs = len({c for v in cat.checks.values() for c in v.regressions})  # counted and tolerated, as listed
        t.add_row(Text(name), str(cat.cases), _pct(cat.identical_rate), Text(lines), str(regs), _word(cat.verdict))
    return t


def _guardrail_table(summary: Summary, ascii_box: bool) -> Table | None:
    if not summary.guardrails:
        return None
    t = Table(title="Guardrails", box=box.ASCII2 if ascii_box else box.SIMPLE_HEAVY, title_justify="left")
    for col in ("guardrail", "threshold", "observed", "result", "message"):
        t.add_column(col)
    for g in summary.guardrails:
        res = (Text("PASS", style="green") if g.passed else Text("FAIL", style="bold red") if g.passed is False
               else Text("NOT EVALUATED", style="yellow"))
        obs = g.observed
        obs_s = f"{obs:.4g}" if isinstance(obs, float) else ("–" if obs is None else str(obs))
        t.add_row(Text(g.name if g.route == ALL_ROUTES else f"{g.name} [{g.route}]"), Text(str(g.threshold)), Text(obs_s), res,
                  Text(g.message))
    return t


def _regressions(summary: Summary) -> dict[tuple[str, str], tuple[list[str], str]]:
    """(case, category) → (checks it regressed on, regression | tolerated), counted cases first, in the summary's order."""
    found: dict[tuple[str, str], tuple[list[str], str]] = {}
    for cat_name, cat in summary.categories.items():
        for check, st in cat.checks.items():
            statuses = check_statuses(st)
            for cid in st.regressions:
                checks, status = found.get((cid, cat_name), ([], "tolerated"))
                found[(cid, cat_name)] = ([*checks, check], "regression" if statuses[cid] == "regression" else status)
    return dict(sorted(found.items(), key=lambda kv: kv[1][1] != "regression"))


def _top_regressions(summary: Summary, data: ReportData | None, ascii_box: bool) -> Table | None:
    listed = _regressions(summary)
    rows: list[tuple[str, str, str, str]]
    if data is not None:
        rows = [(r.id, r.category, ", ".join([*r.regressed, *r.tolerated]), r.flags[0]) for r in data.top_regressions(_TOP)]
    else:
        rows = [(cid, cat, ", ".join(chs), status) for (cid, cat), (chs, status) in list(listed.items())[:_TOP]]
    if not rows:
        return None
    title = f"Top regressions ({len(rows)} of {len(listed)})"
    t = Table(title=title, box=box.ASCII2 if ascii_box else box.SIMPLE_HEAVY, title_justify="left")
    for col in ("case", "category", "checks", "status"):
        t.add_column(col)
    for r in rows:
        t.add_row(*(Text(x) for x in r))  # case ids are user text: never parsed as rich markup
    return t


def summary_renderables(summary: Summary, data: ReportData | None = None, *, ascii_box: bool = True) -> list[RenderableType]:
    """The summary as rich renderables (verdict line, then the tables that have content)."""
    head = Text("qualitycheck verdict: ")
    head.append_text(_word(summary.verdict))
    head.append(f"  ({summary.cases} cases)")
    out: list[RenderableType] = [head, _category_table(summary, ascii_box)]
    for t in (_guardrail_table(summary, ascii_box), _top_regressions(summary, data, ascii_box)):
        if t is not None:
            out.append(t)
    fb = summary.fallback
    if fb.action and fb.routes:
        out.append(Text(f"fallback: {fb.action} for {', '.join(fb.routes)}"))  # Text: no markup parsing
    return out


def _omitted_line(data: ReportData) -> Text:
    """A large run's report holds only some cases: say how many, and shout when regressions are among the rest."""
    where = f"load_run({str(data.folder)!r}) has them all" if data.folder is not None else "load_run(DIR) has them all"
    line = Text(f"report embeds {len(data.rows):,} of {data.total_cases:,} cases ({data.omitted_total:,} not embedded; {where})")
    if data.regressions_omitted:
        line = Text(f"WARNING: {data.flag_counts.get('regression', 0):,} regressions exceed the report's {data.max_cases:,}-case cap: "
                    f"{data.regressions_omitted:,} regressions are not listed in report.html\n", style="bold red").append_text(line)
    return line


def print_summary(summary: Summary, data: ReportData | None = None, *, console: Console | None = None,
                  report_path: str | None = None) -> None:
    """Print the summary; `report_path` adds where the HTML report is."""
    console = console or make_console()
    parts = summary_renderables(summary, data, ascii_box=not console.is_terminal)
    if data is not None and data.omitted_total:
        parts.append(_omitted_line(data))
    if report_path:
        parts.append(Text(f"report: {report_path}"))
    console.print(Group(*parts))
