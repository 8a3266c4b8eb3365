"""An in-process shadow proxy (or sink) with two scripted test servers, on a loop of its own."""

from __future__ import annotations

import asyncio
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from qualitycheck.core._config import RunOptions, ShadowOptions, Target
from qualitycheck.core._config_file import Config
from qualitycheck.shadow._handoff import LocalHandoff
from qualitycheck.shadow._mirror import MirrorSide
from qualitycheck.shadow._proxy import ShadowProxy
from qualitycheck.shadow._recorder import Recorder
from qualitycheck.shadow._settings import ShadowSettings
from qualitycheck.shadow._sink import ShadowSink
from qualitycheck.shadow._tally import ShadowDrain, ShadowMetrics
from qualitycheck.testserver import TestServer
from qualitycheck.traffic._rules import Rules


def shadow_config(baseline: str, candidate: str, **shadow: Any) -> Config:
    run = shadow.pop("run", {})
    candidate_target = shadow.pop("candidate_target", {})
    return Config(
        baseline=Target(url=baseline, model="test-model"),
        candidate=Target(url=candidate, model="test-model", **candidate_target),
        run=RunOptions(**{"timeout_s": 5.0, **run}),
        shadow=ShadowOptions(**{"sample": 1.0, "scrape_every_s": 0, **shadow}),
    )


class Proxy:
    """`start()` opens the folder and listens; `stop()` drains and closes it, as SIGTERM does."""

    def __init__(self, cfg: Config, out: Path, rules: Rules | None = None, noise_floor: bool = True):
        self.settings = ShadowSettings.of_config(cfg).model_copy(update={"noise_floor": noise_floor})
        self.out = out
        self.logs: list[str] = []
        self.metrics = ShadowMetrics()
        self.recorder = Recorder(
            self.settings.shadow,
            self.settings.folder,
            out,
            rules or Rules(),
            replica=secrets.token_hex(4),
            listen="test",
            metrics=self.metrics,
            log=self.logs.append,
            noise_floor=noise_floor,
        )
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.proxy: ShadowProxy | None = None
        self.side: MirrorSide | None = None
        self.url = ""

    def _call(self, coro: Any, timeout: float = 60) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def start(self) -> str:
        self.recorder.open()
        self.thread.start()

        async def go() -> str:
            settings = self.settings
            self.side = MirrorSide(settings, self.recorder, self.metrics, log=self.logs.append, ask_baseline=settings.shadow.sink)
            kind = ShadowSink if settings.shadow.sink else ShadowProxy
            self.proxy = kind(
                settings, LocalHandoff(self.side), host="127.0.0.1", port=0, replica=self.recorder.replica, log=self.logs.append
            )
            return await self.proxy.start()

        self.url = self._call(go())
        return self.url

    def stop(self) -> ShadowDrain:
        assert self.proxy is not None and self.side is not None
        proxy, side = self.proxy, self.side

        async def go() -> ShadowDrain:
            drain = await proxy.drain()
            assert drain is not None
            await asyncio.to_thread(self.recorder.close, side.period, drain)
            return drain

        try:
            return self._call(go())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
            if not self.thread.is_alive():  # a loop left open fails in its __del__ whenever a later collection finds it
                self.loop.close()

    def counter(self, name: str, **labels: str) -> float:
        value = self.metrics.registry.get_sample_value(name, labels or None)
        return float(value or 0.0)

    def wait_for(self, cond: Callable[[], bool], what: str, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while not cond():
            if time.monotonic() > deadline:
                raise AssertionError(f"gave up waiting for {what}")
            time.sleep(0.01)

    def settled(self) -> None:
        """Every mirrored pair is stored or given up (nothing in flight, nothing queued for the store)."""
        self.wait_for(lambda: self.metrics.inflight._value.get() == 0 and self.recorder.backlog() == 0, "pairs to settle")


@pytest.fixture
def servers() -> Iterator[tuple[TestServer, TestServer]]:
    with TestServer(default="one two three four five") as base, TestServer(default="one two three four five") as cand:
        yield base, cand


@pytest.fixture
def proxy_for(tmp_path: Path) -> Iterator[Callable[..., Proxy]]:
    started: list[Proxy] = []

    def make(cfg: Config, out: Path | None = None, **kw: Any) -> Proxy:
        p = Proxy(cfg, out or tmp_path / "shadow", **kw)
        p.start()
        started.append(p)
        return p

    yield make
    for p in started:
        if p.thread.is_alive():
            p.stop()
