"""Harness overhead on real engines: `qualitycheck run` against vLLM and against llama-server, the same client and figure.

For each engine installed here, one server (the demo model, one core:
`SERVER_CPU`) answers N streamed greedy chat requests, `max_tokens` capped,
eight in flight: once from the bare aiohttp loop (bench/bare_client.py), once
from `qualitycheck run` (baseline and candidate both on that server, four in
flight each, so the server sees the same load). The figure is qualitycheck's
first request to last answer (from the run's own records) over the bare
loop's wall time (a new loopback connection per request, for both engines:
llama-server drops kept-alive ones), the median of alternating repetitions, as
`harness_overhead_ratio` is against the scripted server. On a real engine
the server's own compute dominates both, so the ratio says how much of the
engine's time the harness adds, not how fast the engine is.

    python bench/run.py --only engines
"""

from __future__ import annotations

import json
import shutil
import statistics
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

Figure = Callable[..., None]

N_REQUESTS = 32
IN_FLIGHT = 8
MAX_TOKENS = 32


def _suite(path: Path, n: int) -> Path:
    """The bare client's requests as cases: same prompts, greedy, same cap."""
    with path.open("w") as f:
        for i in range(n):
            case = {
                "id": f"c{i}",
                "category": "bench",
                "params": {"max_tokens": MAX_TOKENS, "temperature": 0},
                "messages": [{"role": "user", "content": f"Say something r{i}"}],
            }
            f.write(json.dumps(case) + "\n")
    return path


@contextmanager
def _vllm(core: int) -> Iterator[str]:
    from qualitycheck.engines._launcher import launch
    from qualitycheck.engines._model import DEMO_MODEL_NAME, prepare

    with launch(prepare(), served_name=DEMO_MODEL_NAME, name="bench-vllm", core=core) as s:
        yield s.url


@contextmanager
def _llama(core: int) -> Iterator[str]:
    from qualitycheck.engines._launcher import launch_llama
    from qualitycheck.engines._model import DEMO_MODEL_NAME, demo_gguf

    with launch_llama(demo_gguf(), served_name=DEMO_MODEL_NAME, name="bench-llama", core=core, parallel=IN_FLIGHT) as s:
        yield s.url


def _missing(engine: str) -> str | None:
    import importlib.util

    from qualitycheck.core._errors import QualitycheckError

    if engine == "vllm":
        return None if importlib.util.find_spec("vllm") else "vLLM is not installed here (bash scripts/dev.sh setup)"
    try:
        from qualitycheck.engines._launcher import llama_server_binary

        llama_server_binary()
    except QualitycheckError as exc:
        return str(exc)
    return None


def run(figure: Figure, skipped: Figure, tmp: Path, ctx: dict[str, Any], quick: bool) -> None:
    """One figure per engine: `harness_overhead_ratio_<engine>`; `ctx` holds bench/run.py's process helpers."""
    from qualitycheck.engines._model import DEMO_MODEL_NAME

    run_process, qc_run_cmd, generation_span, cli_env = ctx["run_process"], ctx["qc_run_cmd"], ctx["generation_span"], ctx["cli_env"]
    bare_client, server_cpu, py = ctx["bare_client"], ctx["server_cpu"], ctx["python"]
    reps = 3 if quick else 5
    suite = _suite(tmp / "engines.jsonl", N_REQUESTS // 2)
    for engine, name, serve in (("vllm", "vllm", _vllm), ("llama.cpp", "llama_cpp", _llama)):
        figure_name = f"harness_overhead_ratio_{name}"
        if (why := _missing(engine)) is not None:
            skipped(figure_name, why)
            continue
        spans, bare = [], []
        with serve(server_cpu) as root:
            url = root + "/v1"
            bare_cmd = [py, str(bare_client), url, str(N_REQUESTS), str(IN_FLIGHT), "--model", DEMO_MODEL_NAME]
            bare_cmd += ["--max-tokens", str(MAX_TOKENS), "--temperature", "0", "--close"]
            run_process(bare_cmd)  # warm-up: the engine's first requests are slower
            for r in range(reps):
                out = tmp / f"engines-{name}-{r}"
                cmd = qc_run_cmd(url, suite, out, IN_FLIGHT // 2)
                cmd[cmd.index("--model") + 1] = DEMO_MODEL_NAME
                cmd.append("--no-noise-floor")  # exactly N requests, as the bare loop sends
                m = run_process(cmd, env=cli_env())
                if m.rc not in (0, 1):
                    raise RuntimeError(f"qualitycheck run on {engine} failed (exit {m.rc}): {m.err}")
                first, last = generation_span(out)
                spans.append(last - first)
                shutil.rmtree(out, ignore_errors=True)
                b = run_process(bare_cmd)
                if b.out.get("ok") != N_REQUESTS:
                    raise RuntimeError(f"bare client on {engine}: {b.out.get('ok')}/{N_REQUESTS} answered: {b.err}")
                bare.append(b.out["wall_s"])
        med = statistics.median
        figure(
            figure_name,
            med(spans) / med(bare),
            "x",
            f"`qualitycheck run` first request to last answer / bare aiohttp loop, {engine} serving {DEMO_MODEL_NAME} on one core; "
            f"N={N_REQUESTS} greedy streamed requests, max_tokens {MAX_TOKENS}, {IN_FLIGHT} in flight, median of {reps} "
            f"(qualitycheck {med(spans):.2f} s, bare {med(bare):.2f} s)",
        )
