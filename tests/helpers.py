"""Builders shared by the tests: suites on disk (import as `tests.helpers`)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


def in_thread(fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)` in a thread of its own, its result or exception handed back.

    For the runs the browser tests load: the session's browser (tests/unit/conftest.py) keeps an event loop
    running in the main thread, where `asyncio.run` (the CLI's `run`) then fails.
    """
    out: dict[str, Any] = {}

    def call() -> None:
        try:
            out["value"] = fn(*args)
        except BaseException as exc:
            out["error"] = exc

    t = threading.Thread(target=call, name=f"in_thread:{getattr(fn, '__name__', fn)}")
    t.start()
    t.join()
    if "error" in out:
        raise out["error"]
    return out["value"]


def write_suite(path: Path, cases: list[dict[str, Any]]) -> Path:
    """Write cases as JSONL (or YAML when the name ends in .yaml)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix in (".yaml", ".yml"):
        import yaml

        path.write_text(yaml.safe_dump(cases, sort_keys=False), encoding="utf-8")
    else:
        path.write_text("".join(json.dumps(c) + "\n" for c in cases), encoding="utf-8")
    return path


def run_argv(
    baseline: str, candidate: str, suite: Path, out: Path, *extra: str, model: str = "test-model", preflight: bool = False
) -> list[str]:
    """`qualitycheck run` arguments for two server URLs (preflight off unless asked: most tests script no /tokenize drift)."""
    argv = ["run", "--baseline", baseline, "--candidate", candidate, "--model", model, "--suite", str(suite), "--out", str(out)]
    return [*argv, *([] if preflight else ["--no-preflight"]), *extra]


def qa_cases(n: int, category: str = "qa", **extra: Any) -> list[dict[str, Any]]:
    return [
        {"id": f"{category}-{i}", "category": category, "messages": [{"role": "user", "content": f"question {category} {i}?"}], **extra}
        for i in range(n)
    ]


@contextmanager
def raw_chat_server(handler: Callable[[Any], Awaitable[Any]]) -> Iterator[str]:
    """A bare aiohttp server on loopback whose /v1/chat/completions is `handler`.

    For bytes the scripted TestServer will not send (odd streams, echoed
    secrets); yields the base URL and stops the server on exit.
    """
    with raw_server(handler, method="POST", path="/v1/chat/completions") as url:
        yield url


@contextmanager
def raw_server(handler: Callable[[Any], Awaitable[Any]], method: str = "*", path: str = "/{tail:.*}") -> Iterator[str]:
    """A bare aiohttp server on loopback answering `method` `path` (by default every request) with `handler`."""
    from aiohttp import web

    ready = threading.Event()
    state: dict[str, Any] = {}

    def run() -> None:
        loop = asyncio.new_event_loop()
        app = web.Application()
        app.router.add_route(method, path, handler)
        runner = web.AppRunner(app, access_log=None)
        loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        loop.run_until_complete(site.start())
        state["port"] = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        state["loop"] = loop
        ready.set()
        loop.run_forever()
        loop.run_until_complete(runner.cleanup())

    t = threading.Thread(target=run, daemon=True)
    t.start()
    ready.wait(10)
    try:
        yield f"http://127.0.0.1:{state['port']}"
    finally:
        state["loop"].call_soon_threadsafe(state["loop"].stop)
        t.join(5)


P_TOLERANCE = 1e-12
"""p-values of two versions agree to this (absolute): one exact test computed another way differs in the last bits only."""


def json_diff(expected: Any, got: Any, path: str = "") -> list[str]:
    """Where two JSON values differ, one line each: exactly (types included), except p-values (keys starting with
    p_value) within `P_TOLERANCE`. For goldens and recordings of summary.json."""
    if isinstance(expected, dict) and isinstance(got, dict):
        out = [f"{path}.{k}: missing" for k in expected if k not in got]
        out += [f"{path}.{k}: added" for k in got if k not in expected]
        for k in expected.keys() & got.keys():
            out += json_diff(expected[k], got[k], f"{path}.{k}")
        return out
    if isinstance(expected, list) and isinstance(got, list):
        if len(expected) != len(got):
            return [f"{path}: {len(expected)} items, now {len(got)}"]
        return [d for i, (a, b) in enumerate(zip(expected, got, strict=True)) for d in json_diff(a, b, f"{path}[{i}]")]
    if path.rsplit(".", 1)[-1].startswith("p_value") and isinstance(expected, float) and isinstance(got, float):
        return [] if abs(expected - got) <= P_TOLERANCE else [f"{path}: {expected!r} → {got!r}"]
    if expected == got and type(expected) is type(got):
        return []
    return [f"{path}: {str(expected)[:160]!r} → {str(got)[:160]!r}"]


def need_extra(module: str, extra: str) -> Any:
    """Import an optional extra's module for a test: skipped without it, but a failure in CI (env CI set), as the e2e tests do."""
    import importlib
    import os

    import pytest

    try:
        return importlib.import_module(module)
    except ImportError:
        message = f"{module} is not installed (pip install 'qualitycheck[{extra}]', or scripts/dev.sh setup)"
        if os.environ.get("CI"):
            pytest.fail(f"{message}; CI is set, so a missing extra is a failure")
        pytest.skip(message)


def answer_statuses(case: Any, answers: dict[str, str]) -> dict[str, dict[str, str]]:
    """answer text → check → status, each answer scored alone as the candidate against no baseline."""
    from qualitycheck.core._records import Response
    from qualitycheck.scoring import score_case

    out: dict[str, dict[str, str]] = {}
    for text in answers:
        r = Response(case_id=case.id, target="candidate", repeat=0, fingerprint="f", text=text)
        out[text] = {s.check: s.status for s in score_case(case, [r])}
    return out
