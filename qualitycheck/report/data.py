"""What the reports show, gathered once from summary.json and the run store.

The HTML and terminal renderers only format what this module hands them, so
the two never disagree about which case is a regression. Everything the
summary does not hold yet (a stage that has not run, an older run) is taken
as absent, never guessed: a missing optional section is simply not shown.
Per-case data is kept compact (status letters, short keys) because a report
of 10,000 pairs embeds all of it as one JSON block.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..store import RunStore

__all__ = ["CaseRow", "FLAG_ORDER", "ReportData", "collect", "percentiles", "run_date"]

FLAG_ORDER = ("regression", "error", "improvement", "flaky", "divergent", "identical")
"""Case flags in the order the case list sorts them: what needs a look first."""

_STATUS_LETTER = {"pass": "p", "fail": "f", "error": "e", "skipped": "s"}
_SIDES = ("baseline", "candidate")


@dataclass
class CaseRow:
    """One case as the report's case list and detail view need it."""

    id: str
    category: str
    route: str
    prompt: str
    texts: dict[str, list[str | None]] = field(default_factory=dict)
    """target → answer text per repeat (None where no answer is stored)."""
    errors: dict[str, list[str | None]] = field(default_factory=dict)
    meta: dict[str, list[dict[str, Any] | None]] = field(default_factory=dict)
    """target → per repeat: finish reason, tokens, e2e seconds."""
    statuses: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    """check → target → status letter per repeat (p/f/e/s, '-' when not scored)."""
    details: dict[str, dict[str, list[Any]]] = field(default_factory=dict)
    regressed: list[str] = field(default_factory=list)
    improved: list[str] = field(default_factory=list)
    flaky: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    comparison: list[dict[str, Any] | None] = field(default_factory=list)
    """The compare stage's record per repeat (divergence, similarity, format features)."""

    def compact(self) -> dict[str, Any]:
        """The JSON shape the page's script reads (short keys: it is repeated per case)."""
        d: dict[str, Any] = {"i": self.id, "k": self.category, "f": self.flags, "p": self.prompt,
                             "t": self.texts, "s": self.statuses}
        if self.route != self.category:
            d["r"] = self.route
        for key, value in (("e", self.errors), ("m", self.meta), ("d", self.details), ("rc", self.regressed),
                           ("ic", self.improved), ("fc", self.flaky), ("x", self.comparison)):
            if value:
                d[key] = value
        return d


@dataclass
class ReportData:
    """Everything one report shows; `summary` is summary.json as written."""

    summary: dict[str, Any]
    manifest: dict[str, Any]
    created_at: float | None
    rows: list[CaseRow]
    checks: list[str]
    categories: list[str]
    latency_samples: dict[str, dict[str, np.ndarray]]
    """metric → target → values in ms, per response (per token gap for ITL): for the charts."""
    artifacts: dict[str, Any]

    @property
    def flag_counts(self) -> dict[str, int]:
        out = {f: 0 for f in FLAG_ORDER}
        for r in self.rows:
            for f in r.flags:
                out[f] += 1
        return out

    def top_regressions(self, n: int = 10) -> list[CaseRow]:
        return [r for r in self.rows if "regression" in r.flags][:n]


def _ids(value: Any) -> list[str]:
    """A summary field holding case ids may also be a bare count; only ids are usable here."""
    if isinstance(value, list):
        return [str(v) for v in value if isinstance(v, (str, int))]
    return []


PROMPT_HEAD, PROMPT_TAIL = 1_000, 3_000
"""Characters of a prompt the report keeps: long-context prompts would otherwise dominate
the file (10,000 cases × 30 kB), and the question usually sits at the end."""


def _clip(text: str) -> str:
    if len(text) <= PROMPT_HEAD + PROMPT_TAIL + 100:
        return text
    omitted = len(text) - PROMPT_HEAD - PROMPT_TAIL
    return f"{text[:PROMPT_HEAD]}\n… [{omitted:,} characters omitted in this report] …\n{text[-PROMPT_TAIL:]}"


def _prompt_text(body: dict[str, Any] | None) -> str:
    if not body:
        return ""
    if body.get("prompt") is not None:
        return str(body["prompt"])
    parts = []
    for m in body.get("messages") or []:
        content = m.get("content")
        if isinstance(content, list):  # multi-part content: keep the text parts
            content = "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        parts.append(f"[{m.get('role', '?')}] {content if content is not None else ''}")
    return "\n".join(parts)


def _summary_case_sets(summary: dict[str, Any]) -> tuple[dict[str, set[str]], dict[str, set[str]], dict[str, set[str]], set[str]]:
    """case id → checks regressed / improved / flaky, per the summary; and checks it has stats for."""
    reg: dict[str, set[str]] = {}
    imp: dict[str, set[str]] = {}
    flaky: dict[str, set[str]] = {}
    known: set[str] = set()
    for cat in (summary.get("categories") or {}).values():
        for check, st in ((cat or {}).get("checks") or {}).items():
            if not isinstance(st, dict):
                continue
            known.add(check)
            for key, into in (("regressions", reg), ("improvements", imp), ("flaky", flaky)):
                for cid in _ids(st.get(key)):
                    into.setdefault(cid, set()).add(check)
    return reg, imp, flaky, known


def _rate(letters: Iterable[str]) -> float | None:
    decided = [x for x in letters if x in "pf"]
    return sum(x == "p" for x in decided) / len(decided) if decided else None


_COMPARISON_SKIP = {"case_id", "category", "route", "repeat", "format_version", "checks"}
"""Fields of a comparison record the report shows elsewhere already (statuses come from the scores)."""


def _comparisons(store: RunStore, repeats: int) -> dict[str, list[dict[str, Any] | None]]:
    """case id → the compare stage's record per repeat (artifact `comparisons`), when stored."""
    found = store.artifact("comparisons")
    out: dict[str, list[dict[str, Any] | None]] = {}
    if not isinstance(found, list):
        return out
    for rec in found:
        if not isinstance(rec, dict) or "case_id" not in rec:
            continue
        rep = rec.get("repeat", 0)
        if not isinstance(rep, int) or not 0 <= rep < repeats:
            continue
        slot = out.setdefault(str(rec["case_id"]), [None] * repeats)
        slot[rep] = {k: v for k, v in rec.items() if k not in _COMPARISON_SKIP and v not in (None, {}, [])}
    return out


def _latency_of(r: Any, into: dict[str, dict[str, list[Any]]]) -> None:
    side = r.target
    if r.ttft_s is not None:
        into["ttft_ms"].setdefault(side, []).append(r.ttft_s * 1000)
    if r.e2e_s is not None:
        into["e2e_ms"].setdefault(side, []).append(r.e2e_s * 1000)
        n = r.usage.completion_tokens
        if r.ttft_s is not None and n and n > 1:
            into["tpot_ms"].setdefault(side, []).append((r.e2e_s - r.ttft_s) * 1000 / (n - 1))
    times = r.chunk_times
    if len(times) > 1:  # per-token gaps: a chunk carrying k tokens (speculation) counts k gaps of gap/k
        gaps = np.diff(np.asarray(times, dtype=np.float64)) * 1000
        toks = r.chunk_tokens
        if toks and len(toks) == len(times):
            gaps = gaps / np.maximum(1, np.asarray(toks[1:], dtype=np.float64))
        into["itl_ms"].setdefault(side, []).append(gaps)


def _as_arrays(latency: dict[str, dict[str, list[Any]]]) -> dict[str, dict[str, np.ndarray]]:
    out: dict[str, dict[str, np.ndarray]] = {}
    for metric, sides in latency.items():
        for side, vals in sides.items():
            arr = np.concatenate(vals) if metric == "itl_ms" else np.asarray(vals, dtype=np.float64)
            if arr.size:
                out.setdefault(metric, {})[side] = arr
    return out


def collect(store: RunStore, summary: dict[str, Any]) -> ReportData:
    """Read the store once, in suite order, into the rows and samples the renderers use."""
    cases = store.cases()
    rows: dict[str, CaseRow] = {}
    for c in cases:
        rows[c.id] = CaseRow(c.id, c.category, c.route, _clip(_prompt_text({"messages": c.messages, "prompt": c.prompt})))
    repeats = max(1, int(store.manifest.get("repeats") or 1))

    latency: dict[str, dict[str, list[Any]]] = {m: {} for m in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")}
    for r in store.responses():
        row = rows.get(r.case_id)
        if row is None or r.repeat >= repeats:
            continue
        if r.target in _SIDES:
            row.texts.setdefault(r.target, [None] * repeats)[r.repeat] = r.text if r.ok else None
            row.meta.setdefault(r.target, [None] * repeats)[r.repeat] = {
                "finish": r.finish_reason, "tokens": r.usage.completion_tokens,
                "e2e_s": None if r.e2e_s is None else round(r.e2e_s, 4)}
        if r.error is not None:
            row.errors.setdefault(r.target, [None] * repeats)[r.repeat] = f"{r.error.kind}: {r.error.message}"
        elif r.target in _SIDES or r.target == "control":
            _latency_of(r, latency)

    checks: set[str] = set()
    for s in store.scores():
        row = rows.get(s.case_id)
        if row is None or s.repeat >= repeats:
            continue
        checks.add(s.check)
        per = row.statuses.setdefault(s.check, {})
        per.setdefault(s.target, ["-"] * repeats)
        letters = list(per[s.target])
        letters[s.repeat] = _STATUS_LETTER.get(s.status, "-")
        per[s.target] = letters  # type: ignore[assignment]
        detail = dict(s.detail)
        if s.value is not None and not isinstance(s.value, bool):
            detail = {"value": s.value, **detail}
        if detail:
            row.details.setdefault(s.check, {}).setdefault(s.target, [None] * repeats)[s.repeat] = detail
    for row in rows.values():  # status letters are stored as strings: "pf" per target
        for per in row.statuses.values():
            for t in list(per):
                per[t] = "".join(per[t])  # type: ignore[assignment]

    reg, imp, flaky, known = _summary_case_sets(summary)
    comparisons = _comparisons(store, repeats)
    for row in rows.values():
        row.regressed = sorted(reg.get(row.id, ()))
        row.improved = sorted(imp.get(row.id, ()))
        fl = set(flaky.get(row.id, ()))
        for check, per in row.statuses.items():
            b, c = per.get("baseline", ""), per.get("candidate", "")
            if check not in known:  # no statistics for this check yet: compare pass rates directly
                rb, rc = _rate(b), _rate(c)
                if rb is not None and rc is not None and rb != rc:
                    (row.regressed if rb > rc else row.improved).append(check)
            for letters in (b, c):
                if "p" in letters and "f" in letters:
                    fl.add(check)
        row.comparison = comparisons.get(row.id, [])
        row.flaky = sorted(fl)
        row.flags = _flags(row)

    order = {f: i for i, f in enumerate(FLAG_ORDER)}
    ordered = sorted(rows.values(), key=lambda r: min((order[f] for f in r.flags), default=len(order)))
    created = store.meta("created_at")
    artifacts = {name: store.artifact(name) for name in ("preflight",)}
    return ReportData(
        summary=summary, manifest=store.manifest, created_at=float(created) if created else None,
        rows=ordered, checks=sorted(checks), categories=sorted({c.category for c in cases}),
        latency_samples=_as_arrays(latency),
        artifacts={k: v for k, v in artifacts.items() if v},
    )


def _flags(row: CaseRow) -> list[str]:
    flags = []
    if row.regressed:
        flags.append("regression")
    errored = any(any(e for e in errs) for errs in row.errors.values()) or any(
        "e" in letters for per in row.statuses.values() for letters in per.values())
    if errored:
        flags.append("error")
    if row.improved:
        flags.append("improvement")
    if row.flaky:
        flags.append("flaky")
    b, c = row.texts.get("baseline") or [], row.texts.get("candidate") or []
    pairs = [(x, y) for x, y in zip(b, c) if x is not None and y is not None]
    if any(x != y for x, y in pairs):
        flags.append("divergent")
    elif pairs and len(pairs) == max(len(b), len(c)):
        flags.append("identical")
    return flags


def percentiles(values: np.ndarray, qs: Iterable[int] = (50, 95, 99)) -> dict[str, float]:
    """Linear-interpolated percentiles, used only when the summary holds no latency of its own."""
    if not len(values):
        return {}
    return {f"p{q}": float(np.percentile(values, q)) for q in qs}


def run_date(created_at: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(created_at)) if created_at else "unknown"
