"""signoff.md: the pre-canary checklist, each item filled with this run's evidence.

A release manager signs this, so every line says what was measured and
what it showed, and the last section lists what was *not* evaluated — an
unchecked box is never rendered as a ticked one.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from qualitycheck.verdict._model import LatencySide, Percentiles, Summary

__all__ = ["SIGNOFF_NAME", "render_signoff", "write_signoff"]

SIGNOFF_NAME = "signoff.md"


def _box(passed: bool | None) -> str:
    return {True: "[x]", False: "[ ] FAILED:", None: "[ ] NOT EVALUATED:"}[passed]


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 100:.1f}%"


def _ms(side: LatencySide | None, metric: str) -> str:
    if side is None:
        return "n/a"
    pc: Percentiles = getattr(side, metric)
    values = {"p50": pc.p50, "p95": pc.p95, "p99": pc.p99}
    return " / ".join(f"{p} {v:.1f}" for p, v in values.items() if v is not None) or "n/a"


def _judge_calibration(s: Summary, w: Callable[[str], None]) -> None:
    """The judge's A/A floor and position bias, when the run measured them."""
    floors = [
        (cat, c.checks["judge"])
        for cat, c in s.categories.items()
        if "judge" in c.checks and "aa_pairs" in c.checks["judge"].model_fields_set
    ]
    if not floors and not s.judge_position_bias:
        return
    w("Judge calibration:")
    for cat, j in floors:
        w(
            f"- {cat}: the judge lost {j.aa_losses} of {j.aa_pairs} A/A pairs (noise floor {_pct(j.aa_loss_rate)}); "
            f"candidate losses {j.losses}, of which {len(j.tolerated)} explained by the floor"
        )
    for name, b in s.judge_position_bias.items():
        w(
            f"- position bias of judge `{name}`: first position chosen in {_pct(b.first_position_rate)} of decisive verdicts "
            f"(50% is unbiased); {b.same_position_pairs} of {b.pairs} pairs decided by position"
        )
    w("")


def _gpu(s: Summary, w: Callable[[str], None]) -> None:
    """GPU facts sampled during generation (summary.json `gpu`): recorded beside the latency, never gated."""
    for name, g in sorted(s.gpu.items()):
        parts = []
        if g.kv_cache_usage is not None:
            parts.append(f"KV-cache usage {_pct(g.kv_cache_usage)} mean, {_pct(g.kv_cache_usage_max)} max")
        if g.gpu_utilization is not None:
            parts.append(f"GPU utilisation {g.gpu_utilization:.0f}% mean")
        if g.gpu_memory_used_mib is not None:
            parts.append(f"GPU memory used {g.gpu_memory_used_mib:,.0f} MiB max")
        w(f"- GPU, {name}: {'; '.join(parts) or 'no figure'} ({g.samples} samples during generation)")
    if s.gpu and not any(g.gpu_utilization is not None for g in s.gpu.values()):
        w("- GPU utilisation and memory: not recorded (set `canary.dcgm_metrics` to a DCGM exporter to sample them during the run)")


def _human_review(s: Summary, w: Callable[[str], None]) -> None:
    """Human spot-checks, when labels were imported: preference, agreement, and the losses that count."""
    hr = s.human_review
    if hr is None:
        return
    w(f"Human spot-checks (blinded; reviewers {', '.join(hr.reviewers)}; {hr.labels} labels): {hr.note}.")
    for cat, c in s.categories.items():
        h = c.human_review
        if h is None:
            continue
        pref = ", ".join(
            f"{k.replace('_', ' ')} {v.count} ({_pct(v.rate)}" + (f", CI {_pct(v.ci[0])}–{_pct(v.ci[1])})" if v.ci else ")")
            for k, v in h.preference.items()
        )
        agree = f"; reviewers agree on {_pct(h.reviewer_agreement.rate)} of {h.reviewer_agreement.pairs}" if h.reviewer_agreement else ""
        judge = ""
        if h.judge_agreement is not None:
            kappa = h.judge_agreement.kappa
            judge = f"; judge agrees on {_pct(h.judge_agreement.rate)} (kappa {'n/a' if kappa is None else f'{kappa:.2f}'})"
        sign = "n/a" if h.sign_test_p is None else f"{h.sign_test_p:.3g}"
        w(f"- {cat}: {h.pairs} pairs; preferred {pref}; sign test p {sign}{agree}{judge}")
        check = c.checks.get("human")
        if check is not None and check.regressions:
            w(f"  - human-reported losses: counted {', '.join(check.counted) or 'none'}; tolerated {', '.join(check.tolerated) or 'none'}")
    w("")


def _likelihood(s: Summary, w: Callable[[str], None]) -> None:
    """The baseline model as referee: each category's sampled answers under it, and where greedy answers left the baseline's."""
    lk = s.likelihood
    cells = [(cat, c.likelihood) for cat, c in s.categories.items() if c.likelihood is not None]
    divs = [(cat, d) for cat, c in s.categories.items() for d in c.divergences]
    if lk is None and not cells and not divs:
        return
    w("")
    if lk is not None and not lk.evaluated:
        w(
            f"Likelihood under the baseline model: NOT EVALUATED ({lk.reason}): sampled and greedy answers were judged by their checks alone."
        )
        return
    if lk is not None:
        w(
            f"Likelihood under the baseline model ({lk.model} at {lk.scorer}): {lk.scored} of {lk.answers} answers scored "
            f"({lk.prefilled_tokens:,} tokens prefilled in {lk.wall_s:.1f} s)"
            + (f"; {lk.too_long} too long for its context, not scored" if lk.too_long else "")
            + (f"; {lk.errors} failed" if lk.errors else "")
        )
    for cat, cell in cells:
        word = {"shift": "CHANGED", "no_shift": "no shift", "undecided": "UNDECIDED"}[cell.decision]
        means = (
            f"{cell.baseline_mean_logprob:.2f} → {cell.candidate_mean_logprob:.2f} nats per token"
            if cell.baseline_mean_logprob is not None and cell.candidate_mean_logprob is not None
            else "n/a"
        )
        bounds = f" [{cell.bounds[0]:+.2f}, {cell.bounds[1]:+.2f}]" if cell.bounds else ""
        shift = "n/a" if cell.shift is None else f"{cell.shift:+.2f}{bounds}"
        holm = f", Holm {cell.p_value_holm:.3g}" if cell.p_value_holm is not None else ""
        line = f"- {cat} / likelihood: {word}: {means} over {cell.cases} case(s) × {cell.samples_at_decision} samples per side, shift {shift}, p {cell.p_value:.3g}{holm}"
        if cell.meaning:
            line += f": {cell.meaning}"
        if cell.decision == "shift" and cell.largest_shifts:
            line += "; largest: " + "; ".join(
                f"{c.case_id} {c.shift:+.2f}" + (f" (least likely candidate tokens: {c.least_likely})" if c.least_likely else "")
                for c in cell.largest_shifts[:3]
            )
        w(line)
    decisive = [(cat, d) for cat, d in divs if d.kind == "decisive"]
    ties = sum(1 for _, d in divs if d.kind == "near_tie")
    if divs:
        w(
            f"- greedy answers that left the baseline's: {len(divs)}; at a near tie of the baseline model (numerics): {ties}; "
            f"at a token the baseline would not write (decisive): {len(decisive)}"
        )
        for cat, d in decisive[:10]:
            cand = "its end" if d.candidate_token is None else f"{d.candidate_token!r}"
            prob = f" ({d.candidate_probability:.2%})" if d.candidate_probability is not None else ""
            base = f"{d.baseline_token!r}" + (f" ({d.baseline_probability:.0%})" if d.baseline_probability is not None else "")
            w(f"  - {cat}/{d.case_id}: at token {d.position} the candidate wrote {cand}{prob} where the baseline wrote {base}")


def render_signoff(s: Summary) -> str:
    out: list[str] = []
    w = out.append
    t = s.targets
    w("# Speculative decoding sign-off")
    w("")
    base, cand = t.get("baseline"), t.get("candidate")
    sm = s.sampling
    each = (
        f"greedy cases answered once, {sm.sampled_cases} sampled case(s) in {len(sm.rounds)} round(s) "
        f"({sm.mean_samples_per_case:.1f} samples per side on average)"
        if sm is not None and sm.mode == "adaptive"
        else f"{s.repeats} repeat(s)"
    )
    w(
        f"**Verdict: {s.verdict.upper()}** — {s.cases} cases, {each}; "
        f"baseline `{base.url if base else '?'}` vs candidate `{cand.url if cand else '?'}`"
        + (f", control `{t['control'].url}`" if "control" in t else "")
        + "."
    )
    w("")

    w("## 1. Baseline performance")
    lat = s.latency
    for name in ("baseline", "candidate"):
        side: LatencySide | None = getattr(lat, name)
        e = s.errors.get(name)
        approx = side.percentiles if side is not None else None
        w(
            f"- {name}: TTFT ms {_ms(side, 'ttft_ms')}; TPOT ms {_ms(side, 'tpot_ms')}; "
            f"errors {e.count if e else 0}/{e.requests if e else 0} ({_pct(e.rate if e else None)})"
            + (f"; percentiles {approx}" if approx else "")
        )
        for kind in e.kinds if e else []:  # why they failed: what to fix before anyone reads the rates
            w(f"  - {kind.kind} × {kind.count}: {kind.message}")
    if lat.baseline is None and lat.candidate is None:
        w("- latency percentiles: not available in this run")
    _gpu(s, w)
    w("")

    w("## 2. Draft-mechanism validation")
    acc = s.acceptance
    if acc.rate is not None:
        mal = acc.mean_accepted_length
        w(
            f"- acceptance rate {acc.rate:.3f}, mean accepted length {'n/a' if mal is None else f'{mal:.2f}'}, "
            f"draft tokens {acc.draft_tokens}, accepted {acc.accepted_tokens}"
        )
    else:
        w("- acceptance: NOT EVALUATED (no speculative-decoding counters scraped from the candidate)")
    pre = s.preflight
    if pre is not None:
        ok = pre.ok
        checked = any(item.passed is not None for item in pre.checks)
        state = (
            "MISMATCH"
            if ok is False
            else "NOT EVALUATED (no check could be made: the servers expose none of what it compares)"
            if not checked
            else "consistent"
            if ok
            else "see details"
        )
        w(f"- preflight (model, chat template, stop tokens): {state}")
        for item in pre.checks[:10]:
            state = "ok" if item.passed else "MISMATCH" if item.passed is False else "could not check"
            w(f"  - {item.name}: {state} {item.detail}".rstrip())
    else:
        w("- preflight: NOT EVALUATED (no preflight results stored)")
    w("")

    w("## 3. Quality regression by category")
    w("")
    w("| category | verdict | cases | identical | check | baseline | candidate | Δ [95% CI] | p (Holm) | regressions | flaky | MDE |")
    w("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for cat, c in s.categories.items():
        if not c.checks:
            w(f"| {cat} | {c.verdict} | {c.cases} | {_pct(c.identical_rate)} | — | | | | | | | |")
        for name, k in c.checks.items():
            ci = k.ci
            ci_s = f"{k.delta * 100:+.1f}pp [{ci[0] * 100:+.1f}, {ci[1] * 100:+.1f}]" if ci and k.delta is not None else "n/a"
            p = k.p_value_holm
            w(
                f"| {cat} | {c.verdict} | {c.cases} | {_pct(c.identical_rate)} | {name} | "
                f"{_pct(k.baseline_pass_rate)} | {_pct(k.candidate_pass_rate)} | {ci_s} | "
                f"{'n/a' if p is None else f'{p:.3g}'} | {len(k.regressions)} "
                f"({k.regressions_beyond_floor} beyond noise) | {len(k.flaky)} | {_pct(k.mde)} |"
            )
    w("")
    w("What the run can promise, per category (the smallest drop it detects with 80% power; how far identical answers generalise):")
    for cat, c in s.categories.items():
        w(f"- {cat} ({c.verdict}): {c.power or 'nothing: no check decided and no answer was compared'}")
        if c.would_decide:
            w(f"  - what would decide it: {c.would_decide}")
    sampled = [(cat, name, k) for cat, c in s.categories.items() for name, k in c.checks.items() if k.sampled is not None]
    if sampled:
        w("")
        w(
            "Sampled cases (temperature > 0) are compared as pass-rate distributions: several samples per side, a test "
            "stratified by case (Cochran–Mantel–Haenszel) looked at after each round with group-sequential bounds, Holm across "
            "the sampled checks. Identity with the baseline's answer is not applied to them."
        )
        for cat, name, k in sampled:
            sp = k.sampled
            assert sp is not None
            word = {"drop": "DROPPED", "no_drop": "no drop", "undecided": "UNDECIDED"}[sp.decision]
            bounds = f" [{sp.bounds[0] * 100:+.1f}, {sp.bounds[1] * 100:+.1f}]" if sp.bounds else ""
            holm = f", Holm {sp.p_value_holm:.3g}" if sp.p_value_holm is not None else ""
            worst = ", ".join(f"{d.case_id} {_pct(d.baseline_pass_rate)}→{_pct(d.candidate_pass_rate)}" for d in sp.largest_drops)
            w(
                f"- {cat} / {name}: {word}: {_pct(sp.baseline_pass_rate)} → {_pct(sp.candidate_pass_rate)} over {sp.cases} case(s) × "
                f"{sp.samples_at_decision} samples per side, Δ {'n/a' if sp.delta is None else f'{sp.delta * 100:+.1f}pp'}{bounds}, "
                f"one-sided p {sp.p_value:.3g}{holm}" + (f"; largest drops: {worst}" if worst and sp.decision == "drop" else "")
            )
        skipped = [
            (cat, name, k.skipped_as_sampled) for cat, c in s.categories.items() for name, k in c.checks.items() if k.skipped_as_sampled
        ]
        for cat, name, n in skipped:
            w(f"- {cat} / {name}: not applied to {n} sampled case(s) (a check against the baseline's answer does not apply to samples)")
    _likelihood(s, w)
    if sm is not None:
        w(
            f"Sampling: {sm.mode}, up to {sm.max_samples_per_case} samples per side in rounds of {sm.sample_round}, to detect a "
            f"{sm.detectable_drop * 100:.0f}-point drop: "
            + "; ".join(f"round {r.round}: {r.cases} case(s) to {r.samples_per_case} samples (+{r.requests} requests)" for r in sm.rounds)
        )
    w("")
    floors = sorted(
        {
            (k.noise_floor.measured_by, cat, name, k.noise_floor.flip_rate)
            for cat, c in s.categories.items()
            for name, k in c.checks.items()
            if k.noise_floor.measured_by
        },
        key=lambda x: (x[1], x[2]),
    )
    how = s.noise_floor
    if how is not None and how.source != "none":
        cost = f"; it cost {how.requests} extra request(s)" if how.requests else ""
        w(f"Noise floor measured by {how.source}: {how.note}{cost}.")
    if floors:
        w("Noise floor (how often the baseline disagrees with itself; flaky cases are kept apart from regressions):")
        for by, cat, name, rate in floors:
            w(f"- {cat} / {name}: {_pct(rate)} of A/A pairs disagree (measured by {by})")
    elif how is None or how.source == "none":
        w("Noise floor: not measured (--no-noise-floor, or no control target and one repeat): every pass→fail flip counts as a regression.")
    for cat, c in s.categories.items():
        nf = c.noise_floor
        if nf.measured_by and nf.candidate_divergence_rate is not None and nf.text_divergence_rate is not None:
            p = nf.divergence_p_value
            beyond = p is not None and p < 0.05 and nf.candidate_divergence_rate > nf.text_divergence_rate
            w(
                f"- {cat}: answers differ from the baseline's in {_pct(nf.candidate_divergence_rate)} of pairs vs "
                f"{_pct(nf.text_divergence_rate)} for the A/A pairs (p {p:.3g})" + (" — TEXT DIVERGENCE BEYOND NOISE" if beyond else "")
            )
    flaky = [(cat, name, i) for cat, c in s.categories.items() for name, k in c.checks.items() for i in k.flaky_regressions]
    if flaky:
        w("Flaky cases that dropped on the candidate (not counted): " + ", ".join(f"{cat}/{i} ({name})" for cat, name, i in flaky[:30]))
    drifted = [(cat, f, d) for cat, c in s.categories.items() for f, d in c.format_drift.items() if d.flag]
    w("")
    if drifted:
        w("Format drift beyond the noise floor:")
        for cat, f, d in drifted:
            w(f"- {cat} / {f}: {d.baseline:.3g} → {d.candidate:.3g} (p {d.p_value:.3g})")
    else:
        w("Format drift: no feature changed beyond the noise floor.")
    w("")
    _judge_calibration(s, w)
    _human_review(s, w)

    w("## 4. Guardrails")
    for g in s.guardrails:
        route = "" if g.route == "*" else f" [route {g.route}]"
        w(f"- {_box(g.passed)} `{g.name}`{route} (threshold {g.threshold}): {g.message}")
    w("")

    w("## 5. Fallback plan")
    fb = s.fallback
    action = fb.configured_action or fb.action
    if fb.routes:
        w(f"- action `{action}` on routes: {', '.join(fb.routes)}")
    else:
        w(f"- no route needs the fallback; configured action: `{action}`")
    w(f"- reason: {fb.reason}")
    w("")

    w("## 6. Not evaluated")
    if s.not_evaluated:
        for line in s.not_evaluated:
            w(f"- {line}")
        if s.allow_not_evaluated:
            w("- (the config allows passing with these unevaluated: `allow_not_evaluated: true`)")
    else:
        w("- everything above was evaluated")
    w("")
    w("Signed off by: ____________________   date: __________")
    return "\n".join(out) + "\n"


def write_signoff(folder: Path, summary: Summary) -> Path:
    path = folder / SIGNOFF_NAME
    tmp = path.with_suffix(".md.tmp")
    tmp.write_text(summary.signoff or render_signoff(summary), encoding="utf-8")
    tmp.replace(path)
    return path
