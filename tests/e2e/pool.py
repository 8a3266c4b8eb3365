"""The session's vLLM servers: named configurations, started on demand and shared by the tests that declare them.

Every server costs ~40-70 s to start (three Python processes, each importing torch and vLLM) and ~2 GB of memory,
and the machine has 2 cores. Each e2e test module declares the servers its tests use (`pytest.mark.engines(...)`);
`Schedule` holds those declarations in the session's order of tests, and `EnginePool.use` reads it: a server is
stopped once no later test needs it, and the next tests' servers start beside the ones a test waits for, up to
`MAX_SERVERS` at once, each on the core its partners in later tests do not use. A start-up then overlaps the tests
before it instead of adding to them, and no configuration starts twice in a session ordered as tests/e2e is.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from qualitycheck.engines._launcher import VllmServer, draft_model_config, launch, ngram_config, suffix_config
from tests.e2e.e2e_helpers import MODEL

MAX_SERVERS = 3
"""Pool servers running at once: what a test needs (at most three: the sink's and the bf16 test's) plus the next
tests' servers starting early. Memory sets it, not cores: ~2 GB per server, on a machine shared with other work."""

CORES = (0, 1)
"""The cores servers are pinned to, one thread each (the reference machine has two)."""

SCHEDULE = pytest.StashKey["Schedule"]()

TOOL_ARGS = ("--enable-auto-tool-choice", "--tool-call-parser", "hermes")
"""vLLM serves a named or "required" tool_choice only with a tool parser; hermes' envelope is what its
structural tag constrains SmolLM2 to (tests/e2e/test_1b_tool_calls.py)."""


class Schedule:
    """The servers each test of the session declares (`pytest.mark.engines`), in the order the tests run."""

    def __init__(self, items: Sequence[pytest.Item]):
        self.needs: list[tuple[str, frozenset[str]]] = []
        for item in items:
            marker = item.get_closest_marker("engines")
            if marker is not None and item.get_closest_marker("skip") is None:
                self.needs.append((item.nodeid, frozenset(marker.args)))
        self.position = -1
        self.current: pytest.Item | None = None

    def enter(self, item: pytest.Item) -> None:
        """`item` is about to run (its fixtures, and the module fixtures it is the first to need, set up now)."""
        self.current = item
        self.position = next((i for i, (nodeid, _) in enumerate(self.needs) if nodeid == item.nodeid), self.position)

    def declared(self) -> frozenset[str] | None:
        marker = self.current.get_closest_marker("engines") if self.current is not None else None
        return frozenset(marker.args) if marker is not None else None

    def later(self) -> list[frozenset[str]]:
        """What the tests after the current one need, in order."""
        return [names for _, names in self.needs[self.position + 1 :]]


def _chat_template_variant(model_dir: Path, folder: Path) -> Path:
    """The model's own template with a different default system prompt: a realistic drift."""
    text = (model_dir / "chat_template.jinja").read_text(encoding="utf-8")
    original = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
    assert original in text, "the demo model's chat template changed; update this fixture"
    path = folder / "drifted_chat_template.jinja"
    path.write_text(text.replace(original, "You are a terse assistant. Answer in as few words as possible"), encoding="utf-8")
    return path


class EnginePool:
    """Named server configurations, started on demand and shared across tests (see the module's docstring)."""

    def __init__(
        self, model_dir: Path, workdir: Path, schedule: Schedule | None = None, launcher: Callable[..., VllmServer] = launch
    ) -> None:
        self.launcher = launcher
        self.model_dir = model_dir
        self.workdir = workdir
        self.logs = workdir / "logs"
        self.schedule = schedule
        self.running: dict[str, VllmServer] = {}
        self.start_times: dict[str, float] = {}
        template = _chat_template_variant(model_dir, workdir)
        self.specs: dict[str, dict[str, Any]] = {
            "fp32": {"dtype": "float32", "extra_args": TOOL_ARGS},
            "fp32-ngram": {"dtype": "float32", "speculative_config": ngram_config(), "extra_args": TOOL_ARGS},
            "fp32-replica": {"dtype": "float32", "extra_args": TOOL_ARGS},
            "fp32-suffix": {"dtype": "float32", "speculative_config": suffix_config()},
            "fp32-draft": {"dtype": "float32", "speculative_config": draft_model_config(model_dir)},
            "fp32-template": {"dtype": "float32", "chat_template": template},
            "bf16": {"dtype": "bfloat16"},
            "bf16-ngram": {"dtype": "bfloat16", "speculative_config": ngram_config()},
            "bf16-control": {"dtype": "bfloat16"},
        }

    def use(self, *names: str) -> dict[str, VllmServer]:
        """Exactly these servers ready for the current test; what no later test needs is stopped, what the next ones
        need starts beside them (up to MAX_SERVERS)."""
        declared = self.schedule.declared() if self.schedule is not None else None
        if self.schedule is not None and (declared is None or not set(names) <= declared):
            raise pytest.UsageError(
                f"{self.schedule.current.nodeid if self.schedule.current else 'this test'} asks for {sorted(names)}: declare every server "
                f"it uses in its module's pytest.mark.engines(...) (declared: {sorted(declared or ())}), so the pool keeps them for it"
            )
        later = self.schedule.later() if self.schedule is not None else []

        def next_use(name: str) -> int:
            return next((i for i, need in enumerate(later) if name in need), len(later))

        for name in list(self.running):  # no later test needs it
            if name not in names and next_use(name) == len(later):
                self._stop(name)
        missing = [n for n in names if n not in self.running]
        while len(self.running) + len(missing) > MAX_SERVERS:  # over the cap: the one needed furthest ahead goes
            spare = max((n for n in self.running if n not in names), key=next_use)
            self._stop(spare)
        ahead = list(dict.fromkeys(n for need in later for n in sorted(need) if n not in self.running and n not in names))
        ahead = ahead[: max(0, MAX_SERVERS - len(self.running) - len(missing))]
        for name in missing + ahead:
            partners = next((need for need in ([frozenset(names)] if name in names else []) + later if name in need), frozenset())
            self.running[name] = self.launcher(
                self.model_dir,
                served_name=MODEL,
                name=name,
                core=self._core_for(partners - {name}),
                wait=False,
                log_dir=self.logs,
                **self.specs[name],
            )
        for name in names:
            t0 = time.monotonic()
            try:
                self.running[name].wait_ready()
            except BaseException:
                for n in missing:
                    if n in self.running:
                        self._stop(n)
                raise
            self.start_times.setdefault(name, self.running[name].ready_after_s or time.monotonic() - t0)
        return {n: self.running[n] for n in names}

    def _core_for(self, partners: frozenset[str]) -> int:
        """A core none of the servers it will serve beside runs on, else the one with fewer servers: each server has one thread."""
        taken = {self.running[p].core for p in partners if p in self.running}
        load = {c: sum(1 for s in self.running.values() if s.core == c) for c in CORES}
        return min(CORES, key=lambda c: (c in taken, load[c], c))

    def _stop(self, name: str) -> None:
        self.running.pop(name).stop()

    def stop_all(self) -> None:
        for name in list(self.running):
            self._stop(name)
