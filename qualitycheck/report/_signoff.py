"""signoff.md: the pre-canary checklist, each item filled with this run's evidence.

A release manager signs this, so every line says what was measured and
what it showed, and the last section lists what was *not* evaluated — an
unchecked box is never rendered as a ticked one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["SIGNOFF_NAME", "render_signoff", "write_signoff"]

SIGNOFF_NAME = "signoff.md"


def _box(passed: bool | None) -> str:
    return {True: "[x]", False: "[ ] FAILED:", None: "[ ] NOT EVALUATED:"}[passed]


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 100:.1f}%"


def _ms(d: dict[str, Any] | None, key: str) -> str:
    v = (d or {}).get(key) or {}
    if not v:
        return "n/a"
    return " / ".join(f"{p} {v[p]:.1f}" for p in ("p50", "p95", "p99") if isinstance(v.get(p), (int, float))) or "n/a"


def render_signoff(s: dict[str, Any]) -> str:
    out: list[str] = []
    w = out.append
    t = s.get("targets", {})
    w("# Speculative decoding sign-off")
    w("")
    w(f"**Verdict: {s['verdict'].upper()}** — {s['cases']} cases, {s.get('repeats', 1)} repeat(s); "
      f"baseline `{t.get('baseline', {}).get('url', '?')}` vs candidate `{t.get('candidate', {}).get('url', '?')}`"
      + (f", control `{t['control']['url']}`" if "control" in t else "") + ".")
    w("")

    w("## 1. Baseline performance")
    lat = s.get("latency") or {}
    err = s.get("errors", {})
    for side in ("baseline", "candidate"):
        e = err.get(side, {})
        approx = (lat.get(side) or {}).get("percentiles") if isinstance(lat.get(side), dict) else None
        w(f"- {side}: TTFT ms {_ms(lat.get(side), 'ttft_ms')}; TPOT ms {_ms(lat.get(side), 'tpot_ms')}; "
          f"errors {e.get('count', 0)}/{e.get('requests', 0)} ({_pct(e.get('rate'))})"
          + (f"; percentiles {approx}" if approx else ""))
    if not lat:
        w("- latency percentiles: not available in this run")
    w("")

    w("## 2. Draft-mechanism validation")
    acc = s.get("acceptance") or {}
    if acc.get("rate") is not None:
        mal = acc.get("mean_accepted_length")
        w(f"- acceptance rate {acc['rate']:.3f}, mean accepted length {'n/a' if mal is None else f'{mal:.2f}'}, "
          f"draft tokens {acc.get('draft_tokens')}, accepted {acc.get('accepted_tokens')}")
    else:
        w("- acceptance: NOT EVALUATED (no speculative-decoding counters scraped from the candidate)")
    pre = s.get("preflight")
    if isinstance(pre, dict) and pre:
        ok = pre.get("ok", pre.get("passed"))
        w(f"- preflight (model, chat template, stop tokens): {'consistent' if ok else 'MISMATCH' if ok is False else 'see details'}")
        for item in pre.get("checks", [])[:10] if isinstance(pre.get("checks"), list) else []:
            if isinstance(item, dict):
                passed = item.get("passed", item.get("ok"))
                state = "ok" if passed else "MISMATCH" if passed is False else "could not check"
                w(f"  - {item.get('name', '?')}: {state} {item.get('detail') or item.get('message') or ''}".rstrip())
    else:
        w("- preflight: NOT EVALUATED (no preflight results stored)")
    w("")

    w("## 3. Quality regression by category")
    w("")
    w("| category | verdict | cases | identical | check | baseline | candidate | Δ [95% CI] | p (Holm) | regressions | flaky | MDE |")
    w("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for cat, c in s.get("categories", {}).items():
        checks = c.get("checks") or {}
        if not checks:
            w(f"| {cat} | {c['verdict']} | {c['cases']} | {_pct(c.get('identical_rate'))} | — | | | | | | | |")
        for name, k in checks.items():
            if "baseline_pass_rate" not in k:
                continue
            ci = k.get("ci")
            ci_s = f"{k['delta'] * 100:+.1f}pp [{ci[0] * 100:+.1f}, {ci[1] * 100:+.1f}]" if ci and k.get("delta") is not None else "n/a"
            p = k.get("p_value_holm", k.get("p_value"))
            w(f"| {cat} | {c['verdict']} | {c['cases']} | {_pct(c.get('identical_rate'))} | {name} | "
              f"{_pct(k.get('baseline_pass_rate'))} | {_pct(k.get('candidate_pass_rate'))} | {ci_s} | "
              f"{'n/a' if p is None else f'{p:.3g}'} | {len(k.get('regressions', []))} "
              f"({k.get('regressions_beyond_floor', 0)} beyond noise) | {len(k.get('flaky', []))} | {_pct(k.get('mde'))} |")
    w("")
    floors = sorted({(k["noise_floor"]["measured_by"], cat, name, k["noise_floor"]["flip_rate"])
                     for cat, c in s.get("categories", {}).items() for name, k in (c.get("checks") or {}).items()
                     if (k.get("noise_floor") or {}).get("measured_by")}, key=lambda x: (x[1], x[2]))
    if floors:
        w("Noise floor (how often the baseline disagrees with itself; flaky cases are kept apart from regressions):")
        for by, cat, name, rate in floors:
            w(f"- {cat} / {name}: {_pct(rate)} of A/A pairs disagree (measured by {by})")
    else:
        w("Noise floor: not measured (no control target, one repeat): every pass→fail flip counts as a regression.")
    for cat, c in s.get("categories", {}).items():
        nf = c.get("noise_floor") or {}
        if nf.get("measured_by") and nf.get("candidate_divergence_rate") is not None:
            p = nf.get("divergence_p_value")
            beyond = p is not None and p < 0.05 and nf["candidate_divergence_rate"] > nf["text_divergence_rate"]
            w(f"- {cat}: answers differ from the baseline's in {_pct(nf['candidate_divergence_rate'])} of pairs vs "
              f"{_pct(nf['text_divergence_rate'])} for the A/A pairs (p {p:.3g})" + (" — TEXT DIVERGENCE BEYOND NOISE" if beyond else ""))
    flaky = [(cat, name, i) for cat, c in s.get("categories", {}).items() for name, k in (c.get("checks") or {}).items()
             for i in k.get("flaky_regressions") or []]
    if flaky:
        w("Flaky cases that dropped on the candidate (not counted): " + ", ".join(f"{cat}/{i} ({name})" for cat, name, i in flaky[:30]))
    drifted = [(cat, f, d) for cat, c in s.get("categories", {}).items() for f, d in (c.get("format_drift") or {}).items() if d.get("flag")]
    w("")
    if drifted:
        w("Format drift beyond the noise floor:")
        for cat, f, d in drifted:
            w(f"- {cat} / {f}: {d['baseline']:.3g} → {d['candidate']:.3g} (p {d['p_value']:.3g})")
    else:
        w("Format drift: no feature changed beyond the noise floor.")
    w("")

    w("## 4. Guardrails")
    for g in s.get("guardrails", []):
        route = "" if g.get("route") in (None, "*") else f" [route {g['route']}]"
        w(f"- {_box(g['passed'])} `{g['name']}`{route} (threshold {g['threshold']}): {g['message']}")
    w("")

    w("## 5. Fallback plan")
    fb = s.get("fallback", {})
    if fb.get("routes"):
        w(f"- action `{fb.get('configured_action', fb.get('action'))}` on routes: {', '.join(fb['routes'])}")
    else:
        w(f"- no route needs the fallback; configured action: `{fb.get('configured_action', fb.get('action'))}`")
    w(f"- reason: {fb.get('reason', '')}")
    w("")

    w("## 6. Not evaluated")
    ne = s.get("not_evaluated") or []
    if ne:
        for item in ne:
            w(f"- {item}")
        if s.get("allow_not_evaluated"):
            w("- (the config allows passing with these unevaluated: `allow_not_evaluated: true`)")
    else:
        w("- everything above was evaluated")
    w("")
    w("Signed off by: ____________________   date: __________")
    return "\n".join(out) + "\n"


def write_signoff(folder: Path, summary: dict[str, Any]) -> Path:
    path = folder / SIGNOFF_NAME
    tmp = path.with_suffix(".md.tmp")
    tmp.write_text(summary.get("signoff") or render_signoff(summary), encoding="utf-8")
    tmp.replace(path)
    return path
