"""End-to-end fixtures: real vLLM servers serving the real demo model.

Servers are started by one `EnginePool` per session (tests/e2e/pool.py) and
shared by every test that needs the same configuration: each module declares
the servers its tests use (`pytest.mark.engines(...)`), and with the
session's order of tests in view the pool stops a server only once no later
test needs it and starts the next tests' servers early. Modules are numbered
so that tests on the same servers run together: the fp32 pair (test_1*), the
fp32 baseline beside its other candidates (test_2*, test_3*), bf16 (test_4*),
then the tests with servers of their own (the demo, llama.cpp).
docs/TESTING.md lists what each file shows and what it costs.

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

from qualitycheck.engines._launcher import LaunchError, LlamaServer, launch_llama, llama_server_binary, start_together
from tests.e2e.e2e_helpers import MODEL
from tests.e2e.machine import FileCosts, MachineWatch, Span, tree_cpu_s
from tests.e2e.pool import SCHEDULE, EnginePool, Schedule


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
COSTS = FileCosts()


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """Say why the e2e tests did not run, even without -rs or in quiet mode; what the machine did while they ran."""
    if not ENGINE_PRESENT and not IN_CI and terminalreporter.stats.get("skipped"):
        terminalreporter.write_line(f"e2e tests skipped: {SKIP_REASON}")
    if LLAMA_MISSING and not IN_CI and terminalreporter.stats.get("skipped"):
        terminalreporter.write_line(f"e2e llama.cpp tests skipped: {LLAMA_SKIP_REASON}")
    if WATCH is not None:
        for line in WATCH.report():
            terminalreporter.write_line(line)
    for line in COSTS.report():
        terminalreporter.write_line(line)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Each e2e test's wall and CPU time, setup and teardown included (where its servers start and stop)."""
    if item.get_closest_marker("e2e") is None:
        yield
        return
    wall, cpu = time.monotonic(), tree_cpu_s()
    yield
    COSTS.add(item.nodeid, time.monotonic() - wall, tree_cpu_s() - cpu)


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


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test here is an e2e test (the README's tiers select them by marker); without an engine outside CI, skipped."""
    here = Path(__file__).parent
    for item in items:
        if item.path.is_relative_to(here):
            item.add_marker(pytest.mark.e2e)
    if IN_CI:
        return
    for item in items:
        if "llama_cpp" in item.keywords:
            if LLAMA_MISSING:
                item.add_marker(pytest.mark.skip(reason=LLAMA_SKIP_REASON))
        elif "e2e" in item.keywords and not ENGINE_PRESENT:
            item.add_marker(pytest.mark.skip(reason=SKIP_REASON))


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """The session's schedule, once every selection (-m, -k, deselection) and skip is known."""
    session.config.stash[SCHEDULE] = Schedule(session.items)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    schedule = item.config.stash.get(SCHEDULE, None)
    if schedule is not None:
        schedule.enter(item)


@pytest.fixture(scope="session")
def model_dir() -> Path:
    if not ENGINE_PRESENT:
        pytest.fail(f"CI is set but vLLM cannot be imported: {SKIP_REASON}")
    from qualitycheck.engines._model import prepare

    return prepare()


@pytest.fixture(scope="session")
def engines(model_dir: Path, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[EnginePool]:
    pool = EnginePool(model_dir, tmp_path_factory.mktemp("engines"), request.config.stash.get(SCHEDULE, None))
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
