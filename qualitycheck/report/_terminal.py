"""The summary printed after every run: per category, guardrails, top regressions.

It must read the same in a CI log as in a terminal, so every verdict is a
word (PASS/FAIL), never only a colour; off a TTY the console writes no colour
codes, plain ASCII borders, and a fixed width so lines do not wrap at 80.
It reads summary.json only (plus the report's rows when they are at hand),
so printing it costs nothing next to the run.
"""

from __future__ import annotations

import sys
from typing import IO, Any

from rich import box
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from qualitycheck.report._data import ReportData

__all__ = ["make_console", "print_summary", "summary_renderables"]

_STYLE = {"pass": "bold green", "fail": "bold red", "inconclusive": "bold yellow"}
_TOP = 10


def make_console(file: IO[str] | None = None) -> Console:
    """A console that colours only a real terminal and keeps CI logs plain and wide."""
    file = file or sys.stderr
    tty = hasattr(file, "isatty") and file.isatty()
    return Console(file=file, force_terminal=tty, no_color=not tty, highlight=False, soft_wrap=False,
                   width=None if tty else 140, emoji=False, legacy_windows=False)


def _pct(x: Any) -> str:
    return f"{x * 100:.1f}%" if isinstance(x, (int, float)) and not isinstance(x, bool) else "–"


def _word(verdict: Any) -> Text:
    v = str(verdict or "–")
    return Text(v.upper(), style=_STYLE.get(v, ""))


def _count(x: Any) -> int:
    return len(x) if isinstance(x, list) else int(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else 0


def _check_line(name: str, st: dict[str, Any]) -> str:
    delta = st.get("delta")
    d = f" ({delta * 100:+.1f}pp)" if isinstance(delta, (int, float)) and not isinstance(delta, bool) else ""
    p = st.get("p_value")
    ps = f" p={p:.3f}" if isinstance(p, (int, float)) and not isinstance(p, bool) else ""
    return f"{name} {_pct(st.get('baseline_pass_rate'))}→{_pct(st.get('candidate_pass_rate'))}{d}{ps}"


def _category_table(summary: dict[str, Any], data: ReportData | None, ascii_box: bool) -> Table:
    t = Table(title="Categories", box=box.ASCII2 if ascii_box else box.SIMPLE_HEAVY, title_justify="left")
    for col, kw in (("category", {}), ("cases", {"justify": "right"}), ("identical", {"justify": "right"}),
                    ("checks: baseline→candidate (Δ)", {}), ("regr.", {"justify": "right"}), ("verdict", {})):
        t.add_column(col, **kw)  # type: ignore[arg-type]
    flagged = {cat: n.get("regression", 0) for cat, n in data.category_flags.items()} if data is not None else {}
    for name, cat in (summary.get("categories") or {}).items():
        cat = cat or {}
        checks = {k: v for k, v in (cat.get("checks") or {}).items() if isinstance(v, dict)}
        lines = "\n".join(_check_line(k, v) for k, v in checks.items()) or "–"
        regs = flagged.get(name) if data is not None else len({c for v in checks.values() for c in (v.get("regressions") or [])
                                                              if isinstance(v.get("regressions"), list)})
        t.add_row(Text(str(name)), str(cat.get("cases", "–")), _pct(cat.get("identical_rate")), Text(lines), str(regs or 0),
                  _word(cat.get("verdict")))
    return t


def _guardrail_table(summary: dict[str, Any], ascii_box: bool) -> Table | None:
    rails = [g for g in summary.get("guardrails") or [] if isinstance(g, dict)]
    if not rails:
        return None
    t = Table(title="Guardrails", box=box.ASCII2 if ascii_box else box.SIMPLE_HEAVY, title_justify="left")
    for col in ("guardrail", "threshold", "observed", "result", "message"):
        t.add_column(col)
    for g in rails:
        res = {True: Text("PASS", style="green"), False: Text("FAIL", style="bold red")}.get(
            g.get("passed"), Text("NOT EVALUATED", style="yellow"))  # type: ignore[call-overload]
        obs = g.get("observed")
        obs_s = f"{obs:.4g}" if isinstance(obs, float) else ("–" if obs is None else str(obs))
        name = str(g.get("name", ""))
        scope = g.get("route") or g.get("scope")
        t.add_row(Text(f"{name} [{scope}]" if scope and scope != "*" else name),
                  Text("–" if g.get("threshold") is None else str(g["threshold"])), Text(obs_s), res,
                  Text(str(g.get("message") or "")))
    return t


def _top_regressions(summary: dict[str, Any], data: ReportData | None, ascii_box: bool) -> Table | None:
    rows: list[tuple[str, str, str]] = []
    if data is not None:
        rows = [(r.id, r.category, ", ".join(r.regressed)) for r in data.top_regressions(_TOP)]
        total = data.flag_counts.get("regression", 0)
    else:
        by_case: dict[tuple[str, str], list[str]] = {}
        for cat_name, cat in (summary.get("categories") or {}).items():
            for check, st in ((cat or {}).get("checks") or {}).items():
                for cid in (st.get("regressions") if isinstance(st, dict) and isinstance(st.get("regressions"), list) else []):
                    by_case.setdefault((str(cid), cat_name), []).append(check)
        total = len(by_case)
        rows = [(cid, cat, ", ".join(chs)) for (cid, cat), chs in list(by_case.items())[:_TOP]]
    if not rows:
        return None
    title = f"Top regressions ({len(rows)} of {total})"
    t = Table(title=title, box=box.ASCII2 if ascii_box else box.SIMPLE_HEAVY, title_justify="left")
    for col in ("case", "category", "checks"):
        t.add_column(col)
    for r in rows:
        t.add_row(*(Text(x) for x in r))  # case ids are user text: never parsed as rich markup
    return t


def summary_renderables(summary: dict[str, Any], data: ReportData | None = None, *, ascii_box: bool = True) -> list[RenderableType]:
    """The summary as rich renderables (verdict line, then the tables that have content)."""
    head = Text("qualitycheck verdict: ")
    head.append_text(_word(summary.get("verdict")))
    head.append(f"  ({summary.get('cases', 0)} cases)")
    out: list[RenderableType] = [head, _category_table(summary, data, ascii_box)]
    for t in (_guardrail_table(summary, ascii_box), _top_regressions(summary, data, ascii_box)):
        if t is not None:
            out.append(t)
    fb = summary.get("fallback")
    if isinstance(fb, dict) and fb.get("action") and fb.get("routes"):
        routes = ", ".join(str(r if isinstance(r, str) else r.get("route", r)) for r in fb["routes"])
        out.append(Text(f"fallback: {fb['action']} for {routes}"))  # Text: no markup parsing
    return out


def _omitted_line(data: ReportData) -> Text:
    """A large run's report holds only some cases: say how many, and shout when regressions are among the rest."""
    where = f"load_run({str(data.folder)!r}) has them all" if data.folder is not None else "load_run(DIR) has them all"
    line = Text(f"report embeds {len(data.rows):,} of {data.total_cases:,} cases ({data.omitted_total:,} not embedded; {where})")
    if data.regressions_omitted:
        line = Text(f"WARNING: {data.flag_counts.get('regression', 0):,} regressions exceed the report's {data.max_cases:,}-case cap: "
                    f"{data.regressions_omitted:,} regressions are not listed in report.html\n", style="bold red").append_text(line)
    return line


def print_summary(summary: dict[str, Any], data: ReportData | None = None, *, console: Console | None = None,
                  report_path: str | None = None) -> None:
    """Print the summary; `report_path` adds where the HTML report is."""
    console = console or make_console()
    parts = summary_renderables(summary, data, ascii_box=not console.is_terminal)
    if data is not None and data.omitted_total:
        parts.append(_omitted_line(data))
    if report_path:
        parts.append(Text(f"report: {report_path}"))
    console.print(Group(*parts))
