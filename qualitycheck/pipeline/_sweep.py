"""`qualitycheck sweep`: one suite over several speculative candidates and concurrency levels.

Each candidate is labelled with its k (draft length) and given as a URL or
started from a launch template (`{k}`, `{port}`, `{model}` filled in; the
tool stops it before the next one starts, so two engines never compete for
the machine). The baseline is measured alone at every concurrency level,
then each candidate alone at every level: a cell is one (label, concurrency)
run with its own run store under `OUT/cells/`, so an interrupted sweep
resumes cell by cell. Speed is compared with the baseline at the same
concurrency, because speculation that pays for one request at a time often
stops paying once the batch is full.

Outputs: `OUT/sweep.json`, `OUT/sweep.html` (self-contained, inline SVG
charts), and a rich table on the terminal.
"""

from __future__ import annotations

import html
import json
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qualitycheck.core._cases import Case
from qualitycheck.core._config import Target
from qualitycheck.core._config_file import Config
from qualitycheck.core._errors import ConfigError, Problem
from qualitycheck.core._store import RunStore, StoredCases

__all__ = ["SweepCandidate", "parse_candidate", "parse_levels", "recommend", "render_html", "run_sweep"]

SWEEP_JSON, SWEEP_HTML = "sweep.json", "sweep.html"


@dataclass(frozen=True)
class SweepCandidate:
    """One candidate: `label` (its k) and either a URL or a launch template."""

    label: str
    url: str | None = None
    template: str | None = None


def parse_candidate(spec: str) -> SweepCandidate:
    """`k=URL` as given to --candidate."""
    label, sep, url = spec.partition("=")
    if not sep or not label.strip() or not url.startswith(("http://", "https://")):
        raise ConfigError([Problem("command line", None, "--candidate", f"expected K=URL (e.g. 3=http://host:8001), got {spec!r}")])
    return SweepCandidate(label.strip(), url=url.strip())


def parse_levels(text: str, flag: str = "--concurrency") -> list[int]:
    try:
        levels = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        levels = []
    if not levels or any(x < 1 for x in levels):
        raise ConfigError(
            [Problem("command line", None, flag, f"expected positive integers separated by commas (e.g. 1,4,8), got {text!r}")]
        )
    return sorted(set(levels))


# ---------------------------------------------------------------- running cells


def _cell(
    out: Path,
    name: str,
    side: str,
    target: Target,
    cases: Iterable[Case],
    cfg: Config,
    suites: list[str],
    concurrency: int,
    http_clients: dict[str, Any] | None,
    max_error_rate: float,
) -> dict[str, Any]:
    """Generate one (target, concurrency) cell into its own store and measure it, reading the store back as a stream."""
    from qualitycheck.core._records import MetricsWindows
    from qualitycheck.generation._measure import measured_generate
    from qualitycheck.pipeline._run import manifest_for, redacted_config
    from qualitycheck.serving._acceptance import acceptance_from_windows
    from qualitycheck.serving._errors import ErrorTally
    from qualitycheck.serving._latency import side_latency

    run = cfg.run.model_copy(update={"concurrency": concurrency, "preflight": False, "acceptance_by_category": False})
    cell_cfg = Config.model_validate({side: target.model_dump(), "run": run.model_dump()})
    folder = out / "cells" / name
    store = RunStore.create(folder, manifest_for(cases, cell_cfg, suites), cases)
    try:
        store.put_artifact("config", redacted_config(cell_cfg))
        stats = measured_generate(store, StoredCases(store), {side: target}, run, http_clients=http_clients)
        if stats.interrupted:
            from qualitycheck.core._errors import RunIncompleteError

            raise RunIncompleteError(f"sweep interrupted in cell {name}; run the same command again to resume")
        latency = side_latency(store.responses(), cfg.run.gpu_hour_usd).get(side, {})
        errors = ErrorTally.of(r for r in store.responses() if not r.ok)
        acceptance = acceptance_from_windows(store.record_or_empty(MetricsWindows).windows, side=side, reference="none")
    finally:
        store.close()
    rate = latency.get("error_rate")
    failed = None
    if rate is None or rate > max_error_rate:
        what = "no request was answered" if rate is None else f"error rate {rate:.1%} above the maximum {max_error_rate:.1%}"
        failed = {"reason": what, "error_kinds": [k.model_dump() for k in errors.kinds()]}
    return {"latency": latency, "acceptance": acceptance, "store": folder, "failed": failed}


def run_sweep(
    cfg: Config,
    cases: Iterable[Case],
    suites: list[str],
    candidates: list[SweepCandidate],
    levels: list[int],
    out: Path,
    *,
    baseline_template: str | None = None,
    model: str | None = None,
    http_clients: dict[str, Any] | None = None,
    log: Any = None,
) -> dict[str, Any]:
    """Every cell, then the comparison with the baseline and the recommendation; writes sweep.json/html.

    `cases` is re-iterable (each cell's store is filled from it); nothing
    holds the suite or a cell's answers, so a sweep's memory does not grow
    with the number of cases. A cell whose error rate exceeds the config's
    `max_error_rate` (1% by default) is marked failed with its error kinds
    and never feeds the recommendation.
    """
    from qualitycheck.engines._launcher import launch_template

    max_error_rate = float(cfg.guardrails.thresholds.get("max_error_rate", 0.01))

    log = log or (lambda msg: print(msg, file=sys.stderr))
    model = model or (cfg.baseline.model if cfg.baseline else None) or (cfg.candidate.model if cfg.candidate else None)
    if model is None:
        raise ConfigError([Problem("command line", None, "--model", "no model name (give --model or a model in the config)")])
    out.mkdir(parents=True, exist_ok=True)
    base_cells: dict[int, dict[str, Any]] = {}

    def each_level(label: str, side: str, target: Target, into: dict[int, dict[str, Any]]) -> None:
        for c in levels:
            log(f"sweep: {label} at concurrency {c} → {target.url}")
            into[c] = _cell(out, f"{label}-c{c}", side, target, cases, cfg, suites, c, http_clients, max_error_rate)

    def with_server(label: str, template: str, side: str, into: dict[int, dict[str, Any]]) -> None:
        k = label.removeprefix("k")
        server = launch_template(template.replace("{k}", k), model=model, name=f"sweep-{label}", log_dir=out / "logs")
        try:
            each_level(label, side, Target(url=server.url, model=model), into)
        finally:
            server.stop()

    if baseline_template:
        with_server("baseline", baseline_template, "baseline", base_cells)
    elif cfg.baseline is not None:
        each_level("baseline", "baseline", cfg.baseline, base_cells)
    cand_cells: dict[str, tuple[str, dict[int, dict[str, Any]]]] = {}
    for cand in candidates:
        cells: dict[int, dict[str, Any]] = {}
        label = _label(cand.label)
        if label in cand_cells:
            raise ConfigError([Problem("command line", None, "--candidate", f"candidate {cand.label!r} is given twice")])
        if cand.template:
            with_server(label, cand.template, "candidate", cells)
        else:
            assert cand.url is not None
            base = cfg.candidate or cfg.baseline
            target = Target(
                url=cand.url, model=model, extra_body=base.extra_body if base else {}, api_key_env=base.api_key_env if base else None
            )
            each_level(label, "candidate", target, cells)
        cand_cells[label] = (cand.label, cells)
    result = _assemble(base_cells, cand_cells, levels, cfg)
    (out / SWEEP_JSON).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    (out / SWEEP_HTML).write_text(render_html(result), encoding="utf-8")
    return result


# ---------------------------------------------------------------- comparison


def _label(k: str) -> str:
    return k if k.startswith("k") else f"k{k}"


def _ratio(num: float | None, den: float | None) -> float | None:
    return num / den if num is not None and den else None


def _identical(base: Path, cand: Path) -> float | None:
    """Share of (case, repeat)s answered by both cells whose texts are equal: a merge of two stores read in case order."""
    with RunStore.open(base) as b, RunStore.open(cand) as c:
        right = ((r.case_id, r.repeat, r.answer) for r in c.responses() if r.ok)
        other = next(right, None)
        pairs = same = 0
        for r in b.responses():
            if not r.ok:
                continue
            while other is not None and other[:2] < (r.case_id, r.repeat):
                other = next(right, None)
            if other is not None and other[:2] == (r.case_id, r.repeat):
                pairs += 1
                same += other[2] == r.answer
    return same / pairs if pairs else None


def _assemble(
    base: dict[int, dict[str, Any]], cands: dict[str, tuple[str, dict[int, dict[str, Any]]]], levels: list[int], cfg: Config
) -> dict[str, Any]:
    cells = []
    for c in levels:
        if c in base:
            cells.append(
                {
                    "label": "baseline",
                    "k": None,
                    "concurrency": c,
                    "latency": base[c]["latency"],
                    "acceptance": None,
                    "identical_rate": None,
                    "tpot_speedup": None,
                    "throughput_ratio": None,
                    "failed": base[c]["failed"],
                }
            )
    for label, (k, by_level) in cands.items():
        for c in levels:
            cell = by_level[c]
            b = base.get(c)
            lat, acc = cell["latency"], cell["acceptance"]
            bl = b["latency"] if b else {}
            cells.append(
                {
                    "label": label,
                    "k": k,
                    "concurrency": c,
                    "latency": lat,
                    "acceptance": {
                        key: acc.get(key)
                        for key in (
                            "rate",
                            "mean_accepted_length",
                            "draft_tokens",
                            "accepted_tokens",
                            "drafts",
                            "by_position",
                            "warnings",
                            "speculating",
                        )
                    },
                    "identical_rate": _identical(b["store"], cell["store"]) if b else None,
                    "tpot_speedup": _ratio((bl.get("tpot_ms") or {}).get("p50"), (lat.get("tpot_ms") or {}).get("p50")),
                    "throughput_ratio": _ratio(lat.get("output_tokens_per_s"), bl.get("output_tokens_per_s")),
                    "failed": cell["failed"],
                }
            )
    result = {
        "format_version": 1,
        "levels": levels,
        "labels": list(cands),
        "gpu_hour_usd": cfg.run.gpu_hour_usd,
        "cells": cells,
        "failed_cells": [f"{c['label']}@{c['concurrency']}" for c in cells if c.get("failed")],
    }
    result["recommendation"] = recommend(cells, levels)
    return result


def recommend(cells: list[dict[str, Any]], levels: list[int], max_extra_error_rate: float = 0.01) -> dict[str, Any]:
    """The k to use and the concurrency above which speculation stops paying.

    A candidate pays at a level when its median TPOT beats the baseline's
    there (tpot_speedup > 1). Candidates whose error rate exceeds the
    baseline's by more than `max_extra_error_rate` at any level are not
    recommended. Among the rest, the best speedup at the lowest level wins
    (ties: the smaller k, which drafts less work).
    """
    base_err = {c["concurrency"]: (c["latency"].get("error_rate") or 0.0) for c in cells if c["label"] == "baseline"}
    base_failed = {c["concurrency"] for c in cells if c["label"] == "baseline" and c.get("failed")}
    per_label: dict[str, dict[str, Any]] = {}
    for c in cells:
        if c["label"] == "baseline":
            continue
        d = per_label.setdefault(c["label"], {"speedups": {}, "excluded": None, "k": c["k"]})
        d["speedups"][c["concurrency"]] = c["tpot_speedup"]
        err = c["latency"].get("error_rate")
        if c.get("failed"):
            d["excluded"] = d["excluded"] or f"cell failed at concurrency {c['concurrency']}: {c['failed']['reason']}"
        elif c["concurrency"] in base_failed:
            d["excluded"] = d["excluded"] or f"the baseline failed at concurrency {c['concurrency']}: nothing to compare with"
        elif err is not None and err > base_err.get(c["concurrency"], 0.0) + max_extra_error_rate:
            d["excluded"] = f"error rate {err:.1%} at concurrency {c['concurrency']}"
    summary: dict[str, Any] = {}
    for label, d in per_label.items():
        pays_up_to, stops_at = None, None
        for lvl in levels:
            s = d["speedups"].get(lvl)
            if s is not None and s > 1.0 and stops_at is None:
                pays_up_to = lvl
            elif stops_at is None:
                stops_at = lvl
        summary[label] = {
            "pays_up_to": pays_up_to,
            "stops_paying_at": stops_at,
            "excluded": d["excluded"],
            "speedup_at_lowest": d["speedups"].get(levels[0]),
        }

    def key(label: str) -> tuple[float, float]:
        k = per_label[label]["k"]
        try:
            kn = float(str(k).removeprefix("k"))
        except ValueError:
            kn = 0.0
        return (-(summary[label]["speedup_at_lowest"] or 0.0), kn)

    eligible = [lbl for lbl in summary if not summary[lbl]["excluded"] and (summary[lbl]["speedup_at_lowest"] or 0) > 1.0]
    best = min(eligible, key=key) if eligible else None
    if best is None:
        reason = "no candidate beats the baseline's median TPOT at the lowest concurrency without extra errors" + (
            "; some cells failed (see failed_cells)" if base_failed or any(c.get("failed") for c in cells) else ""
        )
    else:
        s = summary[best]
        reason = f"{best}: median TPOT {s['speedup_at_lowest']:.2f}x faster than the baseline at concurrency {levels[0]}" + (
            f"; stops paying at concurrency {s['stops_paying_at']}" if s["stops_paying_at"] else "; pays at every level swept"
        )
    return {
        "recommended": best,
        "k": per_label[best]["k"] if best else None,
        "pays_up_to": summary[best]["pays_up_to"] if best else None,
        "stops_paying_at": summary[best]["stops_paying_at"] if best else None,
        "reason": reason,
        "per_candidate": summary,
    }


# ---------------------------------------------------------------- rendering

_METRICS: list[tuple[str, str, Any]] = [
    ("acceptance rate", "", lambda c: (c.get("acceptance") or {}).get("rate")),
    ("accepted tokens per step", "", lambda c: (c.get("acceptance") or {}).get("mean_accepted_length")),
    ("TTFT p50", "ms", lambda c: c["latency"].get("ttft_ms", {}).get("p50")),
    ("TTFT p95", "ms", lambda c: c["latency"].get("ttft_ms", {}).get("p95")),
    ("TPOT p50", "ms", lambda c: c["latency"].get("tpot_ms", {}).get("p50")),
    ("TPOT p95", "ms", lambda c: c["latency"].get("tpot_ms", {}).get("p95")),
    ("ITL p50", "ms", lambda c: c["latency"].get("itl_ms", {}).get("p50")),
    ("ITL p99", "ms", lambda c: c["latency"].get("itl_ms", {}).get("p99")),
    ("output tokens/s", "", lambda c: c["latency"].get("output_tokens_per_s")),
    ("error rate", "", lambda c: c["latency"].get("error_rate")),
]
_COLOURS = ["#444", "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b"]


def _fmt(v: Any, digits: int = 2) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def line_chart(title: str, levels: list[int], series: dict[str, list[float | None]], unit: str = "") -> str:
    """A small SVG line chart: concurrency levels on x (evenly spaced), one line per label."""
    w, h, left, right, top, bottom = 360, 200, 48, 90, 24, 28
    values = [v for vs in series.values() for v in vs if v is not None]
    top_v = max(values) if values else 1.0
    top_v = top_v * 1.1 if top_v > 0 else 1.0
    pw, ph = w - left - right, h - top - bottom

    def x(i: int) -> float:
        return left + (pw * i / (len(levels) - 1) if len(levels) > 1 else pw / 2)

    def y(v: float) -> float:
        return top + ph - ph * (v / top_v)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" role="img" aria-label="{html.escape(title)}">',
        f'<text x="{left}" y="14" font-size="12" font-weight="bold">{html.escape(title)}{" (" + unit + ")" if unit else ""}</text>',
        f'<line x1="{left}" y1="{top + ph}" x2="{left + pw}" y2="{top + ph}" stroke="#999"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + ph}" stroke="#999"/>',
        f'<text x="{left - 4}" y="{top + 4}" font-size="10" text-anchor="end">{_fmt(top_v, 3 if top_v < 10 else 0)}</text>',
        f'<text x="{left - 4}" y="{top + ph}" font-size="10" text-anchor="end">0</text>',
    ]
    for i, lvl in enumerate(levels):
        parts.append(f'<text x="{x(i):.1f}" y="{h - 10}" font-size="10" text-anchor="middle">{lvl}</text>')
    for n, (label, vs) in enumerate(series.items()):
        colour = _COLOURS[n % len(_COLOURS)]
        pts = [(x(i), y(v)) for i, v in enumerate(vs) if v is not None]
        if len(pts) > 1:
            parts.append(
                f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{" ".join(f"{a:.1f},{b:.1f}" for a, b in pts)}"/>'
            )
        parts += [f'<circle cx="{a:.1f}" cy="{b:.1f}" r="3" fill="{colour}"/>' for a, b in pts]
        parts.append(f'<text x="{left + pw + 8}" y="{top + 12 + 14 * n}" font-size="11" fill="{colour}">{html.escape(label)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _series(result: dict[str, Any], metric: Any) -> dict[str, list[float | None]]:
    labels = ["baseline", *result["labels"]]
    by = {(c["label"], c["concurrency"]): c for c in result["cells"]}
    out = {}
    for label in labels:
        vals = [metric(by[(label, lvl)]) if (label, lvl) in by else None for lvl in result["levels"]]
        if any(v is not None for v in vals):
            out[label] = vals
    return out


def _rows(result: dict[str, Any]) -> list[list[str]]:
    rows = []
    for c in result["cells"]:
        lat, acc = c["latency"], c.get("acceptance") or {}
        rows.append(
            [
                c["label"],
                str(c["concurrency"]),
                _fmt(acc.get("rate")),
                _fmt(acc.get("mean_accepted_length")),
                _fmt(lat.get("ttft_ms", {}).get("p50"), 1),
                _fmt(lat.get("ttft_ms", {}).get("p95"), 1),
                _fmt(lat.get("tpot_ms", {}).get("p50"), 2),
                _fmt(lat.get("tpot_ms", {}).get("p95"), 2),
                _fmt(lat.get("itl_ms", {}).get("p50"), 2),
                _fmt(lat.get("output_tokens_per_s"), 1),
                _fmt(lat.get("error_rate"), 3),
                _fmt(c.get("tpot_speedup")),
                _fmt(c.get("identical_rate")),
            ]
        )
    return rows


HEADERS = [
    "target",
    "conc",
    "accept",
    "tok/step",
    "TTFT p50",
    "TTFT p95",
    "TPOT p50",
    "TPOT p95",
    "ITL p50",
    "out tok/s",
    "errors",
    "TPOT speedup",
    "identical",
]


def render_html(result: dict[str, Any]) -> str:
    rec = result["recommendation"]
    head = "".join(f"<th>{html.escape(h)}</th>" for h in HEADERS)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(v)}</td>" for v in row) + "</tr>" for row in _rows(result))
    charts = "".join(f"<figure>{line_chart(name, result['levels'], _series(result, fn), unit)}</figure>" for name, unit, fn in _METRICS)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>qualitycheck sweep</title>
<style>body{{font-family:system-ui,sans-serif;margin:2em;color:#222}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}}th{{background:#f3f3f3}}
figure{{display:inline-block;margin:8px}}.rec{{font-size:1.1em;padding:8px;background:#eef6ee;border:1px solid #9c9}}</style>
</head><body><h1>Speculative decoding sweep</h1>
<p class="rec"><b>Recommended:</b> {html.escape(str(rec["recommended"] or "none"))} — {html.escape(rec["reason"])}</p>
<p>TPOT speedup = baseline median TPOT / candidate median TPOT at the same concurrency (&gt; 1 pays).
TPOT excludes the first token; ITL is per token (multi-token chunks divided by their tokens).</p>
<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>
<div>{charts}</div></body></html>
"""


_TERMINAL_METRICS: list[tuple[str, Any, int]] = [
    ("acceptance rate", lambda c: (c.get("acceptance") or {}).get("rate"), 2),
    ("accepted tokens/step", lambda c: (c.get("acceptance") or {}).get("mean_accepted_length"), 2),
    ("TTFT p50 ms", lambda c: c["latency"].get("ttft_ms", {}).get("p50"), 1),
    ("TTFT p95 ms", lambda c: c["latency"].get("ttft_ms", {}).get("p95"), 1),
    ("TPOT p50 ms", lambda c: c["latency"].get("tpot_ms", {}).get("p50"), 2),
    ("TPOT p95 ms", lambda c: c["latency"].get("tpot_ms", {}).get("p95"), 2),
    ("ITL p50 ms", lambda c: c["latency"].get("itl_ms", {}).get("p50"), 2),
    ("output tokens/s", lambda c: c["latency"].get("output_tokens_per_s"), 1),
    ("error rate", lambda c: c["latency"].get("error_rate"), 3),
    ("TPOT speedup", lambda c: c.get("tpot_speedup"), 2),
    ("identical to baseline", lambda c: c.get("identical_rate"), 2),
]
_NAME_WIDTH = 24
_LEVEL_WIDTH = 10


def print_table(result: dict[str, Any], console: Any = None) -> None:
    """The sweep on a terminal: one table per target, metrics down, concurrency levels across.

    CI logs and pipes are 80 columns wide; thirteen metrics across would
    collapse the headers there, while a handful of concurrency levels fits.
    Levels beyond what the width holds continue in a further table.
    """
    from rich.console import Console
    from rich.table import Table

    console = console or Console(stderr=False)
    per_table = max(1, (console.width - _NAME_WIDTH - 4) // (_LEVEL_WIDTH + 3))
    by = {(c["label"], c["concurrency"]): c for c in result["cells"]}
    for label in ["baseline", *result["labels"]]:
        levels = [lvl for lvl in result["levels"] if (label, lvl) in by]
        for start in range(0, len(levels), per_table):
            shown = levels[start : start + per_table]
            table = Table(title=f"sweep: {label}", title_justify="left")
            table.add_column("concurrency", min_width=_NAME_WIDTH, no_wrap=True)
            for lvl in shown:
                table.add_column(str(lvl), justify="right", min_width=_LEVEL_WIDTH, no_wrap=True)
            for name, fn, digits in _TERMINAL_METRICS:
                values = [fn(by[(label, lvl)]) for lvl in shown]
                if label == "baseline" and all(v is None for v in values):
                    continue  # acceptance, speedup and identity are the candidates' figures
                table.add_row(name, *(_fmt(v, digits) for v in values))
            console.print(table)
        for lvl in levels:
            failed = by[(label, lvl)].get("failed")
            if failed:
                console.print(f"[bold red]FAILED[/] {label} at concurrency {lvl}: {failed['reason']}", highlight=False)
                for k in failed["error_kinds"][:5]:
                    console.print(f"  {k['kind']} × {k['count']}: {k['message']}", highlight=False, markup=False)
    rec = result["recommendation"]
    console.print(f"recommended: {rec['recommended'] or 'none'} — {rec['reason']}", highlight=False, markup=False)
