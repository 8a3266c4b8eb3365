"""Scripted metric pages, a fake clock, an action recorder and a served watcher for the canary tests."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Coroutine, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from qualitycheck.canary._actions import ActionRunner
from qualitycheck.canary._record import CanaryRecord
from qualitycheck.canary._serve import CanaryMetrics, serve
from qualitycheck.canary._watch import Watcher
from qualitycheck.core._config_file import Config
from tests.helpers import raw_server

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "canary"
ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "docs" / "examples" / "canary"
STATUS_SCHEMA = ROOT / "docs" / "schema" / "canary-status.schema.json"

WITH_QUALITY = {"min_acceptance_rate": 0.55, "max_quality_regression_cases": 0, "fallback_action": "disable_speculative_decoding_for_route"}
"""Acceptance and the quality guardrail, which nothing watches without --run."""


@dataclass
class Clock:
    """Time the tests move by hand: no sleeping, no timed assertions."""

    t: float = 1_000_000.0

    def __call__(self) -> float:
        return self.t

    def advance(self, s: float) -> None:
        self.t += s


@dataclass
class Page:
    """A metrics page whose text and status the test sets between scrapes."""

    text: str = ""
    status: int = 200
    body: str = "upstream down"
    hits: int = 0
    paths: list[str] = field(default_factory=list)


@contextmanager
def scripted_page(page: Page) -> Iterator[str]:
    """Serve `page` on every path; yields the base URL."""

    async def handler(request: web.Request) -> web.Response:
        page.hits += 1
        page.paths.append(request.path_qs)
        if page.status != 200:
            return web.Response(status=page.status, text=page.body)
        return web.Response(text=page.text, content_type="text/plain")

    with raw_server(handler) as url:
        yield url


def vllm_page(
    *,
    drafts: float = 0,
    draft_tokens: float = 0,
    accepted: float = 0,
    requests: float = 0,
    errors: float = 0,
    tpot: dict[float, float] | None = None,
    kv: float = 0.25,
    model: str = "m",
) -> str:
    """A vLLM /metrics page with the names the installed vLLM writes (vllm/v1/metrics/loggers.py, spec_decode/metrics.py)."""
    lab = f'engine="0",model_name="{model}"'
    lines = [
        "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.",
        "# TYPE vllm:kv_cache_usage_perc gauge",
        f"vllm:kv_cache_usage_perc{{{lab}}} {kv}",
        "# HELP vllm:request_success_total Count of successfully processed requests.",
        "# TYPE vllm:request_success_total counter",
        f'vllm:request_success_total{{{lab},finished_reason="stop"}} {float(requests - errors)}',
        f'vllm:request_success_total{{{lab},finished_reason="error"}} {float(errors)}',
        "# TYPE vllm:generation_tokens_total counter",
        f"vllm:generation_tokens_total{{{lab}}} {float(draft_tokens + requests)}",
    ]
    for name, value in (("num_drafts", drafts), ("num_draft_tokens", draft_tokens), ("num_accepted_tokens", accepted)):
        lines += [f"# TYPE vllm:spec_decode_{name}_total counter", f"vllm:spec_decode_{name}_total{{{lab}}} {float(value)}"]
    if tpot is not None:
        lines += [
            "# HELP vllm:request_time_per_output_token_seconds Histogram of time_per_output_token_seconds per request.",
            "# TYPE vllm:request_time_per_output_token_seconds histogram",
        ]
        total = 0.0
        for le, n in sorted(tpot.items()):
            total = n
            bound = "+Inf" if le == float("inf") else repr(le)
            lines.append(f'vllm:request_time_per_output_token_seconds_bucket{{{lab},le="{bound}"}} {float(n)}')
        lines += [
            f"vllm:request_time_per_output_token_seconds_count{{{lab}}} {total}",
            f"vllm:request_time_per_output_token_seconds_sum{{{lab}}} 1.0",
        ]
    return "\n".join(lines) + "\n"


def sglang_page(**values: float) -> str:
    text = (FIXTURES / "sglang_metrics.txt").read_text()
    for key, value in values.items():
        text = text.replace("{" + key + "}", repr(float(value)))
    return text


def config(**canary: Any) -> Config:
    guardrails = canary.pop("guardrails", {"min_acceptance_rate": 0.55, "fallback_action": "disable_speculative_decoding_for_route"})
    routes = canary.pop("routes_overrides", {})
    run = canary.pop("run", {})
    evidence = {"min_drafts": 10, "min_requests": 5, **canary.pop("evidence", {})}
    return Config.model_validate(
        {"speculative_decoding_guardrails": guardrails, "routes": routes, "run": run, "canary": {"evidence": evidence, **canary}}
    )


RECORDER = """\
import json, os, sys
event = json.loads(sys.stdin.read())
env = {k: v for k, v in os.environ.items() if k.startswith("QC_")}
with open(sys.argv[1], "a") as f:
    f.write(json.dumps({"env": env, "event": event}) + "\\n")
sys.exit(int(sys.argv[2]) if len(sys.argv) > 2 else 0)
"""


def recorder(tmp: Path, exit_status: int = 0) -> tuple[str, Path]:
    """A fallback command that appends its QC_* environment and stdin event to a file; returns (command, file)."""
    script = tmp / "record_action.py"
    script.write_text(RECORDER)
    log = tmp / "actions.jsonl"
    return f"{sys.executable} {script} {log} {exit_status}", log


def actions(log: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in log.read_text().splitlines()] if log.is_file() else []


def watcher(cfg: Config, out: Path, clock: Clock, command: str | None = None, **kw: Any) -> Watcher:
    return Watcher(cfg, out, action=ActionRunner(command=command, retries=0, backoff_s=0.0), clock=clock, log=lambda _: None, **kw)


def records(out: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (out / "canary.jsonl").read_text().splitlines()]


@dataclass
class Live:
    """A watcher serving its endpoints on loopback (its own event loop, on a thread) over a scripted vLLM page and a fake clock.

    `window()` puts one window's traffic on the page, moves the clock and has
    the watcher decide that window, as its watch loop would every interval.
    """

    url: str
    watcher: Watcher
    clock: Clock
    page: Page
    logs: list[str]
    run: Callable[[Coroutine[Any, Any, Any]], Any]
    submit: Callable[[Coroutine[Any, Any, Any]], Future[Any]]
    counters: dict[str, float] = field(default_factory=lambda: dict.fromkeys(("drafts", "draft_tokens", "accepted", "requests"), 0.0))

    def window(self, acceptance: float | None, drafts: int = 100, step: float = 10.0) -> CanaryRecord:
        """`drafts` drafts of 3 tokens at `acceptance` in the window (None: no traffic), then the window decided."""
        c = self.counters
        if acceptance is not None:
            c["drafts"] += drafts
            c["draft_tokens"] += 3 * drafts
            c["accepted"] += round(3 * drafts * acceptance)
            c["requests"] += 10
        self.page.text = vllm_page(drafts=c["drafts"], draft_tokens=c["draft_tokens"], accepted=c["accepted"], requests=c["requests"])
        self.clock.advance(step)
        record: CanaryRecord = self.run(self.watcher.step())
        return record


@contextmanager
def live_watcher(out: Path, *, dry_run: bool = False, run_dir: Path | None = None, **canary: Any) -> Iterator[Live]:
    """A `Live` watcher of the candidate's scripted page, with `config(**canary)`; scraped once at the start."""
    page = Page(vllm_page())
    clock = Clock()
    logs: list[str] = []
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def submit(coro: Coroutine[Any, Any, Any]) -> Future[Any]:
        return asyncio.run_coroutine_threadsafe(coro, loop)

    def run(coro: Coroutine[Any, Any, Any]) -> Any:
        return submit(coro).result(60)

    try:
        with scripted_page(page) as pages:
            canary.setdefault("window", "10s")
            w = Watcher(
                config(candidate_metrics=pages + "/metrics", **canary),
                out,
                action=ActionRunner(retries=0, backoff_s=0.0),
                run_dir=run_dir,
                dry_run=dry_run,
                clock=clock,
                log=logs.append,
            )
            w.metrics = CanaryMetrics()
            runner, url = run(serve(w.metrics, w.status, "127.0.0.1:0", logs.append))
            try:
                run(w.scrape())
                yield Live(url, w, clock, page, logs, run, submit)
            finally:
                run(runner.cleanup())
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def get_json(url: str) -> tuple[int, dict[str, Any]]:
    """GET a JSON answer: its status and body, a 4xx or 5xx included."""
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def status_of(live: Live) -> dict[str, Any]:
    """The watcher's /qc/status: 200, and what the published schema says."""
    from jsonschema import Draft202012Validator

    code, body = get_json(live.url + "/qc/status")
    assert code == 200
    assert not list(Draft202012Validator(json.loads(STATUS_SCHEMA.read_text())).iter_errors(body))
    return body


def example_docs(name: str) -> list[dict[str, Any]]:
    """The YAML documents of docs/examples/canary/NAME."""
    import yaml

    return [d for d in yaml.safe_load_all((EXAMPLES / name).read_text()) if d]
