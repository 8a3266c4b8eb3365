"""The e2e engine pool (tests/e2e/pool.py) with the session's schedule in view, on fake servers: no vLLM needed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.e2e import pool as e2e_pool
from tests.e2e.pool import MAX_SERVERS, EnginePool, Schedule

ORIGINAL = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


class FakeServer:
    """What the pool uses of a VllmServer: started on a core, ready (or dying), stopped."""

    def __init__(self, name: str, core: int, log: list[tuple[str, str]], fail: bool = False):
        self.name, self.core, self.log, self.fail = name, core, log, fail
        self.ready_after_s = 1.0
        log.append(("start", name))

    def wait_ready(self) -> FakeServer:
        if self.fail:
            raise RuntimeError(f"{self.name} died")
        return self

    def stop(self) -> None:
        self.log.append(("stop", self.name))


class Item:
    """What the schedule reads of a pytest item: its id and its markers."""

    def __init__(self, nodeid: str, engines: tuple[str, ...] | None, skip: bool = False):
        self.nodeid = nodeid
        self.marks = {"engines": pytest.mark.engines(*engines).mark} if engines is not None else {}
        if skip:
            self.marks["skip"] = pytest.mark.skip.mark

    def get_closest_marker(self, name: str) -> Any:
        return self.marks.get(name)


def make_pool(tmp_path: Path, items: list[Item], fail: frozenset[str] = frozenset()) -> tuple[EnginePool, Schedule, list[tuple[str, str]]]:
    model = tmp_path / "model"
    model.mkdir()
    (model / "chat_template.jinja").write_text(f"{{{{ '{ORIGINAL}' }}}}")
    log: list[tuple[str, str]] = []

    def launcher(model_dir: Path, *, name: str, core: int, wait: bool, **_: Any) -> FakeServer:
        assert wait is False, "the pool waits itself, only for what the test needs"
        return FakeServer(name, core, log, fail=name in fail)

    schedule = Schedule(items)  # type: ignore[arg-type]
    return EnginePool(model, tmp_path, schedule, launcher=launcher), schedule, log  # type: ignore[arg-type]


SESSION = [
    Item("t1", ("fp32", "fp32-ngram")),
    Item("sink", ("fp32", "fp32-ngram", "fp32-replica")),
    Item("sampled", ("fp32", "fp32-ngram")),
    Item("canary", ("fp32-ngram",)),
    Item("suffix", ("fp32", "fp32-suffix")),
    Item("draft", ("fp32", "fp32-draft")),
    Item("template", ("fp32", "fp32-template")),
    Item("bf16", ("bf16", "bf16-ngram", "bf16-control")),
    Item("demo", ()),
    Item("llama", None),
]


def run_session(tmp_path: Path, items: list[Item]) -> tuple[EnginePool, list[tuple[str, str]], list[int]]:
    pool, schedule, log = make_pool(tmp_path, items)
    running: list[int] = []
    for item in items:
        schedule.enter(item)  # type: ignore[arg-type]
        marker = item.get_closest_marker("engines")
        if marker is None or item.get_closest_marker("skip") is not None:
            continue
        got = pool.use(*marker.args)
        assert set(got) == set(marker.args)
        running.append(len(pool.running))
    pool.stop_all()
    return pool, log, running


def test_each_configuration_starts_once_and_stops_when_no_later_test_needs_it(tmp_path: Path) -> None:
    _, log, running = run_session(tmp_path, SESSION)
    starts = [name for what, name in log if what == "start"]
    assert sorted(starts) == sorted(set(starts)), f"a configuration started twice: {starts}"
    assert max(running) <= MAX_SERVERS
    # fp32 serves every test from t1 to template and is stopped before bf16 starts its three
    assert log.index(("stop", "fp32")) < log.index(("start", "bf16-ngram"))
    assert log.index(("stop", "fp32-replica")) < log.index(("start", "fp32-draft")), "the replica went once the sink test was done"
    stops = [name for what, name in log if what == "stop"]
    assert sorted(stops) == sorted(starts), "everything started is stopped"


def test_the_next_tests_server_starts_beside_the_ones_a_test_waits_for(tmp_path: Path) -> None:
    pool, schedule, _ = make_pool(tmp_path, SESSION)
    schedule.enter(SESSION[0])  # type: ignore[arg-type]
    pool.use("fp32", "fp32-ngram")
    assert set(pool.running) == {"fp32", "fp32-ngram", "fp32-replica"}, "the sink's replica starts with the first pair"
    schedule.enter(SESSION[4])  # type: ignore[arg-type]
    pool.use("fp32", "fp32-suffix")
    assert set(pool.running) == {"fp32", "fp32-suffix", "fp32-draft"}, "the ngram server is done; the draft test's server starts"


def test_a_server_started_early_goes_on_the_core_its_partner_does_not_use(tmp_path: Path) -> None:
    pool, schedule, _ = make_pool(tmp_path, SESSION)
    schedule.enter(SESSION[4])  # type: ignore[arg-type]
    pool.use("fp32", "fp32-suffix")
    cores = {name: s.core for name, s in pool.running.items()}
    assert cores["fp32"] != cores["fp32-suffix"] and cores["fp32-draft"] != cores["fp32"], cores


def test_a_skipped_test_starts_nothing(tmp_path: Path) -> None:
    items = [Item("t1", ("fp32",)), Item("suffix", ("fp32", "fp32-suffix"), skip=True), Item("draft", ("fp32", "fp32-draft"))]
    _, log, _ = run_session(tmp_path, items)
    assert ("start", "fp32-suffix") not in log


def test_a_server_a_test_did_not_declare_is_refused(tmp_path: Path) -> None:
    pool, schedule, log = make_pool(tmp_path, SESSION)
    schedule.enter(SESSION[3])  # type: ignore[arg-type]
    with pytest.raises(pytest.UsageError, match=r"declare every server .* pytest.mark.engines"):
        pool.use("fp32-ngram", "fp32-draft")
    assert log == []


def test_a_server_that_does_not_come_up_is_stopped_and_the_test_told(tmp_path: Path) -> None:
    pool, schedule, log = make_pool(tmp_path, SESSION, fail=frozenset({"fp32-ngram"}))
    schedule.enter(SESSION[0])  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="fp32-ngram died"):
        pool.use("fp32", "fp32-ngram")
    assert ("stop", "fp32") in log and ("stop", "fp32-ngram") in log and "fp32" not in pool.running


def test_the_cap_holds_when_a_test_needs_all_of_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(e2e_pool, "MAX_SERVERS", 2)
    items = [Item("a", ("fp32", "fp32-ngram")), Item("b", ("fp32", "fp32-draft")), Item("c", ("fp32", "fp32-ngram"))]
    pool, schedule, log = make_pool(tmp_path, items)
    for item in items:
        schedule.enter(item)  # type: ignore[arg-type]
        pool.use(*item.get_closest_marker("engines").args)
        assert len(pool.running) <= 2
    assert log.count(("start", "fp32-ngram")) == 2, "over the cap, the server needed furthest ahead made room"
