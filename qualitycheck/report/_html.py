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
from qualitycheck.report._data import MAX_CASES, ReportData, collect, divergence_view, percentiles, run_date
from qualitycheck.report._human_view import human_view, judge_calibration_view
from qualitycheck.verdict._decision import DIVERGENCE_CHECK
from qualitycheck.verdict._gate import ALL_ROUTES, GuardrailResult
from qualitycheck.verdict._model import Acceptance, CategorySummary, CheckSummary, Latency, LatencySide, Summary
from qualitycheck.verdict._status import STATUS_ORDER

__all__ = ["REPORT_NAME", "render_html", "write_html", "write_report"]

REPORT_NAME = "report.html"
_METRICS = (
    ("ttft_ms", "TTFT", "time to first token"),
    ("tpot_ms", "TPOT", "time per output token after the first"),
    ("itl_ms", "ITL", "gap between streamed chunks, per token"),
    ("e2e_ms", "End-to-end", "request sent → last token"),
)


@lru_cache(maxsize=1)
def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("qualitycheck", "report"),
        autoescape=True,  # every template here is HTML; .j2 would escape nothing under select_autoescape
        trim_blocks=True,
        lstrip_blocks=True,
        bytecode_cache=_template_cache(),
    )
    env.filters.update(pct=_pct, num=_num, signed=_signed, ci=_ci, pval=_pval, nats=_nats, p2=_p2, prob=_prob, token=_token)
    return env


def _template_cache() -> jinja2.BytecodeCache | None:
    """Compiled templates kept between processes, as Python keeps .pyc files.

    Compiling the page's template costs more than importing most of the
    package, on every report. jinja's own cache (a folder of the user's,
    private, under the temporary directory) is keyed by the template's
    source, so an edited template is compiled afresh. None (compile every
    time) where no such folder can be made.
    """
    try:
        return jinja2.FileSystemBytecodeCache()
    except (OSError, RuntimeError):
        return None


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


def _num2(x: Any) -> str:
    return _num(x, 2)


def _ci(x: Any) -> str:
    if isinstance(x, (list, tuple)) and len(x) == 2 and all(_is_num(v) for v in x):
        return f"[{x[0] * 100:+.1f}, {x[1] * 100:+.1f}]"
    return "–"


def _pval(x: Any) -> str:
    if not _is_num(x):
        return "–"
    return "<0.001" if x < 0.001 else f"{x:.3f}"


def _nats(x: Any) -> str:
    """A log-probability or a shift of one, in nats, signed (-0.47, +1.20)."""
    return f"{x:+.2f}" if _is_num(x) else "–"


def _p2(x: Any) -> str:
    """A p-value to two significant digits: the likelihood test's run to 1e-8, where `<0.001` would hide how strong it is."""
    return f"{x:.2g}" if _is_num(x) else "–"


def _prob(x: Any) -> str:
    """A probability the baseline model gives a token, readable from 99% down to 0.0012%."""
    if not _is_num(x):
        return "–"
    if x >= 0.1:
        return f"{x:.0%}"
    if x >= 0.001:
        return f"{x:.1%}"
    return f"{x * 100:.2g}%"


def _token(text: Any) -> str:
    """A token as text a reader can see the edges of: quoted, with its spaces kept and line breaks written as \\n."""
    return json.dumps(text, ensure_ascii=False) if isinstance(text, str) else "(its answer ended)"


def json_for_script(value: Any) -> Markup:
    """JSON safe inside a <script type="application/json"> block: no `<` can end it early."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    text = text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    return Markup(text)


# ------------------------------------------------------------------ sections
def _dedup(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _scoped(g: GuardrailResult) -> str:
    return g.name if g.route == ALL_ROUTES else f"{g.name} [{g.route}]"


def _reasons(s: Summary) -> tuple[list[str], list[str]]:
    """Why the verdict is what it is: what failed, and what could not be evaluated."""
    failed = [f"{_scoped(g)}: {g.message or 'failed'}" for g in s.guardrails if g.passed is False]
    failed += [f"category {name}: fail" for name, cat in s.categories.items() if cat.verdict == "fail"]
    unknown = [x for x in s.not_evaluated if x]
    if not unknown:
        unknown = [f"{_scoped(g)}: {g.message or 'not evaluated'}" for g in s.guardrails if g.passed is None]
        unknown += [f"category {n}: inconclusive" for n, c in s.categories.items() if c.verdict == "inconclusive"]
    return _dedup(failed), _dedup(unknown)


def _guardrail(g: GuardrailResult) -> dict[str, Any]:
    return {"name": g.name, "scope": g.route, "threshold": g.threshold, "observed": g.observed, "passed": g.passed, "message": g.message}


def _targets(data: ReportData) -> list[dict[str, Any]]:
    """One row per target: what the summary says, then what the manifest and preflight add."""
    s_targets = data.summary.targets
    m_targets = data.manifest.get("targets") or {}
    engine = next((c for c in data.summary.preflight.checks if c.name == "engine_version"), None) if data.summary.preflight else None
    rows = []
    for name in dict.fromkeys([*s_targets, *m_targets]):
        t = {**(m_targets.get(name) or {}), **(s_targets[name].model_dump() if name in s_targets else {})}
        extra = {k: v for k, v in t.items() if k not in ("url", "model", "label") and v not in (None, {}, [], "")}
        side_version = getattr(engine, name, None) if engine is not None and name in ("baseline", "candidate") else None
        if side_version not in (None, ""):
            extra.setdefault("engine_version", side_version)  # the preflight records each side's engine version
        rows.append(
            {
                "name": name,
                "url": t.get("url", ""),
                "model": t.get("model", ""),
                "label": t.get("label") or "",
                "extra": {k: v if isinstance(v, str) else json.dumps(v, default=str) for k, v in extra.items()},
            }
        )
    return rows


def _preflight(data: ReportData) -> list[dict[str, Any]]:
    pre = data.summary.preflight
    if pre is None:
        return []
    return [{"name": c.name, "passed": c.passed, "detail": c.detail} for c in pre.checks]


_JUDGE_FIGURES = ("wins", "losses", "ties")


def _sampled_view(st: CheckSummary) -> dict[str, Any] | None:
    """A check's distribution test over its sampled cases, as the page shows it under the check."""
    sp = st.sampled
    if sp is None:
        return None
    return {
        "cases": sp.cases,
        "samples": sp.samples_per_case,
        "b": sp.baseline_pass_rate,
        "c": sp.candidate_pass_rate,
        "delta": sp.delta,
        "bounds": sp.bounds,
        "p": sp.p_value,
        "p_holm": sp.p_value_holm,
        "decision": sp.decision,
        "looks": sp.looks,
        "at": sp.samples_at_decision,
        "mde": sp.mde,
        "drops": [(d.case_id, d.baseline_pass_rate, d.candidate_pass_rate) for d in sp.largest_drops],
    }


SHIFT_WORDS = {"shift": "changed", "no_shift": "no shift", "undecided": "undecided"}
"""A likelihood cell's decision as the page's badge says it."""

DIVERGENCE_WORDS = {
    "near_tie": ("near tie", "the baseline model itself nearly chose this token (numerics, batching)"),
    "decisive": ("decisive", "a token the baseline model would not write"),
    "unclear": ("unclear", "neither a near tie nor far below the baseline model's choice"),
}
"""A greedy divergence's kind in words (the thresholds are the config's `likelihood.near_tie_nats` and `decisive_nats`)."""

DIVERGENCES_LISTED = 50
"""Greedy divergences listed per category, decisive ones first; each embedded case shows its own in the case view."""


def _likelihood_view(cat: CategorySummary) -> dict[str, Any] | None:
    """A category's likelihood cell (summary.json's, as the template reads it) with its badge's word; `failed` when the
    shift is what failed the category."""
    cell = cat.likelihood
    if cell is None:
        return None
    return {"cell": cell, "word": SHIFT_WORDS[cell.decision], "failed": cell.decision == "shift" and cat.verdict == "fail"}


def _divergences_view(cat: CategorySummary) -> dict[str, Any] | None:
    """Where the category's greedy answers left the baseline's, under the baseline model: counts by kind, decisive ones first."""
    if not cat.divergences:
        return None
    order = {"decisive": 0, "unclear": 1, "near_tie": 2}
    ranked = sorted(cat.divergences, key=lambda d: order[d.kind])
    counts = {kind: sum(d.kind == kind for d in cat.divergences) for kind in ("decisive", "unclear", "near_tie")}
    check = cat.checks.get(DIVERGENCE_CHECK)
    return {
        "counts": counts,
        "rows": [
            {"case_id": d.case_id, **divergence_view(d), "label": DIVERGENCE_WORDS[d.kind][0], "words": DIVERGENCE_WORDS[d.kind][1]}
            for d in ranked[:DIVERGENCES_LISTED]
        ],
        "more": max(0, len(ranked) - DIVERGENCES_LISTED),
        "failed": cat.verdict == "fail" and check is not None and bool(check.counted),
        "report_only": check is not None and bool(check.regressions) and not check.counted,
    }


def _categories(data: ReportData) -> list[dict[str, Any]]:
    out = []
    for name, cat in data.summary.categories.items():
        checks = []
        for check, st in cat.checks.items():
            judge = {k: getattr(st, k) for k in _JUDGE_FIGURES if k in st.model_fields_set}
            checks.append(
                {
                    "name": check,
                    "b": st.baseline_pass_rate,
                    "c": st.candidate_pass_rate,
                    "delta": st.delta,
                    "ci": st.ci,
                    "p": st.p_value,
                    "reg": len(st.regressions),
                    "imp": len(st.improvements),
                    "tol": len(st.tolerated),
                    "flaky": len(st.flaky),
                    "n": st.n,
                    "mde": st.mde,
                    "beyond": st.regressions_beyond_floor,
                    "noise": st.noise_floor.flip_rate,
                    "judge": judge,
                    "sampled": _sampled_view(st),
                    "skipped_sampled": st.skipped_as_sampled,
                }
            )
        drift: list[dict[str, Any]] = [
            {"name": feat, "b": d.baseline, "c": d.candidate, "kind": d.kind, "flagged": d.flag, "p": d.p_value}
            for feat, d in cat.format_drift.items()
        ]
        drift.sort(key=lambda d: (not d["flagged"], d["name"]))
        counts = data.category_flags.get(name, {})
        out.append(
            {
                "name": name,
                "cases": cat.cases,
                "identical": cat.identical_rate,
                "similarity": cat.similarity_mean,
                "first_div": cat.first_divergence_char_median,
                "control_identical": cat.control_identical_rate,
                "verdict": cat.verdict,
                "verdict_reason": cat.verdict_reason,
                "would_decide": cat.would_decide,
                "power": cat.power,
                "sampled_cases": cat.sampled_cases,
                "checks": checks,
                "likelihood": _likelihood_view(cat),
                "divergences": _divergences_view(cat),
                "drift": drift,
                "flagged_drift": sum(d["flagged"] for d in drift),
                "regressions": counts.get("regression", 0),
                "tolerated": counts.get("tolerated", 0),
                "improvements": counts.get("improved", 0),
                "flaky": counts.get("flaky", 0),
                "errors": counts.get("error", 0),
            }
        )
    return out


def _side(lat: Latency, side: str) -> LatencySide | None:
    return {"baseline": lat.baseline, "candidate": lat.candidate, "control": lat.control}.get(side)


def _latency(data: ReportData) -> list[dict[str, Any]]:
    """Percentiles from the summary (the serving stage's definitions); computed here only as a fallback."""
    lat = data.summary.latency
    out = []
    for key, label, meaning in _METRICS:
        samples = data.latency_samples.get(key, {})
        sides: dict[str, dict[str, Any]] = {}
        computed = False
        for side in ("baseline", "candidate"):
            got = _side(lat, side)
            pc: dict[str, Any] = getattr(got, key).model_dump() if got is not None and key in got.model_fields_set else {}
            if not pc and samples.get(side) is not None:
                pc, computed = percentiles(samples[side]), True
            sides[side] = pc
        if not any(sides.values()):
            continue
        ratio = {}
        for q in ("p50", "p95", "p99"):
            b, c = sides["baseline"].get(q), sides["candidate"].get(q)
            ratio[q] = c / b if _is_num(b) and _is_num(c) and b else None
        sampled = {s: n for s, n in data.latency_sampled.get(key, {}).items() if s in ("baseline", "candidate")}
        note = (
            "histogram of a uniform random sample: " + ", ".join(f"{s} {len(samples[s]):,} of {n:,}" for s, n in sampled.items())
            if sampled
            else ""
        )
        out.append(
            {
                "key": key,
                "label": label,
                "meaning": meaning,
                "sides": sides,
                "ratio": ratio,
                "computed": computed,
                "sampled": note,
                "svg": histogram_svg(label, {s: v for s, v in samples.items() if s in ("baseline", "candidate")}),
            }
        )
    return out


def _latency_approx(s: Summary) -> list[str]:
    """The sides whose percentiles the serving stage bucketed (very large runs), with its own words."""
    return [
        f"{side}: {got.percentiles}"
        for side in ("baseline", "candidate", "control")
        if (got := _side(s.latency, side)) is not None and got.percentiles
    ]


def _acceptance(a: Acceptance) -> dict[str, Any]:
    """The figures worth a glance, the per-position rates, and the stage's own warnings."""
    figures = [
        (label, fmt(value))
        for value, label, fmt in (
            (a.rate, "acceptance rate", _pct),
            (a.mean_accepted_length, "mean accepted length", _num2),
            (a.drafts, "drafts", _num),
            (a.draft_tokens, "draft tokens", _num),
            (a.accepted_tokens, "accepted tokens", _num),
        )
        if _is_num(value)
    ]
    if a.speculating is not None:
        figures.append(("candidate speculating", "yes" if a.speculating else "no"))
    positions = ", ".join(_pct(x) for x in a.by_position if _is_num(x))
    if not figures and not a.warnings:
        return {}
    return {"figures": figures, "positions": positions, "warnings": list(a.warnings)}


def _latency_by_category(data: ReportData) -> list[dict[str, Any]]:
    """Per category p50/p95 of each metric per side and the p95 ratio (the serving stage's slices)."""
    out = []
    for cat, sides in sorted(data.summary.latency.per_category.items()):
        b, c = sides.get("baseline"), sides.get("candidate")
        cells = []
        for key, _label, _ in _METRICS:
            pb = getattr(b, key) if b is not None else None
            pc = getattr(c, key) if c is not None else None
            b95, c95 = pb.p95 if pb else None, pc.p95 if pc else None
            cells.append(
                {
                    "b50": pb.p50 if pb else None,
                    "c50": pc.p50 if pc else None,
                    "b95": b95,
                    "c95": c95,
                    "ratio": c95 / b95 if _is_num(b95) and _is_num(c95) and b95 else None,
                }
            )
        out.append({"name": cat, "cells": cells})
    return out


def _facts(data: ReportData) -> list[tuple[str, str]]:
    s, m = data.summary, data.manifest
    facts = [("Cases", _num(s.cases)), ("Repeats", _num(m.get("repeats", 1)))]
    for side, e in s.errors.items():
        facts.append((f"{side} errors", f"{_num(e.count)} of {_num(e.requests)} ({_pct(e.rate, 2)})"))
    if m.get("suite_files"):
        facts.append(("Suites", ", ".join(str(f) for f in m["suite_files"])))
    if m.get("shard"):
        facts.append(("Shard", str(m["shard"])))
    facts.append(("Started", run_date(data.created_at)))
    return facts


def _errors(s: Summary) -> list[dict[str, Any]]:
    """Every kind of failure per side, with its count and first message: why the error rate is what it is."""
    return [
        {"side": side, "kind": k.kind, "count": k.count, "share": k.count / e.requests if e.requests else None, "message": k.message}
        for side, e in s.errors.items()
        for k in e.kinds
    ]


def _embedded(data: ReportData) -> dict[str, Any]:
    """What the page says when it holds only some cases: how many, which are missing, where they are."""
    if not data.omitted_total:
        return {}
    folder = str(data.folder) if data.folder is not None else "RUN_DIR"
    order = [*STATUS_ORDER, ""]
    missing = ", ".join(f"{n:,} {f or 'without an outcome'}" for f, n in sorted(data.omitted.items(), key=lambda x: order.index(x[0])))
    return {
        "shown": len(data.rows),
        "omitted": data.omitted_total,
        "missing": missing,
        "cap": data.max_cases,
        "regressions_omitted": data.regressions_omitted,
        "regressions": data.flag_counts.get("regression", 0),
        "load": f"from qualitycheck.core._store import load_run; run = load_run({folder!r})",
    }


def _context(data: ReportData, nonce: str) -> dict[str, Any]:
    s = data.summary
    counts = data.flag_counts
    reasons, not_evaluated = _reasons(s)
    return {
        "nonce": nonce,
        "verdict": s.verdict,
        "reasons": reasons,
        "not_evaluated": not_evaluated,
        "targets": _targets(data),
        "preflight": _preflight(data),
        "facts": _facts(data),
        "errors": _errors(s),
        "categories": _categories(data),
        "likelihood_stage": s.likelihood,
        "human": human_view(s),
        "judge_calibration": judge_calibration_view(s),
        "latency": _latency(data),
        "latency_by_category": _latency_by_category(data),
        "latency_approx": _latency_approx(s),
        "metric_labels": [label for _, label, _ in _METRICS],
        "acceptance": _acceptance(s.acceptance),
        "guardrails": [_guardrail(g) for g in s.guardrails],
        "fallback": s.fallback if s.fallback.action or s.fallback.routes else None,
        "colours": SIDE_COLOURS,
        "flags": [(f, counts[f], sum(f in r.flags for r in data.rows)) for f in STATUS_ORDER],
        "filter_categories": data.categories,
        "filter_checks": data.checks,
        "total_cases": data.total_cases,
        "embedded": _embedded(data),
        "case_json": json_for_script([r.compact() for r in data.rows]),
        "divergence_words": json.dumps(DIVERGENCE_WORDS),  # an attribute: autoescaped, read back with JSON.parse
        "css": Markup(_asset("report.css")),
        "js": Markup(_asset("report.js")),
    }


def render_html(data: ReportData, *, nonce: str | None = None) -> str:
    """The whole page as one string; `nonce` is random per report unless a test fixes it."""
    nonce = nonce or secrets.token_urlsafe(18)
    return _env().get_template("report.html.j2").render(**_context(data, nonce))


def write_report(store: RunStore, summary: Summary, path: str | Path | None = None, *, max_cases: int = MAX_CASES) -> Path:
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
