"""Benchmark figures for the stages after generation: sandbox, judge, report, gate.

Each function measures one figure through the stage's public entry point
(the same one `qualitycheck run` calls), and prints a skip line with the
reason when that stage is not in this checkout.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import _procs

ROOT = Path(__file__).resolve().parents[1]
MBPP = Path("/work/shared/data/mbpp/sanitized-mbpp.jsonl")

Figure = Callable[..., None]


def _has(module: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def _store(folder: Path, cases: list[Any], answers: dict[str, tuple[str, str]]) -> Any:
    """A finished two-target run folder filled by hand (no endpoint involved)."""
    from qualitycheck.core._config_file import Config
    from qualitycheck.core._records import Response, Usage
    from qualitycheck.core._store import RunStore
    from qualitycheck.pipeline._run import manifest_for, redacted_config

    cfg = Config.model_validate(
        {"baseline": {"url": "http://127.0.0.1:9/v1", "model": "m"}, "candidate": {"url": "http://127.0.0.1:9/v1", "model": "m"}}
    )
    store = RunStore.create(folder, manifest_for(cases, cfg, ["bench"]), cases)
    store.put_artifact("config", redacted_config(cfg))
    for i, c in enumerate(cases):
        for side, text in zip(("baseline", "candidate"), answers[c.id]):
            n = max(1, len(text.split()))
            times = [0.05 + 0.002 * k for k in range(min(n, 64))]
            store.put_response(
                Response(
                    case_id=c.id,
                    target=side,
                    fingerprint="bench",
                    text=text,
                    finish_reason="stop",
                    usage=Usage(prompt_tokens=12, completion_tokens=n),
                    ttft_s=times[0],
                    chunk_times=times,
                    e2e_s=times[-1] + 0.001,
                    started_at=1.7e9 + i,
                )
            )
    return store


def sandbox_rate(figure: Figure, skipped: Callable[[str, str], None], quick: bool) -> None:
    """Sandboxed unit-test runs per second: MBPP reference solutions scored like model answers.

    The workload is the first 30 MBPP tasks, each answered by its reference
    solution on both sides (60 sandboxed runs), scored by `score_store` as
    `qualitycheck score` does. It is scored in several rounds, each into a
    fresh run folder, and the median rate is the figure, because the machine
    is shared. Later MBPP tasks are left out on purpose: task 123's own test
    costs seconds of CPU per answer, which would measure that test, not the
    sandbox. CPU time per run is this process plus every sandbox process
    (the fork server's included, start-up too); kernel workers tearing
    namespaces down are not counted.
    """
    name = "sandboxed_unit_tests_per_s"
    if not _has("qualitycheck.scoring._code"):
        skipped(name, "qualitycheck/scoring/code.py (the sandboxed unit-test scorer) is not in this checkout yet")
        return
    if not MBPP.is_file():
        skipped(name, f"{MBPP} not found")
        return
    import resource
    import statistics
    import tempfile

    from qualitycheck.core._cases import Case
    from qualitycheck.scoring import _sandbox, score_store

    rows = [json.loads(line) for line in MBPP.read_text().splitlines()[:30]]
    cases = [
        Case(
            id=f"mbpp-{r['task_id']}",
            category="code",
            messages=[{"role": "user", "content": r["prompt"]}],
            checks={"unit_tests": {"tests": "\n".join(r["test_imports"] + r["test_list"])}},
        )
        for r in rows
    ]
    answers = {c.id: (f"```python\n{r['code']}\n```",) * 2 for c, r in zip(cases, rows, strict=True)}

    def cpu_s(who: int) -> float:
        r = resource.getrusage(who)
        return r.ru_utime + r.ru_stime

    _sandbox._stop_servers()  # the fork server is started inside the measured time, and its CPU counted
    rates, runs, passed, cpu = [], 0, 0, 0.0
    children0 = cpu_s(resource.RUSAGE_CHILDREN)
    for _ in range(2 if quick else 5):
        with tempfile.TemporaryDirectory() as td:
            store = _store(Path(td), cases, answers)
            t0, cpu0 = time.perf_counter(), cpu_s(resource.RUSAGE_SELF)
            score_store(store)
            wall, cpu = time.perf_counter() - t0, cpu + cpu_s(resource.RUSAGE_SELF) - cpu0
            scores = [s for s in store.scores() if s.check == "unit_tests"]
            store.close()
        rates.append(len(scores) / wall)
        runs += len(scores)
        passed += sum(s.status == "pass" for s in scores)
    _sandbox._stop_servers()  # a zygote's CPU (and its runs') is counted once it has exited and been reaped
    cpu_ms = (cpu + cpu_s(resource.RUSAGE_CHILDREN) - children0) * 1000 / runs
    level = _sandbox.isolation()["level"]
    figure(
        name,
        statistics.median(rates),
        "tests/s",
        f"median of {len(rates)} rounds of {len(scores)} sandboxed runs (30 MBPP reference solutions, baseline+candidate) "
        f"through score_store; rounds {min(rates):.0f}-{max(rates):.0f}/s, the first incl. the fork server's start; "
        f"{passed}/{runs} passed; isolation {level}; {os.cpu_count()} cores; load {os.getloadavg()[0]:.1f}",
    )
    figure(
        "sandbox_cpu_ms_per_test",
        cpu_ms,
        "ms",
        "CPU per sandboxed run: score_store in this process + fork server + run processes (kernel workers not counted)",
    )


def judge_savings(figure: Figure, skipped: Callable[[str, str], None], tmp: Path, quick: bool) -> None:
    """Judge calls a greedy run saves by not judging byte-identical pairs."""
    name = "judge_calls_saved_pct"
    if not _has("qualitycheck.judge._judge"):
        skipped(name, "qualitycheck/scoring/judge.py is not in this checkout yet")
        return
    from qualitycheck.core._cases import Case
    from qualitycheck.core._config import JudgeTarget, RunOptions
    from qualitycheck.judge._judge import JudgeOptions, score_judge
    from qualitycheck.testserver import TestServer

    n, divergent_every = (200, 10) if quick else (1000, 10)
    cases = [
        Case(
            id=f"j{i}", category="summaries", messages=[{"role": "user", "content": f"Summarise item j{i}."}], checks={"judge": "pairwise"}
        )
        for i in range(n)
    ]
    answers = {c.id: (f"summary {i}", f"summary {i}" if i % divergent_every else f"a different summary {i}") for i, c in enumerate(cases)}
    store = _store(tmp / "judge-run", cases, answers)
    try:
        with TestServer(default="Both are fine. [[TIE]]", model="J") as judge:
            stage = score_judge(store, JudgeTarget(url=judge.url, model="J"), JudgeOptions.of_run(RunOptions(concurrency=32)))
            calls = len(judge.requests("/chat/completions"))
    finally:
        store.close()
    without = 2 * n  # pairwise in both orders
    figure(
        name,
        100 * (1 - calls / without),
        "%",
        f"{calls} judge calls instead of {without} for {n} pairs; {stage.get('skipped_identical')} identical pairs skipped; "
        f"input: 1 pair in {divergent_every} diverges (the saving equals the identical share of a real greedy run)",
    )


def build_report_run(tmp: Path, n: int) -> Path:
    """The report figure's run: n pairs over 8 categories and two checks, 1 in 20 candidate answers different, scored."""
    from qualitycheck.core._cases import Case

    cases = [
        Case(
            id=f"r{i}",
            category=f"cat{i % 8}",
            messages=[{"role": "user", "content": f"Question r{i}?"}],
            checks={"exact": f"answer {i}", "contains": ["answer"]},
        )
        for i in range(n)
    ]
    answers = {c.id: (f"answer {i}", f"answer {i}" if i % 20 else f"answer {i} but longer and different") for i, c in enumerate(cases)}
    folder = tmp / "report-run"
    _store(folder, cases, answers).close()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    score = _procs.run([sys.executable, "-m", "qualitycheck", "score", str(folder)], capture_output=True, text=True, env=env)
    if score.returncode not in (0, 1):
        raise RuntimeError(f"qualitycheck score failed: {score.stderr[-300:]}")
    return folder


def report_build(figure: Figure, skipped: Callable[[str, str], None], tmp: Path, n: int) -> None:
    """`qualitycheck report DIR` on a 10,000-pair run: wall time and report.html size."""
    if not _has("qualitycheck.report"):
        skipped("report_build_s", "qualitycheck/report is not in this checkout yet")
        return
    try:
        folder = build_report_run(tmp, n)
    except RuntimeError as exc:
        skipped("report_build_s", str(exc))
        return
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    t0 = time.perf_counter()
    rep = _procs.run([sys.executable, "-m", "qualitycheck", "report", str(folder)], capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    html = folder / "report.html"
    if rep.returncode not in (0, 1) or not html.is_file():
        skipped("report_build_s", f"qualitycheck report failed (exit {rep.returncode}): {rep.stderr[-300:]}")
        return
    figure("report_build_s", wall, "s", f"`qualitycheck report` process for {n} pairs (summary + report.html), incl. start-up")
    figure("report_html_mb", html.stat().st_size / 1e6, "MB", f"{n} pairs, self-contained")


def gate_power(figure: Figure, skipped: Callable[[str, str], None], trials: int) -> None:
    """The quality gate on simulated runs, through its own decisions: false alarms, power, and the samples sampled cases cost.

    Greedy: one 300-case category against a control (1% A/A disagreement);
    31 cases over 5 routes with 2 regressions each against the default pooled
    floor. Sampled: a category of 30 cases whose baseline pass rates spread
    over 0.5-0.95, sampled in rounds with the default budget, against the
    fixed `--repeats 8` design on the same draws' distribution.
    """
    try:
        from bench._simulate import simulate_gate, simulate_likelihood, simulate_routes, simulate_sampled
        from qualitycheck.core._config import RunOptions
    except ImportError as exc:
        skipped("gate_false_alarm_rate", f"the decision these simulations call is not in this checkout ({exc})")
        return
    t0 = time.perf_counter()
    fa = simulate_gate(n=300, drop=0.0, trials=trials, seed=1)
    power = simulate_gate(n=300, drop=0.02, trials=trials, seed=2)
    note = f"N=300 cases, 80% pass rate, 1% A/A disagreement, control target, {trials} simulated runs each"
    figure("gate_false_alarm_rate", fa, "", note)
    figure("gate_power_2pp_regression", power, "", note)

    routes = simulate_routes(per_route=2, trials=trials, seed=3)
    note = f"31 greedy cases over 5 routes, 2 regressions per route, 0% A/A disagreement, default floor, {trials} runs"
    figure("gate_routes_caught", routes.failed, "", note)
    figure("gate_routes_every_broken_route_failed", routes.every_broken_route, "", note)
    for noise in (0.0, 0.01, 0.02):
        aa = simulate_routes(noise=noise, trials=trials, seed=4)
        note = f"31 greedy cases over 5 routes, nothing broken, {noise:.0%} A/A disagreement, default floor, {trials} runs"
        figure(f"gate_routes_false_alarm[aa={noise:.0%}]", aa.failed, "", note)
        figure(f"gate_routes_undecided[aa={noise:.0%}]", aa.undecided, "", note + "; undecided: a floor too small to explain a flip")

    fixed8 = RunOptions(repeats=8)
    used = []
    for drop, name in ((0.0, "aa"), (0.10, "10pp"), (0.30, "30pp")):
        got = simulate_sampled(drop=drop, trials=trials, seed=5)
        note = f"30 sampled cases, baseline pass rates 0.5-0.95, candidate {drop:.0%} lower, default rounds, {trials} runs"
        if drop:
            figure(f"gate_sampled_power_{name}", got.drop, "", note)
        else:
            figure("gate_sampled_false_alarm", got.drop, "", note)
            figure("gate_sampled_aa_passed", got.no_drop, "", note + "; the rest undecided")
        figure(f"gate_sampled_samples_per_case[{name}]", got.mean_samples, "samples", note + "; per side")
        used.append(got.mean_samples)
        if drop == 0.10:
            ref = simulate_sampled(drop=drop, run=fixed8, trials=trials, seed=5)
            figure("gate_sampled_fixed8_power_10pp", ref.drop, "", note.replace("default rounds", "fixed --repeats 8"))
    figure(
        "gate_sampled_samples_vs_fixed8",
        sum(used) / len(used) / 8,
        "ratio",
        "mean samples per case over the three cases above (no drop, 10, 30 points) against --repeats 8's 8",
    )
    for shift in (0.0, -0.1, -0.25, -0.5, -3.3):
        lk = simulate_likelihood(shift=shift, trials=trials, seed=6)
        note = (
            f"16 sampled cases under the baseline model (levels sd 0.4, samples sd 0.35 nats/token), candidate {shift:+.2f} nats "
            f"per token, default rounds, {trials} runs"
        )
        name = "gate_likelihood_false_alarm" if shift == 0 else f"gate_likelihood_power[{shift:+.2f}]"
        figure(name, lk.shift, "", note)
        figure(f"gate_likelihood_samples_per_case[{shift:+.2f}]", lk.mean_samples, "samples", note + "; per side")
    for shift in (0.0, -0.25, -0.5):  # the widest spread measured on real vLLM: the demo's json_sampled, fp32 A/A
        wide = simulate_likelihood(cases=12, shift=shift, between_sd=0.25, within_sd=0.61, trials=trials, seed=8)
        note = f"12 sampled cases (levels sd 0.25, samples sd 0.61 nats/token), candidate {shift:+.2f} nats per token, {trials} runs"
        figure(f"gate_likelihood_wide[{shift:+.2f}]", wide.shift, "", note)
        figure(f"gate_likelihood_wide_samples_per_case[{shift:+.2f}]", wide.mean_samples, "samples", note + "; per side")
    less_varied = simulate_likelihood(shift=0.3, candidate_sd=0.07, trials=trials, seed=7)
    figure(
        "gate_likelihood_power[less_varied]",
        less_varied.shift,
        "",
        f"16 sampled cases, the candidate's samples 0.3 nats per token more likely and a fifth as varied, {trials} runs",
    )
    figure("gate_simulation_s", time.perf_counter() - t0, "s")
