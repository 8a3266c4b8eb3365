"""Benchmark figures for production traffic: `qualitycheck replay` over a generated request log.

The log is request/response JSONL of about 1 KB a line, built from real
public prompts (Spec-Bench, Spider, MBPP under ../shared/data; the committed
replay fixtures when that folder is absent) with a unique reference in each
line so that no line is a duplicate, planted PII in one line out of ten, and
the mix of request kinds a chat application sends (system prompts, tools,
JSON schemas, greedy and sampled requests, logged answers of every length).
The figure is the whole `qualitycheck replay` process, start-up included,
with redaction on and `--sample`, on every core the machine has.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import _procs

ROOT = Path(__file__).resolve().parents[1]
DATA = Path("/work/shared/data")
FIXTURES = ROOT / "tests" / "fixtures" / "replay"

Figure = Callable[..., None]

PII = [
    "write to {name}.{n}@example.org",
    "call me on +44 20 7946 {n4}",
    "card 4111 1111 1111 1111, exp 12/29",
    "IBAN DE89 3704 0044 0532 0130 00",
    "from 10.{a}.{b}.7 and 2001:db8::{n4}",
    "Authorization: Bearer tok{n}abcdefghijklmnopqrstuv",
]


def _prompts() -> list[str]:
    out: list[str] = []
    if (DATA / "specbench" / "question.jsonl").is_file():
        for line in (DATA / "specbench" / "question.jsonl").read_text(encoding="utf-8").splitlines():
            out += json.loads(line)["turns"]
        for line in (DATA / "spider" / "spider_dev_sample.jsonl").read_text(encoding="utf-8").splitlines():
            out.append(json.loads(line)["question"])
        for line in (DATA / "mbpp" / "sanitized-mbpp.jsonl").read_text(encoding="utf-8").splitlines():
            out.append(json.loads(line)["prompt"])
    else:
        for line in (FIXTURES / "requests.jsonl").read_text(encoding="utf-8").splitlines():
            try:
                body = json.loads(line)["request"]
            except (ValueError, KeyError, TypeError):
                continue
            out += [m["content"] for m in body.get("messages", []) if isinstance(m.get("content"), str)]
    return [p for p in out if p.strip()]


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup_order",
            "description": "Find an order by its id",
            "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]},
        },
    }
]
SCHEMA = {
    "type": "json_schema",
    "json_schema": {"name": "answer", "schema": {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}},
}


def _templates(n: int, seed: int = 7) -> list[str]:
    """`n` request/response lines of about 1 KB, each with a `@@REF@@` slot made unique per written line."""
    rng = random.Random(seed)
    prompts = _prompts()
    out = []
    for i in range(n):
        text = rng.choice(prompts)
        while len(text) < 650:
            text += "\n\n" + rng.choice(prompts)
        text = text[:600] + " (ref @@REF@@)"
        if i % 10 == 0:
            text += " " + rng.choice(PII).format(name="jane", n=i, n4=f"{i % 10000:04d}", a=i % 250, b=(i // 250) % 250)
        messages: list[dict[str, Any]] = [{"role": "user", "content": text}]
        if i % 3 == 0:
            messages.insert(0, {"role": "system", "content": "You are the support assistant of an online shop. Answer briefly."})
        body: dict[str, Any] = {"model": "shop-assistant", "messages": messages, "max_tokens": rng.choice([64, 256, 512])}
        kind = i % 10
        if kind < 4:
            body["temperature"] = 0
        elif kind < 6:
            body["temperature"] = 0.7
        if kind == 6:
            body["tools"] = TOOLS
        elif kind == 7:
            body["response_format"] = SCHEMA
        answer = rng.choice(prompts)[: rng.choice([40, 150, 400])]
        response = {
            "choices": [{"index": 0, "message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": len(text) // 4, "completion_tokens": rng.choice([20, 120, 600, 1500])},
        }
        out.append(json.dumps({"request": body, "response": response, "tags": {"route": rng.choice(["support", "orders", "faq"])}}))
    return out


def _ref(i: int) -> str:
    """A unique reference of letters only (digits would feed the number scans more than real prompts do)."""
    s = ""
    while True:
        i, r = divmod(i, 26)
        s += chr(97 + r)
        if not i:
            return s


def write_log(path: Path, lines: int) -> int:
    """Write the log; returns its size in bytes."""
    templates = _templates(5000)
    with path.open("w", encoding="utf-8") as f:
        for i in range(lines):
            f.write(templates[i % len(templates)].replace("@@REF@@", _ref(i)) + "\n")
    return path.stat().st_size


def _tree_memory_mb(pid: int) -> tuple[float, float]:
    """(proportional set size of a process and its children, shared pages counted once; the largest
    high-water RSS among them), in MB."""
    pss = hwm = 0
    pids = [pid]
    try:
        pids += [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        pass
    for p in pids:
        try:
            for line in Path(f"/proc/{p}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    pss += int(line.split()[1])
                    break
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    hwm = max(hwm, int(line.split()[1]))
                    break
        except OSError:
            pass
    return pss / 1024, hwm / 1024


def _run_measured(cmd: list[str]) -> tuple[float, float, float, float, int, str]:
    """(wall s, CPU s of the process tree, peak PSS of the process tree MB, peak RSS of the largest process MB, exit code, stderr tail)."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = _procs.popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT, text=True)
    peak = 0.0
    largest = 0.0
    while proc.poll() is None:
        pss, hwm = _tree_memory_mb(proc.pid)
        peak, largest = max(peak, pss), max(largest, hwm)
        time.sleep(0.05)
    wall = time.perf_counter() - t0
    _, err = proc.communicate()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the workers are reaped by the replay process: counted here too
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return wall, cpu, peak, largest, proc.returncode, err[-400:]


def replay_rate(figure: Figure, skipped: Callable[[str, str], None], tmp: Path, quick: bool) -> None:
    """`replay_lines_per_s` and `replay_peak_rss_mb` for a 1,000,000-line log (200,000 in quick mode)."""
    lines = 200_000 if quick else 1_000_000
    log = tmp / "traffic.jsonl"
    t0 = time.perf_counter()
    size = write_log(log, lines)
    gen_s = time.perf_counter() - t0
    with log.open("rb") as f:  # the machine's state: one of these lines parsed, a fixed single-core cost
        sample_line = f.readline()
    calib = min(timeit.repeat(lambda: json.loads(sample_line), number=2000, repeat=5)) / 2000 * 1e6
    out = tmp / "replayed"
    cmd = [sys.executable, "-m", "qualitycheck", "replay", str(log), "--out", str(out), "--sample", "5000", "--seed", "1"]
    load = os.getloadavg()[0]
    wall, cpu, pss, rss, rc, err = _run_measured(cmd)
    if rc != 0:
        skipped("replay_lines_per_s", f"replay failed (exit {rc}): {err}")
        return
    manifest = json.loads((out / "replay.json").read_text(encoding="utf-8"))
    note = (
        f"{lines:,} lines of {size / lines:.0f} B (generated in {gen_s:.0f} s), wall {wall:.1f} s, --sample 5000, "
        f"redaction on, {os.cpu_count()} cores, load before {load:.2f}; {manifest['lines']['used']:,} cases written; "
        f"json.loads of one line took {calib:.1f} us just before (a gauge of how busy the cores are)"
    )
    if quick:
        note += "; quick mode: the 1,000,000-line figure needs the full run"
    figure("replay_lines_per_s", lines / wall, "lines/s", note)
    figure(
        "replay_cpu_us_per_line",
        cpu / lines * 1e6,
        "us",
        f"CPU of the replay process and its workers per line, start-up included ({cpu:.0f} s); "
        f"two idle cores would take {2 * lines / cpu:,.0f} lines/s at this cost",
    )
    figure(
        "replay_peak_rss_mb",
        pss,
        "MB",
        f"peak PSS of the replay process and its workers (shared pages once), sampled every 50 ms; largest single RSS {rss:.0f} MB",
    )
    log.unlink()


if __name__ == "__main__":  # `python bench/figures_traffic.py LINES PATH`: a log to profile by hand
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    p = Path(sys.argv[2]) if len(sys.argv) > 2 else Path("/tmp/qc-traffic.jsonl")
    print(write_log(p, n), "bytes written to", p)
