"""The summary printed after every run: per category, guardrails, errors by kind, top regressions.

It must read the same in a CI log as in a terminal, so every verdict is a
word (PASS/FAIL), never only a colour; off a TTY the console writes no colour
codes and plain ASCII borders. Every table fits the width it is printed at
(`_Fitted`): at 80 columns, a CI log or a pipe, no header or cell is cut
short; a table whose words cannot sit side by side prints as indented lines.
It reads summary.json only (plus the report's rows when they are at hand),
so printing it costs nothing next to the run.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import IO

from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.measure import Measurement
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from qualitycheck.report._data import ReportData
from qualitycheck.verdict._gate import ALL_ROUTES, GuardrailResult
from qualitycheck.verdict._model import CategorySummary, CheckSummary, Summary
from qualitycheck.verdict._status import check_statuses

__all__ = ["make_console", "print_summary", "summary_renderables"]

_STYLE = {"pass": "bold green", "fail": "bold red", "inconclusive": "bold yellow"}
_TOP = 10
_LOG_WIDTH = 140
"""Width of the summary off a TTY (a file, a CI log): wide enough that most tables print as tables."""
_UNBOUNDED = 100_000
_INDENT = 4
_READABLE = 24
"""A wrapping column narrower than this (and than its text) reads as a word per line: print lines instead."""


def make_console(file: IO[str] | None = None) -> Console:
    """A console that colours only a real terminal and keeps CI logs plain, at a fixed width."""
    file = file or sys.stderr
    tty = hasattr(file, "isatty") and file.isatty()
    return Console(
        file=file,
        force_terminal=tty,
        no_color=not tty,
        highlight=False,
        soft_wrap=False,
        width=None if tty else _LOG_WIDTH,
        emoji=False,
        legacy_windows=False,
    )


def _column_widths(console: Console, options: ConsoleOptions, table: Table) -> list[int] | None:
    """Widths (without padding) that fit `table` in `options.max_width` with no word cut, or None when none do.

    Each column gets at least its longest word, header included; the spare
    width goes first to the columns that need least to print on one line,
    so the short ones stay whole and only the widest wraps. A column left
    narrower than `_READABLE` while its text is wider counts as not fitting.
    """
    wide = options.update_width(_UNBOUNDED)
    mins, maxs = [], []
    for column in table.columns:
        sizes = [Measurement.get(console, wide, cell) for cell in (column.header, *column.cells)]
        mins.append(max(m.minimum for m in sizes))
        maxs.append(max(m.maximum for m in sizes))
    _, right, _, left = table.padding
    n = len(table.columns)
    borders = ((2 if table.show_edge else 0) + n - 1) if table.box else 0
    room = options.max_width - borders - n * (left + right)
    if sum(mins) > room:
        return None
    widths, spare = list(mins), room - sum(mins)
    for i in sorted(range(n), key=lambda i: maxs[i] - mins[i]):
        grow = min(maxs[i] - mins[i], spare)
        widths[i] += grow
        spare -= grow
    if any(w < min(_READABLE, m) for w, m in zip(widths, maxs, strict=True)):
        return None
    return widths


class _Fitted:
    """A table laid out for the width it is printed at, or the same facts as lines when it cannot fit.

    Rich narrows a table that is too wide by shrinking its widest columns
    regardless of their words, which at 80 columns cuts headers to "ac…"
    and cells to "…". Here every column keeps its longest word (`_column_widths`);
    when the words cannot sit side by side, `lines` says the same thing as
    indented lines that wrap, like the sweep's table turning its metrics down
    the page.
    """

    def __init__(self, table: Callable[[], Table], lines: Callable[[], list[RenderableType]]) -> None:
        self._table = table
        self._lines = lines

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        table = self._table()
        widths = _column_widths(console, options, table)
        if widths is None:
            yield from self._lines()
            return
        for column, width in zip(table.columns, widths, strict=True):
            column.width = width
        yield table


def _title(text: str) -> Text:
    return Text(text, style="italic")


def _indented(text: Text) -> Padding:
    """A line that wraps under its own start (long words fold rather than being cut)."""
    text.overflow = "fold"
    return Padding(text, (0, 0, 0, _INDENT), expand=False)


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{x * 100:.1f}%"


def _word(verdict: str) -> Text:
    return Text(verdict.upper(), style=_STYLE.get(verdict, ""))


def _check_line(name: str, st: CheckSummary) -> str:
    sp = st.sampled
    if sp is not None:  # the sampled cases' test decides: show its figures
        d = "" if sp.delta is None else f" ({sp.delta * 100:+.1f}pp)"
        word = {"drop": "DROP", "no_drop": "no drop", "undecided": "UNDECIDED"}[sp.decision]
        p = f"Holm p={sp.p_value_holm:.3g}" if sp.p_value_holm is not None else f"p={sp.p_value:.3g}"
        return (
            f"{name} {_pct(sp.baseline_pass_rate)}→{_pct(sp.candidate_pass_rate)}{d} {p} "
            f"[{sp.cases} sampled × {sp.samples_at_decision}: {word}]"
        )
    if st.skipped_as_sampled and not st.n:
        return f"{name} not applied to {st.skipped_as_sampled} sampled case(s)"
    d = "" if st.delta is None else f" ({st.delta * 100:+.1f}pp)"
    ps = "" if st.p_value is None else f" p={st.p_value:.3f}"
    return f"{name} {_pct(st.baseline_pass_rate)}→{_pct(st.candidate_pass_rate)}{d}{ps}"


def _promise(cat: CategorySummary) -> str:
    """What the run can promise about the category, shortly: the drop it detects, how far identity generalises."""
    parts = []
    if cat.mde is not None:
        parts.append(f"drop ≥{cat.mde * 100:.0f}pp")
    if cat.divergence_upper is not None:
        parts.append(f"≤{cat.divergence_upper * 100:.1f}% differ")
    return "; ".join(parts) or "–"


def _regression_count(cat: CategorySummary) -> int:
    return len({c for v in cat.checks.values() for c in v.regressions})  # counted and tolerated, as listed


def _category_table(summary: Summary, ascii_box: bool) -> Table:
    t = Table(title="Categories", box=box.ASCII2 if ascii_box else box.SIMPLE_HEAVY, title_justify="left")
    for col, kw in (
        ("category", {}),
        ("cases", {"justify": "right"}),
        ("identical", {"justify": "right"}),
        ("checks: baseline → candidate (Δ)", {}),
        ("regressions", {"justify": "right"}),
        ("detects", {}),
        ("verdict", {}),
    ):
        t.add_column(col, **kw)  # type: ignore[arg-type]
    for name, cat in summary.categories.items():
        lines = "\n".join(_check_line(k, v) for k, v in cat.checks.items()) or "–"
        t.add_row(
            Text(name),
            str(cat.cases),
            _pct(cat.identical_rate),
            Text(lines),
            str(_regression_count(cat)),
            Text(_promise(cat)),
            _word(cat.verdict),
        )
    return t


def _category_lines(summary: Summary) -> list[RenderableType]:
    out: list[RenderableType] = [_title("Categories")]
    for name, cat in summary.categories.items():
        out.append(Text.assemble(f"{name}: ", _word(cat.verdict), overflow="fold"))
        out.append(_indented(Text(f"{cat.cases} cases, {_pct(cat.identical_rate)} identical, {_regression_count(cat)} regression(s)")))
        out += [_indented(Text(_check_line(k, v))) for k, v in cat.checks.items()]
        if cat.power:
            out.append(_indented(Text(f"can promise: {cat.power}")))
        if cat.would_decide:
            out.append(_indented(Text(f"would decide it: {cat.would_decide}")))
    return out


def _result(g: GuardrailResult) -> Text:
    return (
        Text("PASS", style="green")
        if g.passed
        else Text("FAIL", style="bold red")
        if g.passed is False
        else Text("NOT EVALUATED", style="yellow")
    )


def _observed(g: GuardrailResult) -> str:
    obs = g.observed
    if isinstance(obs, list):
        return ", ".join(map(str, obs)) or "–"
    return f"{obs:.4g}" if isinstance(obs, float) else ("–" if obs is None else str(obs))


def _guardrail_name(g: GuardrailResult) -> str:
    return g.name if g.route == ALL_ROUTES else f"{g.name} [{g.route}]"


def _guardrail_table(summary: Summary, ascii_box: bool) -> Table:
    t = Table(title="Guardrails", box=box.ASCII2 if ascii_box else box.SIMPLE_HEAVY, title_justify="left")
    for col in ("guardrail", "threshold", "observed", "result", "message"):
        t.add_column(col)
    for g in summary.guardrails:
        t.add_row(Text(_guardrail_name(g)), Text(str(g.threshold)), Text(_observed(g)), _result(g), Text(g.message))
    return t


def _guardrail_lines(summary: Summary) -> list[RenderableType]:
    out: list[RenderableType] = [_title("Guardrails")]
    for g in summary.guardrails:
        out.append(Text.assemble(_result(g), f" {_guardrail_name(g)}", overflow="fold"))
        out.append(_indented(Text(f"threshold {g.threshold}, observed {_observed(g)} — {g.message}")))
    return out


def _error_rows(summary: Summary) -> list[tuple[str, str, str, str]]:
    """(side, kind, count, first message) for every kind of failure, sides in the summary's order."""
    return [(side, k.kind, str(k.count), k.message) for side, e in summary.errors.items() for k in e.kinds]


def _errors_title(summary: Summary) -> str:
    failed = ", ".join(f"{side} {e.count} of {e.requests} ({_pct(e.rate)})" for side, e in summary.errors.items() if e.count)
    return f"Errors by kind: {failed}"


def _error_table(summary: Summary, ascii_box: bool) -> Table:
    t = Table(title=_errors_title(summary), box=box.ASCII2 if ascii_box else box.SIMPLE_HEAVY, title_justify="left")
    for col, kw in (("side", {}), ("kind", {}), ("count", {"justify": "right"}), ("first message", {})):
        t.add_column(col, **kw)  # type: ignore[arg-type]
    for row in _error_rows(summary):
        t.add_row(*(Text(x) for x in row))  # server messages are not rich markup
    return t


def _error_lines(summary: Summary) -> list[RenderableType]:
    out: list[RenderableType] = [_title(_errors_title(summary))]
    for side, kind, count, message in _error_rows(summary):
        out += [Text(f"{side}: {kind} × {count}", overflow="fold"), _indented(Text(message))]
    return out


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


def _top_regressions(summary: Summary, data: ReportData | None, ascii_box: bool) -> _Fitted | None:
    listed = _regressions(summary)
    rows: list[tuple[str, str, str, str]]
    if data is not None:
        rows = [(r.id, r.category, ", ".join([*r.regressed, *r.tolerated]), r.flags[0]) for r in data.top_regressions(_TOP)]
    else:
        rows = [(cid, cat, ", ".join(chs), status) for (cid, cat), (chs, status) in list(listed.items())[:_TOP]]
    if not rows:
        return None
    title = f"Top regressions ({len(rows)} of {len(listed)})"

    def table() -> Table:
        t = Table(title=title, box=box.ASCII2 if ascii_box else box.SIMPLE_HEAVY, title_justify="left")
        for col in ("case", "category", "checks", "status"):
            t.add_column(col)
        for r in rows:
            t.add_row(*(Text(x) for x in r))  # case ids are user text: never parsed as rich markup
        return t

    def lines() -> list[RenderableType]:
        return [_title(title), *(_indented(Text(f"{cid} ({cat}): {checks}: {status}")) for cid, cat, checks, status in rows)]

    return _Fitted(table, lines)


def _likelihood_lines(summary: Summary) -> list[RenderableType]:
    """The baseline model as referee, a line per finding: each category's likelihood cell, the decisive greedy divergences."""
    lk = summary.likelihood
    out: list[RenderableType] = []
    if lk is not None and not lk.evaluated:
        return [Text(f"likelihood under the baseline model: NOT EVALUATED ({lk.reason})")]
    for name, cat in summary.categories.items():
        cell = cat.likelihood
        if cell is not None:
            shift = "n/a" if cell.shift is None else f"{cell.shift:+.2f} nats/token"
            word = {"shift": "CHANGED", "no_shift": "no shift", "undecided": "undecided"}[cell.decision]
            line = f"{name}: likelihood {word}: shift {shift} over {cell.cases} sampled case(s), p {cell.p_value:.2g}"
            out.append(Text(line + (f": {cell.meaning}" if cell.meaning else "")))
        decisive = [d for d in cat.divergences if d.kind == "decisive"]
        if decisive:
            named = ", ".join(
                f"{d.case_id} ({'end' if d.candidate_token is None else repr(d.candidate_token)}"
                + (f" {d.candidate_probability:.1%})" if d.candidate_probability is not None else ")")
                for d in decisive[:5]
            )
            out.append(Text(f"{name}: {len(decisive)} greedy answer(s) left the baseline's at a token it would not write: {named}"))
    if lk is not None and lk.evaluated:
        out.append(Text(f"likelihood stage: {lk.scored} answers scored, {lk.prefilled_tokens:,} tokens prefilled in {lk.wall_s:.1f} s"))
    return out


def summary_renderables(summary: Summary, data: ReportData | None = None, *, ascii_box: bool = True) -> list[RenderableType]:
    """The summary as rich renderables (verdict line, then the tables that have content)."""
    head = Text("qualitycheck verdict: ")
    head.append_text(_word(summary.verdict))
    head.append(f"  ({summary.cases} cases)")
    out: list[RenderableType] = [head]
    sm = summary.sampling
    if sm is not None:
        spent = sum(r.requests for r in sm.rounds)
        out.append(
            Text(
                f"sampled cases: {sm.sampled_cases} (temperature > 0) in {len(sm.rounds)} round(s), {sm.mean_samples_per_case:.1f} "
                f"samples per side on average ({sm.mode}, budget {sm.max_samples_per_case}; {spent} requests)"
            )
        )
    out.append(_Fitted(lambda: _category_table(summary, ascii_box), lambda: _category_lines(summary)))
    for name, cat in summary.categories.items():  # what an inconclusive category lacks, under the table
        if cat.would_decide:
            out.append(Text(f"{name}: {cat.verdict.upper()}: would decide it: {cat.would_decide}"))
    out += _likelihood_lines(summary)
    if summary.guardrails:
        out.append(_Fitted(lambda: _guardrail_table(summary, ascii_box), lambda: _guardrail_lines(summary)))
    if _error_rows(summary):
        out.append(_Fitted(lambda: _error_table(summary, ascii_box), lambda: _error_lines(summary)))
    top = _top_regressions(summary, data, ascii_box)
    if top is not None:
        out.append(top)
    fb = summary.fallback
    if fb.action and fb.routes:
        out.append(Text(f"fallback: {fb.action} for {', '.join(fb.routes)}"))  # Text: no markup parsing
    return out


def _omitted_line(data: ReportData) -> Text:
    """A large run's report holds only some cases: say how many, and shout when regressions are among the rest."""
    where = f"load_run({str(data.folder)!r}) has them all" if data.folder is not None else "load_run(DIR) has them all"
    line = Text(f"report embeds {len(data.rows):,} of {data.total_cases:,} cases ({data.omitted_total:,} not embedded; {where})")
    if data.regressions_omitted:
        line = Text(
            f"WARNING: {data.flag_counts.get('regression', 0):,} regressions exceed the report's {data.max_cases:,}-case cap: "
            f"{data.regressions_omitted:,} regressions are not listed in report.html\n",
            style="bold red",
        ).append_text(line)
    return line


def print_summary(
    summary: Summary, data: ReportData | None = None, *, console: Console | None = None, report_path: str | None = None
) -> None:
    """Print the summary; `report_path` adds where the HTML report is."""
    console = console or make_console()
    parts = summary_renderables(summary, data, ascii_box=not console.is_terminal)
    if data is not None and data.omitted_total:
        parts.append(_omitted_line(data))
    if report_path:
        parts.append(Text(f"report: {report_path}"))
    console.print(Group(*parts))
