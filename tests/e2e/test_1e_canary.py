"""`qualitycheck canary` watching a real vLLM ngram candidate under open-ended traffic.

Prompt-lookup drafting finds few n-grams to copy in open-ended answers: its
acceptance on this model is far below the seed's 0.55 minimum. The watcher must trip after the configured consecutive windows and
run the fallback once for the route; with a minimum below the measured
acceptance the same candidate must not trip. The load generator is a few
threads sending chat requests for as long as the watcher runs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.e2e_helpers import MODEL
from tests.e2e.machine import Span, cpu_standing

pytestmark = [pytest.mark.e2e, pytest.mark.engines("fp32-ngram")]

PROMPTS = [
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "Describe your ideal weekend in the mountains.",
    "Invent a new holiday and explain how people celebrate it.",
    "Write a poem about the colour of the sea at dawn.",
    "Explain to a child why the sky changes colour at sunset.",
    "Imagine a city built on the back of a giant turtle. Describe a day there.",
]

RECORDER = """\
import json, os, sys
event = json.loads(sys.stdin.read())
env = {k: v for k, v in os.environ.items() if k.startswith("QC_")}
with open(sys.argv[1], "a") as f:
    f.write(json.dumps({"env": env, "event": event}) + "\\n")
"""


@contextmanager
def open_ended_load(base_url: str, workers: int = 2) -> Iterator[dict[str, int]]:
    """Chat requests on open-ended prompts, back to back, until the block ends."""
    stop = threading.Event()
    sent = {"ok": 0, "failed": 0}

    def worker(i: int) -> None:
        n = i
        while not stop.is_set():
            body = {
                "model": MODEL,
                "messages": [{"role": "user", "content": PROMPTS[n % len(PROMPTS)]}],
                "max_tokens": 48,
                "temperature": 0,
            }
            n += workers
            req = urllib.request.Request(base_url + "/v1/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=120) as r:
                    r.read()
                sent["ok"] += 1
            except OSError:
                sent["failed"] += 1

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(workers)]
    for t in threads:
        t.start()
    try:
        yield sent
    finally:
        stop.set()
        for t in threads:
            t.join(150)


def _records(out: Path) -> list[dict[str, Any]]:
    """The watcher's records so far; a last line it is still writing is left for the next look."""
    path = out / "canary.jsonl"
    text = path.read_text() if path.is_file() else ""
    return [json.loads(x) for x in text[: text.rfind("\n") + 1].splitlines()]


def _watch(
    tmp: Path,
    machine: Span,
    metrics_url: str,
    min_acceptance: float,
    until: Any,
    limit_s: float = 600,
    min_drafts: int = 5,
    window: str = "6s",
) -> tuple[int, list[dict[str, Any]], list[Any], str]:
    """Run the watcher until `until(records)` holds (or `limit_s`), stop it with SIGTERM; (exit, records, actions, stderr).

    Out of time while the machine itself stalled during the watch
    (`Span.stalled`: a minute or more in which no task could read the disk
    or get memory, or pytest was not run at all), the test is skipped with
    what the kernel reported: that says nothing of the watcher. Out of time
    on a healthy machine, or a watcher that does not stop when told, fails.
    """
    cfg = tmp / "qualitycheck.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "speculative_decoding_guardrails": {
                    "min_acceptance_rate": min_acceptance,
                    "fallback_action": "disable_speculative_decoding_for_route",
                },
                "canary": {"routes": ["chat"], "evidence": {"min_drafts": min_drafts}},
            }
        )
    )
    script = tmp / "record_action.py"
    script.write_text(RECORDER)
    log = tmp / "actions.jsonl"
    out = tmp / "out"
    # output to files, not pipes: nothing reads a pipe while the watcher runs, and a full one would stop it
    stderr_path = tmp / "watcher.stderr"
    argv = [sys.executable, "-m", "qualitycheck", "canary", "-c", str(cfg), "--candidate-metrics", metrics_url, "--out", str(out)]
    argv += ["--interval", "2s", "--window", window, "--trip-after", "2", "--on-fail", f"{sys.executable} {script} {log}"]
    with open(stderr_path, "w") as stderr_file:
        proc = subprocess.Popen(
            argv, stdout=subprocess.DEVNULL, stderr=stderr_file, env={**os.environ, "NO_COLOR": "1", "PYTHONFAULTHANDLER": "1"}
        )
    budget = Budget(limit_s)
    watched = machine.copy()
    stuck = ""
    out_of_time = False
    try:
        while not budget.spent() and proc.poll() is None and not until(_records(out)):
            budget.sleep(0.5)
        if proc.poll() is None and not until(_records(out)):
            out_of_time = True
            # out of time: what the kernel says of each thread of the watcher and of its children (running,
            # sleeping, stopped; in which call), then SIGABRT, on which faulthandler prints its Python stacks
            stuck = f"out of time after {budget.describe()}: {_stuck(proc.pid)}"
            proc.send_signal(signal.SIGABRT)
            _wait(proc, 10)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            if not _wait(proc, 120):
                stuck += f"\nno exit within 120 s of SIGTERM: {_stuck(proc.pid)}"
                proc.kill()
                if not _wait(proc, 300):
                    stuck += f"\nno exit within 300 s of SIGKILL: {_stuck(proc.pid)}"
    err = stderr_path.read_text()
    during = machine.since(watched)
    if out_of_time and during.stalled():
        pytest.skip(f"the machine stalled while the watcher ran ({during.describe()}); {stuck}"[:3000])
    ran = [json.loads(x) for x in log.read_text().splitlines()] if log.is_file() else []
    return proc.returncode, _records(out), ran, (stuck + "\n" if stuck else "") + err


class Budget:
    """Seconds to wait, charged only while the machine runs, and never more than three times as long by the clock.

    A virtual machine whose host is busy pauses every process at once, and
    the clocks jump on resume. Each step (a sleep and the looks around it)
    is charged what it took, but at most 2 s more than its sleep: a step
    that returns minutes later was stopped, not slow, so the limit measures
    time the machine ran. The pauses are kept for the failure message.
    """

    def __init__(self, limit_s: float) -> None:
        self.limit_s = limit_s
        self.left = limit_s
        self.paused_s = 0.0
        self._began = self._last = time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)
        now = time.monotonic()
        took, self._last = now - self._last, now
        charged = min(took, seconds + 2.0)
        self.paused_s += took - charged
        self.left -= charged

    def spent(self) -> bool:
        return self.left <= 0 or time.monotonic() - self._began >= 3 * self.limit_s

    def describe(self) -> str:
        return f"{self.limit_s - self.left:.0f} s running and {self.paused_s:.0f} s paused"


def _wait(proc: subprocess.Popen[bytes], limit_s: float) -> bool:
    """Whether `proc` exited within `limit_s` of running time (never raises, unlike Popen.wait's timeout)."""
    budget = Budget(limit_s)
    while proc.poll() is None and not budget.spent():
        budget.sleep(0.2)
    return proc.poll() is not None


def _stuck(pid: int) -> str:
    """Each thread of `pid` and of its child processes as `/proc` shows it: state, kernel wait channel, CPU time and wait."""
    lines = _threads(pid)
    return "watcher stuck: " + "; ".join(lines) + f"; {cpu_standing(pid)}" if lines else f"watcher (pid {pid}) gone"


def _threads(pid: int) -> list[str]:
    lines: list[str] = []
    for task in sorted(Path(f"/proc/{pid}/task").glob("*")):
        try:
            stat = (task / "stat").read_text()
            wchan = (task / "wchan").read_text()
            children = (task / "children").read_text().split()
        except OSError:
            continue
        name, rest = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :].split()
        try:  # time on a CPU, and time runnable but waiting for one: a starved thread waits, a stuck one runs or sleeps
            ran_ns, waited_ns = (int(x) for x in (task / "schedstat").read_text().split()[:2])
            cpu = f"on a CPU {ran_ns / 1e9:.1f} s, runnable but waiting for a CPU {waited_ns / 1e9:.1f} s"
        except (OSError, ValueError):  # a kernel without schedstat
            cpu = f"utime {rest[11]} stime {rest[12]} ticks"
        lines.append(f"pid {pid} thread {task.name} ({name}): state {rest[0]}, waiting in {wchan or '-'}, {cpu}")
        for child in children:
            lines += _threads(int(child))
    return lines


def test_ngram_candidate_on_open_ended_traffic_trips_after_the_configured_windows_and_acts_once(
    engines: Any, tmp_path: Path, machine: Span
) -> None:
    cand = engines.use("fp32-ngram")["fp32-ngram"]

    def tripped_and_two_more(recs: list[dict[str, Any]]) -> bool:
        first = next((i for i, r in enumerate(recs) if r["tripped_now"]), None)
        return first is not None and len(recs) >= first + 3

    with open_ended_load(cand.url) as sent:
        code, recs, ran, err = _watch(tmp_path, machine, cand.url + "/metrics", 0.55, tripped_and_two_more)
    trip = next((i for i, r in enumerate(recs) if r["tripped_now"]), None)
    seen = [(g["result"]["observed"], g["evidence"], g["streak"]) for r in recs for g in r["guardrails"]]
    assert trip is not None, f"no trip; windows (acceptance, evidence, streak): {seen}; sent {sent}\n{err[-3000:]}\n{machine.describe()}"
    failing = [r["guardrails"][0] for r in recs[: trip + 1] if r["guardrails"][0]["result"]["passed"] is False]
    assert [g["streak"] for g in failing][-2:] == [1, 2], seen
    assert recs[trip]["tripped_now"] == ["chat"] and recs[trip]["status"] == "tripped"
    assert all(r["status"] == "tripped" and not r["tripped_now"] for r in recs[trip + 1 :])  # hysteresis
    assert len(ran) == 1, ran  # once, however many windows fail after the trip
    env = ran[0]["env"]
    assert env["QC_ROUTE"] == "chat" and env["QC_GUARDRAIL"] == "min_acceptance_rate"
    assert env["QC_ACTION"] == "disable_speculative_decoding_for_route" and float(env["QC_THRESHOLD"]) == 0.55
    assert float(env["QC_OBSERVED"]) < 0.55 and ran[0]["event"]["route"] == "chat"
    assert code == 1, err[-3000:] + "\n" + machine.describe()  # stopped while tripped
    assert sent["ok"] > 0


def test_the_same_candidate_with_a_minimum_below_its_acceptance_does_not_trip(engines: Any, tmp_path: Path, machine: Span) -> None:
    cand = engines.use("fp32-ngram")["fp32-ngram"]

    def four_evaluated(recs: list[dict[str, Any]]) -> bool:
        return sum(1 for r in recs if r["guardrails"] and r["guardrails"][0]["result"]["passed"] is not None) >= 4

    with open_ended_load(cand.url):
        # a window of a few seconds holds a few dozen drafts, so its acceptance scatters around the
        # mean: a longer window with more drafts, and a minimum well below what the drafter achieves
        code, recs, ran, err = _watch(tmp_path, machine, cand.url + "/metrics", 0.01, four_evaluated, min_drafts=60, window="20s")
    seen = [(g["result"]["observed"], g["evidence"]) for r in recs for g in r["guardrails"]]
    evaluated = [r for r in recs if r["guardrails"][0]["result"]["passed"] is not None]
    assert len(evaluated) >= 4, f"windows (acceptance, evidence): {seen}\n{err[-3000:]}\n{machine.describe()}"
    assert all(r["guardrails"][0]["result"]["passed"] is True for r in evaluated), seen
    assert not any(r["tripped_now"] for r in recs) and ran == []
    assert code == 0, err[-3000:] + "\n" + machine.describe()
