"""report.html: one self-contained file a reviewer can open offline.

Why it is built this way:
- Model output is untrusted. Jinja autoescaping covers the server-rendered
  parts; case texts travel only inside a JSON data block (with `<` written as
  `\\u003c`, so no `</script>` can close it) and the page's script puts them
  on screen with `textContent`, never as markup.
- A Content-Security-Policy meta allows script only with this report's
  random nonce and nothing from the network (`default-src 'none'`), so even a
  markup injection we missed could not run or phone home.
- 10,000 pairs must open fast: the case list renders in pages and a case's
  diff is computed in the browser only when it is opened.
"""

from __future__ import annotations

import json
import secrets
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from qualitycheck.core._store import RunStore
from qualitycheck.report._charts import SIDE_COLOURS, histogram_svg
from qualitycheck.report._data import FLAG_ORDER, MAX_CASES, ReportData, collect, percentiles, run_date

__all__ = ["REPORT_NAME", "render_html", "write_html", "write_report"]

REPORT_NAME = "report.html"
_METRICS = (("ttft_ms", "TTFT", "time to first token"),
            ("tpot_ms", "TPOT", "time per output token after the first"),
            ("itl_ms", "ITL", "gap between streamed chunks, per token"),
            ("e2e_ms", "End-to-end", "request sent → last token"))


@lru_cache(maxsize=1)
def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("qualitycheck", "report"),
        autoescape=True,  # every template here is HTML; .j2 would escape nothing under select_autoescape
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(pct=_pct, num=_num, signed=_signed, ci=_ci, pval=_pval)
    return env


def _asset(name: str) -> str:
    return resources.files("qualitycheck.report").joinpath(name).read_text(encoding="utf-8")


# ------------------------------------------------------------------ formatting
def _is_num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and x == x


def _pct(x: Any, digits: int = 1) -> str:
    return f"{x * 100:.{digits}f}%" if _is_num(x) else "–"


def _signed(x: Any) -> str:
    return f"{x * 100:+.1f} pp" if _is_num(x) else "–"


def _num(x: Any, digits: int = 1) -> str:
    if not _is_num(x):
        return "–"
    return f"{x:,.0f}" if isinstance(x, int) else f"{x:,.{digits}f}"


def _ci(x: Any) -> str:
    if isinstance(x, (list, tuple)) and len(x) == 2 and all(_is_num(v) for v in x):
        return f"[{x[0] * 100:+.1f}, {x[1] * 100:+.1f}]"
    return "–"


def _pval(x: Any) -> str:
    if not _is_num(x):
        return "–"
    return "<0.001" if x < 0.001 else f"{x:.3f}"


def _count(x: Any) -> int | None:
    if isinstance(x, list):
        return len(x)
    if _is_num(x):
        return int(x)
    return None


def json_for_script(value: Any) -> Markup:
    """JSON safe inside a <script type="application/json"> block: no `<` can end it early."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    text = text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    return Markup(text)


# ------------------------------------------------------------------ sections
def _dedup(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _scoped(g: dict[str, Any]) -> str:
    scope = g.get("route") or g.get("scope") or g.get("category")
    return f"{g.get('name', '?')} [{scope}]" if scope and scope != "*" else str(g.get("name", "?"))


def _reasons(s: dict[str, Any]) -> tuple[list[str], list[str]]:
    """Why the verdict is what it is: what failed, and what could not be evaluated."""
    failed: list[str] = []
    for key in ("reasons", "verdict_reasons"):
        for r in s.get(key) or []:
            failed.append(r if isinstance(r, str) else str(r.get("message") or r))
    rails = [g for g in s.get("guardrails") or [] if isinstance(g, dict)]
    failed += [f"{_scoped(g)}: {g.get('message') or 'failed'}" for g in rails if g.get("passed") is False]
    for name, cat in (s.get("categories") or {}).items():
        if isinstance(cat, dict) and cat.get("verdict") == "fail":
            failed.append(f"category {name}: fail")
    unknown = [str(x) for x in s.get("not_evaluated") or [] if x]
    if not unknown:
        unknown = [f"{_scoped(g)}: {g.get('message') or 'not evaluated'}" for g in rails if g.get("passed") is None]
        unknown += [f"category {n}: inconclusive" for n, c in (s.get("categories") or {}).items()
                    if isinstance(c, dict) and c.get("verdict") == "inconclusive"]
    return _dedup(failed), _dedup(unknown)


def _guardrail(g: dict[str, Any]) -> dict[str, Any]:
    scope = g.get("route") or g.get("scope") or g.get("category") or ""
    return {"name": str(g.get("name", "")), "scope": str(scope), "threshold": g.get("threshold"),
            "observed": g.get("observed"), "passed": g.get("passed"), "message": str(g.get("message") or "")}


def _targets(data: ReportData) -> list[dict[str, Any]]:
    """One row per target: what the summary says, then what the manifest and preflight add."""
    s_targets = data.summary.get("targets") or {}
    m_targets = data.manifest.get("targets") or {}
    pre = data.artifacts.get("preflight") or {}
    rows = []
    for name in dict.fromkeys([*s_targets, *m_targets]):
        t = {**(m_targets.get(name) or {}), **(s_targets.get(name) or {})}
        extra = {k: v for k, v in t.items() if k not in ("url", "model", "label") and v not in (None, {}, [], "")}
        for chk in (pre.get("checks") or []) if isinstance(pre, dict) else []:
            # the preflight records each side's value of what it compared (engine version, server config)
            if isinstance(chk, dict) and chk.get("name") == "engine_version" and chk.get(name) not in (None, ""):
                extra.setdefault("engine_version", chk[name])
        rows.append({"name": name, "url": t.get("url", ""), "model": t.get("model", ""), "label": t.get("label") or "",
                     "extra": {k: v if isinstance(v, str) else json.dumps(v, default=str) for k, v in extra.items()}})
    return rows


def _preflight(data: ReportData) -> list[dict[str, Any]]:
    pre = data.artifacts.get("preflight")
    if not isinstance(pre, dict):
        return []
    return [{"name": str(c.get("name", "")), "passed": c.get("passed"), "detail": str(c.get("detail") or "")}
            for c in pre.get("checks") or [] if isinstance(c, dict)]


def _categories(data: ReportData) -> list[dict[str, Any]]:
    out = []
    for name, cat in (data.summary.get("categories") or {}).items():
        cat = cat or {}
        checks = []
        for check, st in (cat.get("checks") or {}).items():
            if not isinstance(st, dict):
                continue
            judge = {k: st.get(k) for k in ("wins", "losses", "ties", "win", "loss", "tie") if _is_num(st.get(k))}
            checks.append({"name": check, "b": st.get("baseline_pass_rate"), "c": st.get("candidate_pass_rate"),
                           "delta": st.get("delta"), "ci": st.get("ci"), "p": st.get("p_value"),
                           "reg": _count(st.get("regressions")), "imp": _count(st.get("improvements")),
                           "flaky": _count(st.get("flaky")), "n": st.get("n"), "mde": st.get("mde"),
                           "beyond": st.get("regressions_beyond_floor"),
                           "noise": (st.get("noise_floor") or {}).get("flip_rate") if isinstance(st.get("noise_floor"), dict) else None,
                           "judge": judge, "verdict": st.get("verdict")})
        drift = []
        for feat, d in (cat.get("format_drift") or {}).items():
            if isinstance(d, dict):
                drift.append({"name": feat, "b": d.get("baseline"), "c": d.get("candidate"), "kind": d.get("kind", "rate"),
                              "flagged": bool(d.get("flag") or d.get("flagged") or d.get("significant")),
                              "p": d.get("p_value")})
        drift.sort(key=lambda d: (not d["flagged"], d["name"]))
        judge = cat.get("judge") if isinstance(cat.get("judge"), dict) else {}
        counts = data.category_flags.get(name, {})
        out.append({"name": name, "cases": cat.get("cases"), "identical": cat.get("identical_rate"),
                    "similarity": cat.get("similarity_mean"), "first_div": cat.get("first_divergence_char_median"),
                    "control_identical": cat.get("control_identical_rate"),
                    "verdict": cat.get("verdict") or "", "checks": checks, "drift": drift,
                    "flagged_drift": sum(d["flagged"] for d in drift),
                    "judge": {k: v for k, v in judge.items() if _is_num(v)},
                    "regressions": counts.get("regression", 0), "improvements": counts.get("improvement", 0),
                    "flaky": counts.get("flaky", 0), "errors": counts.get("error", 0)})
    return out


def _latency(data: ReportData) -> list[dict[str, Any]]:
    """Percentiles from the summary (the serving stage's definitions); computed here only as a fallback."""
    summ = data.summary.get("latency") or {}
    out = []
    for key, label, meaning in _METRICS:
        samples = data.latency_samples.get(key, {})
        sides = {}
        computed = False
        for side in ("baseline", "candidate"):
            pc = (summ.get(side) or {}).get(key) if isinstance(summ.get(side), dict) else None
            if not pc and samples.get(side) is not None:
                pc, computed = percentiles(samples[side]), True
            sides[side] = pc or {}
        if not any(sides.values()):
            continue
        ratio = {}
        for q in ("p50", "p95", "p99"):
            b, c = sides["baseline"].get(q), sides["candidate"].get(q)
            ratio[q] = c / b if _is_num(b) and _is_num(c) and b else None
        sampled = {s: n for s, n in data.latency_sampled.get(key, {}).items() if s in ("baseline", "candidate")}
        note = ("histogram of a uniform random sample: " + ", ".join(f"{s} {len(samples[s]):,} of {n:,}" for s, n in sampled.items())
                if sampled else "")
        out.append({"key": key, "label": label, "meaning": meaning, "sides": sides, "ratio": ratio,
                    "computed": computed, "sampled": note,
                    "svg": histogram_svg(label, {s: v for s, v in samples.items() if s in ("baseline", "candidate")})})
    return out


def _latency_approx(s: dict[str, Any]) -> list[str]:
    """The sides whose percentiles the serving stage bucketed (very large runs), with its own words."""
    lat = s.get("latency") if isinstance(s.get("latency"), dict) else {}
    return [f"{side}: {lat[side]['percentiles']}" for side in ("baseline", "candidate", "control")
            if isinstance(lat.get(side), dict) and lat[side].get("percentiles")]


def _acceptance(a: dict[str, Any]) -> dict[str, Any]:
    """The figures worth a glance, the per-position rates, and the stage's own warnings."""
    figures = [(label, fmt(a[k])) for k, label, fmt in (
        ("rate", "acceptance rate", _pct), ("mean_accepted_length", "mean accepted length", lambda x: _num(x, 2)),
        ("drafts", "drafts", _num), ("draft_tokens", "draft tokens", _num), ("accepted_tokens", "accepted tokens", _num))
        if _is_num(a.get(k))]
    if isinstance(a.get("speculating"), bool):
        figures.append(("candidate speculating", "yes" if a["speculating"] else "no"))
    by_pos = [x for x in a.get("by_position") or [] if _is_num(x) or isinstance(x, dict)]
    positions = ", ".join(_pct(x) if _is_num(x) else _pct(x.get("rate")) for x in by_pos)
    warnings = [str(w) for w in a.get("warnings") or []]
    if not figures and not warnings:
        return {}
    return {"figures": figures, "positions": positions, "warnings": warnings}


def _latency_by_category(data: ReportData) -> list[dict[str, Any]]:
    """Per category p50/p95 of each metric per side and the p95 ratio (the serving stage's slices)."""
    per = (data.summary.get("latency") or {}).get("per_category")
    if not isinstance(per, dict):
        return []
    out = []
    for cat, sides in sorted(per.items()):
        if not isinstance(sides, dict):
            continue
        b, c = sides.get("baseline") or {}, sides.get("candidate") or {}
        cells = []
        for key, label, _ in _METRICS:
            pb, pc = (b.get(key) or {}) if isinstance(b, dict) else {}, (c.get(key) or {}) if isinstance(c, dict) else {}
            b95, c95 = pb.get("p95"), pc.get("p95")
            cells.append({"b50": pb.get("p50"), "c50": pc.get("p50"), "b95": b95, "c95": c95,
                          "ratio": c95 / b95 if _is_num(b95) and _is_num(c95) and b95 else None})
        out.append({"name": cat, "cells": cells})
    return out


def _facts(data: ReportData) -> list[tuple[str, str]]:
    s, m = data.summary, data.manifest
    facts = [("Cases", _num(s.get("cases", data.total_cases))), ("Repeats", _num(m.get("repeats", 1)))]
    for side, e in (s.get("errors") or {}).items():
        if isinstance(e, dict):
            facts.append((f"{side} errors", f"{_num(e.get('count'))} of {_num(e.get('requests'))} ({_pct(e.get('rate'), 2)})"
                          if e.get("requests") is not None else f"{_num(e.get('count'))} ({_pct(e.get('rate'), 2)})"))
    if m.get("suite_files"):
        facts.append(("Suites", ", ".join(str(f) for f in m["suite_files"])))
    if m.get("shard"):
        facts.append(("Shard", str(m["shard"])))
    facts.append(("Started", run_date(data.created_at)))
    return facts


def _embedded(data: ReportData) -> dict[str, Any]:
    """What the page says when it holds only some cases: how many, which are missing, where they are."""
    if not data.omitted_total:
        return {}
    folder = str(data.folder) if data.folder is not None else "RUN_DIR"
    order = [*FLAG_ORDER, ""]
    missing = ", ".join(f"{n:,} {f or 'without an outcome'}" for f, n in sorted(data.omitted.items(), key=lambda x: order.index(x[0])))
    return {"shown": len(data.rows), "omitted": data.omitted_total, "missing": missing, "cap": data.max_cases,
            "regressions_omitted": data.regressions_omitted, "regressions": data.flag_counts.get("regression", 0),
            "load": f"from qualitycheck.core._store import load_run; run = load_run({folder!r})"}


def _context(data: ReportData, nonce: str) -> dict[str, Any]:
    s = data.summary
    counts = data.flag_counts
    acceptance = s.get("acceptance") if isinstance(s.get("acceptance"), dict) else {}
    fallback = s.get("fallback") if isinstance(s.get("fallback"), dict) else {}
    return {
        "nonce": nonce,
        "verdict": str(s.get("verdict", "unknown")),
        "reasons": _reasons(s)[0],
        "not_evaluated": _reasons(s)[1],
        "targets": _targets(data),
        "preflight": _preflight(data),
        "facts": _facts(data),
        "categories": _categories(data),
        "latency": _latency(data),
        "latency_by_category": _latency_by_category(data),
        "latency_approx": _latency_approx(s),
        "metric_labels": [label for _, label, _ in _METRICS],
        "acceptance": _acceptance(acceptance),
        "guardrails": [_guardrail(g) for g in s.get("guardrails") or [] if isinstance(g, dict)],
        "fallback": fallback if fallback.get("action") or fallback.get("routes") else {},
        "colours": SIDE_COLOURS,
        "flags": [(f, counts[f], sum(f in r.flags for r in data.rows)) for f in FLAG_ORDER],
        "filter_categories": data.categories,
        "filter_checks": data.checks,
        "total_cases": data.total_cases,
        "embedded": _embedded(data),
        "case_json": json_for_script([r.compact() for r in data.rows]),
        "css": Markup(_asset("report.css")),
        "js": Markup(_asset("report.js")),
    }


def render_html(data: ReportData, *, nonce: str | None = None) -> str:
    """The whole page as one string; `nonce` is random per report unless a test fixes it."""
    nonce = nonce or secrets.token_urlsafe(18)
    return _env().get_template("report.html.j2").render(**_context(data, nonce))


def write_report(store: RunStore, summary: dict[str, Any], path: str | Path | None = None, *,
                 max_cases: int = MAX_CASES) -> Path:
    """Build report.html for a stored run (default: in the run folder); atomic replace.

    `max_cases` bounds the cases embedded with their answers (see `data.MAX_CASES`);
    counts and statistics always cover the whole run.
    """
    return write_html(collect(store, summary, max_cases=max_cases), Path(path) if path is not None else store.folder / REPORT_NAME)


def write_html(data: ReportData, path: Path) -> Path:
    """Render and replace `path` atomically, so a viewer never opens half a report.

    The page is streamed to the file rather than built as one string: with
    thousands of cases embedded it is tens of MB, and a second copy of it
    (plus its encoding) would be the largest thing the report ever holds.
    """
    tmp = path.with_name(path.name + ".tmp")
    try:
        _env().get_template("report.html.j2").stream(**_context(data, secrets.token_urlsafe(18))).dump(str(tmp), encoding="utf-8")
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)  # a render that failed halfway leaves nothing behind
    return path
