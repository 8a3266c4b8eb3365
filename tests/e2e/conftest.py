"""End-to-end fixtures: real vLLM servers serving the real demo model.

Every server costs ~40-70 s to start and ~4 GB of memory, and the machine has
2 cores, so servers are started once per session by `EnginePool` and shared
by every test that needs the same configuration; asking the pool for a new
set stops the servers no longer asked for, so at most three run at
once (the bf16 test needs its own control). Test modules are ordered (test_1_..., test_2_...) so the
fp32 baseline survives from test to test.

Outside CI, a machine without vLLM skips these tests and says why; in CI
(env CI set) a missing engine is a failure, never a silent skip. The same
holds for the llama.cpp tests (marker `llama_cpp`) and the llama-server
binary scripts/dev.sh builds: they start their own two servers
(`llama_servers`), which take a second or two.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from qualitycheck.engines._launcher import (
    LaunchError,
    LlamaServer,
    VllmServer,
    draft_model_config,
    launch,
    launch_llama,
    llama_server_binary,
    ngram_config,
    start_together,
)
from tests.e2e.e2e_helpers import MODEL
from tests.e2e.machine import MachineWatch, Span


def _engine_present() -> bool:
    try:
        return importlib.util.find_spec("vllm") is not None
    except (ImportError, ValueError):  # ValueError: a blocked module (sys.modules["vllm"] = None)
        return False


def _llama_missing() -> str | None:
    try:
        llama_server_binary()
    except LaunchError as exc:
        return str(exc)
    return None


ENGINE_PRESENT = _engine_present()
LLAMA_MISSING = _llama_missing()
IN_CI = bool(os.environ.get("CI"))
SKIP_REASON = f"vLLM engine not installed in {sys.executable} (install: bash scripts/dev.sh setup); set CI=1 to make this a failure"
LLAMA_SKIP_REASON = f"{LLAMA_MISSING}; set CI=1 to make this a failure"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "llama_cpp: end-to-end test against real llama-server processes (built by scripts/dev.sh)")


def pytest_report_header(config: pytest.Config) -> str | None:
    lines = []
    if not ENGINE_PRESENT:
        lines.append(f"e2e: {'FAILING (CI is set)' if IN_CI else 'skipped'} — {SKIP_REASON}")
    if LLAMA_MISSING:
        lines.append(f"e2e llama.cpp: {'FAILING (CI is set)' if IN_CI else 'skipped'} — {LLAMA_SKIP_REASON}")
    return "\n".join(lines) or None


WATCH: MachineWatch | None = None


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """Say why the e2e tests did not run, even without -rs or in quiet mode; what the machine did while they ran."""
    if not ENGINE_PRESENT and not IN_CI and terminalreporter.stats.get("skipped"):
        terminalreporter.write_line(f"e2e tests skipped: {SKIP_REASON}")
    if LLAMA_MISSING and not IN_CI and terminalreporter.stats.get("skipped"):
        terminalreporter.write_line(f"e2e llama.cpp tests skipped: {LLAMA_SKIP_REASON}")
    if WATCH is not None:
        for line in WATCH.report():
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def _machine_watch() -> Iterator[MachineWatch]:
    global WATCH
    WATCH = MachineWatch().start()
    try:
        yield WATCH
    finally:
        WATCH.stop()


@pytest.fixture(autouse=True)
def machine(_machine_watch: MachineWatch, request: pytest.FixtureRequest) -> Iterator[Span]:
    """The machine's pauses and pressure during this test, for failure messages that must say whether it stalled."""
    span = _machine_watch.begin(request.node.nodeid)
    try:
        yield span
    finally:
        _machine_watch.begin("(between tests)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if IN_CI:
        return
    for item in items:
        if "llama_cpp" in item.keywords:
            if LLAMA_MISSING:
                item.add_marker(pytest.mark.skip(reason=LLAMA_SKIP_REASON))
        elif "e2e" in item.keywords and not ENGINE_PRESENT:
            item.add_marker(pytest.mark.skip(reason=SKIP_REASON))


@pytest.fixture(scope="session")
def model_dir() -> Path:
    if not ENGINE_PRESENT:
        pytest.fail(f"CI is set but vLLM cannot be imported: {SKIP_REASON}")
    from qualitycheck.engines._model import prepare

    return prepare()


def _chat_template_variant(model_dir: Path, folder: Path) -> Path:
    """The model's own template with a different default system prompt: a realistic drift."""
    text = (model_dir / "chat_template.jinja").read_text(encoding="utf-8")
    original = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
    assert original in text, "the demo model's chat template changed; update this fixture"
    path = folder / "drifted_chat_template.jinja"
    path.write_text(text.replace(original, "You are a terse assistant. Answer in as few words as possible"), encoding="utf-8")
    return path


TOOL_ARGS = ("--enable-auto-tool-choice", "--tool-call-parser", "hermes")
"""vLLM serves a named or "required" tool_choice only with a tool parser; hermes' envelope is what its
structural tag constrains SmolLM2 to (tests/e2e/test_1b_tool_calls.py)."""


class EnginePool:
    """Named server configurations, started on demand and shared across tests."""

    def __init__(self, model_dir: Path, workdir: Path):
        self.model_dir = model_dir
        self.workdir = workdir
        self.logs = workdir / "logs"
        self.running: dict[str, VllmServer] = {}
        self.start_times: dict[str, float] = {}
        template = _chat_template_variant(model_dir, workdir)
        self.specs: dict[str, dict[str, Any]] = {
            "fp32": {"dtype": "float32", "extra_args": TOOL_ARGS},
            "fp32-ngram": {"dtype": "float32", "speculative_config": ngram_config(), "extra_args": TOOL_ARGS},
            "fp32-replica": {"dtype": "float32", "extra_args": TOOL_ARGS},
            "fp32-draft": {"dtype": "float32", "speculative_config": draft_model_config(model_dir)},
            "fp32-template": {"dtype": "float32", "chat_template": template},
            "bf16": {"dtype": "bfloat16"},
            "bf16-ngram": {"dtype": "bfloat16", "speculative_config": ngram_config()},
            "bf16-control": {"dtype": "bfloat16"},
        }

    def use(self, *names: str) -> dict[str, VllmServer]:
        """Exactly these servers running (at most one per core); start the missing ones together."""
        for name in list(self.running):
            if name not in names:
                self.running.pop(name).stop()
        busy = [s.core for s in self.running.values()]
        free = [c for c in (0, 1) if c not in busy] + [0, 1]  # a third server shares a core
        new = []
        for name in names:
            if name not in self.running:
                core = free.pop(0)
                new.append(name)
                self.running[name] = launch(
                    self.model_dir, served_name=MODEL, name=name, core=core, wait=False, log_dir=self.logs, **self.specs[name]
                )
        for name in new:
            t0 = time.monotonic()
            try:
                self.running[name].wait_ready()
            except BaseException:
                for n in new:
                    self.running.pop(n).stop()
                raise
            self.start_times[name] = self.running[name].ready_after_s or time.monotonic() - t0
        return {n: self.running[n] for n in names}

    def stop_all(self) -> None:
        for name in list(self.running):
            self.running.pop(name).stop()


@pytest.fixture(scope="session")
def engines(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EnginePool]:
    pool = EnginePool(model_dir, tmp_path_factory.mktemp("engines"))
    try:
        yield pool
    finally:
        pool.stop_all()
        if pool.start_times:
            print("\nvLLM server start-up times (s): " + ", ".join(f"{k} {v:.0f}" for k, v in pool.start_times.items()))


@pytest.fixture(scope="session")
def llama_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, LlamaServer]]:
    """llama-server serving the demo model's GGUF: `baseline`, and `draft` with the same GGUF as its draft model (k=3)."""
    if LLAMA_MISSING:
        pytest.fail(f"CI is set but llama-server is missing: {LLAMA_MISSING}")
    from qualitycheck.engines._model import demo_gguf

    gguf = demo_gguf()
    logs = tmp_path_factory.mktemp("llama") / "logs"
    servers = {
        "baseline": launch_llama(gguf, served_name=MODEL, name="baseline", core=0, wait=False, log_dir=logs),
        "draft": launch_llama(gguf, served_name=MODEL, name="draft", core=1, wait=False, log_dir=logs, draft=gguf, draft_max=3),
    }
    start_together(servers.values())
    try:
        yield servers
    finally:
        for s in servers.values():
            s.stop()
