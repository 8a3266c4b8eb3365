"""`qualitycheck demo`: the whole job on this machine, no GPU and no servers of your own.

It prepares SmolLM2-135M-Instruct (once), starts two local vLLM servers —
the fp32 baseline and an fp32 `ngram` speculative candidate, each on its own
core — runs the demo suite (the cases in `suites/` tagged `demo: "yes"`)
through the normal pipeline, writes the full run folder and stops the
servers.

The A/A control is the baseline server asked a second time, not a third
server: a third 4 GB process would not fit the 2-core budget of a demo, and
on CPU at fp32 greedy decoding is batch-invariant (measured: 20/20 identical
answers sequential vs concurrent), so a second server would measure the same
zero noise floor. The bf16 end-to-end test is where a real noise floor is
measured.

`--engine llama.cpp` runs the same job on llama.cpp's llama-server (built by
scripts/dev.sh): the demo model's GGUF as the baseline, and the same GGUF
drafting for itself (`--model-draft`, `--spec-draft-n-max 3`) as the
candidate. It runs without a judge: llama-server's greedy answers change
with how requests are batched, so many open-ended pairs differ, and the
baseline judging them (prompts of ~650 tokens, answers of hundreds) on one
thread ran past the request timeout again and again (more than 10 minutes
for the demo's judge pairs). Judged checks are then recorded as skipped,
never as passed, and their categories stay inconclusive.

The exit code is 0 when the demo ran to the end and wrote its report,
whatever the verdict: the verdict is the demo's output, not its failure
(`qualitycheck run` is the command whose exit code gates).
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path
from typing import Any

from qualitycheck.core._cases import Case, load_suite
from qualitycheck.core._config import JudgeTarget, RunOptions, Target
from qualitycheck.core._config_file import Config
from qualitycheck.core._errors import Problem, QualitycheckError, SuiteError
from qualitycheck.core._guardrails import GuardrailBlock
from qualitycheck.engines._launcher import (
    EngineServer,
    LaunchError,
    launch,
    launch_llama,
    llama_server_binary,
    ngram_config,
    start_together,
)
from qualitycheck.engines._model import DEMO_MODEL_NAME, demo_gguf, prepare

__all__ = ["DEMO_ENGINES", "DEMO_GUARDRAILS", "default_suites", "demo_cases", "run_demo", "write_suite"]

DEMO_ENGINES = ("vllm", "llama.cpp")

DEMO_SUITE_NAME = "demo-suite.jsonl"
DEMO_MAX_TOKENS = 64
"""Per-case cap: the demo cases are short-answer cases, and 2 CPU cores make ~15-60 tokens/s."""

DEMO_GUARDRAILS: dict[str, Any] = {
    "min_acceptance_rate": 0.55,
    "max_tpot_p95_regression": "10%",
    "max_error_rate": "1%",
    "max_quality_regression_cases": 0,
    "fallback_action": "disable_speculative_decoding_for_route",
}
"""The seed's guardrail block, verbatim, so the demo shows the gate users will get."""


def _say(msg: str) -> None:
    print(f"[demo] {msg}", file=sys.stderr, flush=True)


def demo_cases(suites: list[str] | tuple[str, ...] = ("suites",), max_tokens: int = DEMO_MAX_TOKENS) -> list[Case]:
    """The cases tagged `demo: "yes"`, with max_tokens capped.

    Falls back to the first three cases of every category when no case is
    tagged, so a user's own suites folder still gives a demo.
    """
    cases = load_suite(list(suites))
    chosen = [c for c in cases if c.tags.get("demo", "").lower() in ("yes", "true", "1")]
    if not chosen:
        per_cat: dict[str, int] = {}
        for c in cases:
            if per_cat.get(c.category, 0) < 3:
                per_cat[c.category] = per_cat.get(c.category, 0) + 1
                chosen.append(c)
    capped = []
    for c in chosen:
        limit = min(int(c.params.get("max_tokens") or max_tokens), max_tokens)
        capped.append(c.model_copy(update={"params": {**c.params, "max_tokens": limit}}))
    return capped


def write_suite(cases: list[Case], path: Path) -> Path:
    """A self-contained copy of the demo suite (fixture paths absolute, schemas inline) in the run folder."""
    with path.open("w", encoding="utf-8") as f:
        for c in cases:
            f.write(json.dumps(c.model_dump(mode="json", by_alias=True, exclude_none=True), ensure_ascii=False) + "\n")
    return path


def default_suites() -> list[str]:
    """`./suites` when the current folder has one, else the suites of the checkout qualitycheck runs from."""
    here = Path("suites")
    if here.is_dir():
        return [str(here)]
    checkout = Path(__file__).resolve().parents[2] / "suites"
    if checkout.is_dir():
        return [str(checkout)]
    raise SuiteError(
        [Problem("suites", None, "", "no suites folder here or in the qualitycheck checkout; run the demo from the repository root")]
    )


def _check_engine(engine: str) -> None:
    if engine == "llama.cpp":
        llama_server_binary()  # raises with the command that builds it
        return
    if importlib.util.find_spec("vllm") is None:
        raise LaunchError(
            "the vLLM CPU engine is not installed in this Python "
            f"({sys.executable}); install it with: bash scripts/dev.sh setup (see docs/ENGINE.md)"
        )


def _servers(engine: str, out: Path) -> tuple[EngineServer, EngineServer, dict[str, str]]:
    """The baseline and candidate of `engine`, spawned (not yet ready), and the labels the run gives them."""
    logs = out / "servers"
    if engine == "llama.cpp":
        gguf = demo_gguf()
        _say(
            f"step 2/4: starting llama-server baseline (Q4_1 GGUF) and its draft-model candidate (the same GGUF, draft-max 3); logs in {logs}"
        )
        baseline: EngineServer = launch_llama(gguf, served_name=DEMO_MODEL_NAME, name="baseline", core=0, wait=False, log_dir=logs)
        candidate: EngineServer = launch_llama(
            gguf, served_name=DEMO_MODEL_NAME, name="candidate-draft", core=1, wait=False, log_dir=logs, draft=gguf, draft_max=3
        )
        return baseline, candidate, {"baseline": "llama-server Q4_1", "candidate": "llama-server Q4_1 + draft model (itself) k=3"}
    model_dir = prepare()
    _say(f"step 2/4: starting vLLM baseline (fp32) and ngram candidate (fp32, k=3) — about a minute on 2 cores; logs in {logs}")
    baseline = launch(model_dir, served_name=DEMO_MODEL_NAME, name="baseline", core=0, wait=False, log_dir=logs)
    candidate = launch(
        model_dir, served_name=DEMO_MODEL_NAME, name="candidate-ngram", core=1, wait=False, speculative_config=ngram_config(), log_dir=logs
    )
    return baseline, candidate, {"baseline": "vLLM fp32", "candidate": "vLLM fp32 + ngram k=3"}


def run_demo(
    out: Path | None = None,
    *,
    suites: list[str] | tuple[str, ...] | None = None,
    max_tokens: int = DEMO_MAX_TOKENS,
    concurrency: int = 4,
    engine: str = "vllm",
) -> int:
    """Run the demo on `engine` ("vllm" or "llama.cpp") into `out` (default reports/demo-<timestamp>); returns the CLI exit code."""
    from qualitycheck.pipeline._run import run

    t0 = time.monotonic()
    if engine not in DEMO_ENGINES:
        raise SuiteError([Problem("command line", None, "--engine", f"expected one of {', '.join(DEMO_ENGINES)}, got {engine!r}")])
    out = out or Path("reports") / time.strftime("demo-%Y%m%d-%H%M%S")
    if out.exists() and any(out.iterdir()):
        raise QualitycheckError(
            f"{out}: not empty; the demo writes a fresh run folder (its servers get new ports, "
            "so an earlier demo run cannot be resumed). Give another --out."
        )
    suites = list(suites) if suites else default_suites()
    cases = demo_cases(suites, max_tokens)
    if not cases:
        raise SuiteError([Problem(",".join(map(str, suites)), None, "", "no cases to run")])
    _check_engine(engine)
    _say(f"step 1/4: demo model {DEMO_MODEL_NAME}")
    out.mkdir(parents=True, exist_ok=True)
    suite = write_suite(cases, out / DEMO_SUITE_NAME)
    cats = sorted({c.category for c in cases})
    baseline, candidate, labels = _servers(engine, out)
    try:
        start_together([baseline, candidate])
        _say(
            f"servers ready after {max(baseline.ready_after_s or 0, candidate.ready_after_s or 0):.0f} s: "
            f"baseline {baseline.url}, candidate {candidate.url}"
        )
        cfg = Config(
            baseline=Target(url=baseline.url, model=DEMO_MODEL_NAME, label=labels["baseline"]),
            candidate=Target(url=candidate.url, model=DEMO_MODEL_NAME, label=labels["candidate"]),
            control=Target(url=baseline.url, model=DEMO_MODEL_NAME, label="baseline server again (A/A)"),
            # The baseline judges the open-ended cases: only pairs that differ reach it (on vLLM; see the docstring for llama.cpp).
            judge=JudgeTarget(url=baseline.url, model=DEMO_MODEL_NAME, label="baseline as judge") if engine == "vllm" else None,
            run=RunOptions(concurrency=concurrency, max_tokens=max_tokens, retries=1),
            speculative_decoding_guardrails=GuardrailBlock.model_validate(DEMO_GUARDRAILS),
        )
        _say(f"step 3/4: {len(cases)} cases in {len(cats)} categories ({', '.join(cats)}) → {out}")
        if cfg.judge is None:
            _say("no judge on llama.cpp (too slow on one thread): judged checks are recorded as skipped, not passed")
        code = run(cfg, [str(suite)], out)
    finally:
        _say("step 4/4: stopping the servers")
        candidate.stop()
        baseline.stop()
    from qualitycheck.verdict._model import read_summary  # the typed summary; scipy comes with `run`, not with the demo's start
    from qualitycheck.verdict._summary import SUMMARY_NAME

    summary_path = out / SUMMARY_NAME
    verdict = read_summary(summary_path).verdict if summary_path.is_file() else None
    _say(f"done in {time.monotonic() - t0:.0f} s: verdict {verdict} (exit code of `qualitycheck run` would be {code})")
    _say(f"report: {out / 'report.html'}")
    _say(f"summary: {summary_path}")
    return 0
