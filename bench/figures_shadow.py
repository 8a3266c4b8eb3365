"""Benchmark figures for the shadow proxy: added latency, requests per second on one core, memory with rotation.

Everything runs against bench/server.py (the local streaming server) pinned
to one core, with the proxy (`qualitycheck shadow`, a whole process) pinned
to the other; the load generator (bench/shadow_load.py, 64 concurrent
streaming clients) shares the server's core. Direct and proxied runs
alternate in one invocation and the medians are kept, because the machine
may be shared: the added latency is the proxied percentile minus the direct
percentile of the neighbouring run.

- latency: the real-server mode (50 ms to the first chunk, 2 ms between 20
  chunks), at the default `--sample 0.1` and at `--sample 1.0`; and the
  LLM pacing (`LLM`: what a GPU serving engine does at 64 concurrent streams,
  seconds per answer), where the proxy is not the bottleneck and the
  difference is what one caller waits extra (docs/PERFORMANCE.md says where
  the numbers come from). The callers are independent: their first requests
  are spread over one answer's duration. Clients that start together against
  a server whose every answer takes as long as the next stay in step for the
  whole run, and then every request arrives in a burst of 64 in the same
  millisecond; that case has figures of its own (`_burst`), because there
  the p99 is the cost of setting up 64 requests one after another, and says
  how fast the cores are more than what the proxy adds. Two references run
  in the same alternation: a bare aiohttp pass-through (bench/bare_proxy.py,
  the cost of handling HTTP in Python) and a byte relay (bench/tcp_relay.py,
  the hop with no HTTP handled at all);
- throughput: the instant server, `--sample 1.0` (every request mirrored and
  stored); requests/s is what the load generator saw, and the proxy's own CPU
  time per request says what one core sustains when it is the bottleneck;
- memory: the RSS of the proxy's two processes over a long run with
  `--rotate-every`, sampled as it goes, and its slope over the second half
  (flat means nothing grows with the number of requests);
- timing skew: one server as both baseline and candidate, the stored
  sides' TPOT and TTFT p95 compared (the listening process times one, the
  mirror process the other);
- the sink (`--sink`, behind a gateway's mirror): its answer to the gateway
  while its mirror process is saturated (requests sent on time at a rate it
  does not keep up with), beside an aiohttp server that only answers 204
  (bench/bare_proxy.py with `-`) under the same load on the same core, and
  the pairs it mirrors per second of its CPU, at `--sample 1.0`.

The proxy and the sink are two processes each (the listening one and its
mirror process); both are pinned to the same core, so "per core" figures
count both, and the listening loop's own CPU is reported beside them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench import _procs

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
PY = sys.executable
PROXY_CPU, SERVER_CPU = 0, 1
REAL = {"ttft": 0.05, "itl": 0.002, "chunks": 20}
INSTANT = {"ttft": 0.0, "itl": 0.0, "chunks": 20}
LLM = {"ttft": 0.087, "itl": 0.0275, "chunks": 51}
"""A GPU serving engine at 64 concurrent streams: vLLM serving a 7B model on one RTX A6000 at concurrency 64 measured
TTFT p50 87 ms, time per output token p50 27.5 ms, about 51 tokens per answer, one SSE event per token (published
figures; see docs/PERFORMANCE.md). About 1.5 s per answer, so 64 callers send about 44 requests per second."""

Figure = Callable[..., None]


def _pin(cpu: int) -> list[str]:
    if shutil.which("taskset") and (os.cpu_count() or 1) >= 2:
        return ["taskset", "-c", str(cpu)]
    return []


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process and all its threads, from /proc."""
    return _cpu_s_of(Path(f"/proc/{pid}/stat"))


def _both_cpu_s(pids: tuple[int, int]) -> float:
    """The listening process's and its mirror process's CPU seconds together."""
    return _cpu_s(pids[0]) + _cpu_s(pids[1])


def _loop_cpu_s(pid: int) -> float:
    """CPU seconds of the process's main thread alone: the event loop (the rest is the writer thread's)."""
    return _cpu_s_of(Path(f"/proc/{pid}/task/{pid}/stat"))


def _cpu_s_of(stat: Path) -> float:
    fields = stat.read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


@contextmanager
def proxy(
    baseline: str, out: Path, sample: float, *extra: str, config: dict[str, Any] | None = None
) -> Iterator[tuple[str, tuple[int, int]]]:
    """`qualitycheck shadow` pinned to its core, in front of `baseline` (also its candidate); yields (URL, (pid, mirror pid))."""
    cfg = out.parent / f"{out.name}.yaml"
    cfg.write_text(json.dumps({"shadow": {"summarize_rotated": False, **(config or {})}}), encoding="utf-8")
    log = out.parent / f"{out.name}.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), "NO_COLOR": "1"}
    root = baseline.removesuffix("/v1")
    cmd = [*_pin(PROXY_CPU), PY, "-m", "qualitycheck", "shadow", "-c", str(cfg), "--listen", "127.0.0.1:0"]
    cmd += ["--baseline", root, "--candidate", root, "--model", "bench", "--out", str(out), "--sample", str(sample), *extra]
    with log.open("wb") as err:
        proc = _procs.popen(cmd, stdout=err, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    try:
        deadline = time.monotonic() + 60
        pattern = r"listening on (http://127\.0\.0\.1:\d+).*\(mirror process (\d+)\)"
        while not (m := re.search(pattern, log.read_text(errors="replace"))):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the proxy did not start: {log.read_text(errors='replace')[-2000:]}")
            time.sleep(0.05)
        yield m.group(1) + "/v1", (proc.pid, int(m.group(2)))
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(600)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def reference(script: str, baseline: str) -> Iterator[str]:
    """A reference hop (bench/bare_proxy.py, bench/tcp_relay.py) pinned where the shadow proxy runs; yields its /v1 URL."""
    upstream = baseline if baseline == "-" else baseline.removesuffix("/v1")
    proc = _procs.popen([*_pin(PROXY_CPU), PY, str(BENCH / script), upstream], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        if not line.startswith("PORT "):
            raise RuntimeError(f"{script} did not start: {line!r}")
        yield f"http://127.0.0.1:{int(line.split()[1])}/v1"
    finally:
        proc.terminate()
        proc.wait(10)


def _load_run(
    url: str, n: int, c: int = 64, stagger: float = 0.0, *, stream: bool = True, rate: float = 0.0, usage: bool = False
) -> dict[str, Any]:
    cmd = [*_pin(SERVER_CPU), PY, str(BENCH / "shadow_load.py"), url, str(n), str(c)] + (["--stagger", str(stagger)] if stagger else [])
    cmd += ([] if stream else ["--no-stream"]) + (["--rate", str(rate)] if rate else []) + (["--usage"] if usage else [])
    out = _procs.run(cmd, capture_output=True, text=True, timeout=3600)
    if out.returncode != 0:
        raise RuntimeError(f"load generator failed: {out.stderr[-2000:]}")
    data: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return data


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def _answer_s(mode: dict[str, float]) -> float:
    return mode["ttft"] + (mode["chunks"] - 1) * mode["itl"]


def added_latency(figure: Figure, tmp: Path, bench_server: Any, n: int, reps: int) -> None:
    """At c=64 (the bar), at c=8, where the proxy's core is far from saturated, and with the 64 callers in step."""
    spread = _answer_s(REAL)
    runs = [(0.1, "", 64, n, spread), (1.0, "_sample1", 64, n, spread), (0.1, "_c8", 8, n // 2, spread), (0.1, "_burst", 64, n, 0.0)]
    pacing = f"server 50 ms TTFT + 2 ms x 20 chunks, clients' starts spread over {spread:.3f} s (none for _burst: all in step)"
    _added_latency(figure, tmp, bench_server, REAL, runs, reps, pacing)


def added_latency_llm(figure: Figure, tmp: Path, bench_server: Any, n: int, reps: int) -> None:
    """At c=64 with the LLM pacing: each caller's stream lasts seconds, and the proxy's core is not saturated."""
    spread = _answer_s(LLM)
    runs = [(0.1, "_llm", 64, n, spread), (1.0, "_llm_sample1", 64, n, spread)]
    pacing = f"LLM pacing: server 87 ms TTFT + 27.5 ms x 51 chunks, clients' starts spread over {spread:.2f} s"
    _added_latency(figure, tmp, bench_server, LLM, runs, reps, pacing)


def _added_latency(
    figure: Figure,
    tmp: Path,
    bench_server: Any,
    mode: dict[str, float],
    runs: list[tuple[float, str, int, int, float]],
    reps: int,
    pacing: str,
) -> None:
    med = statistics.median
    keys = ("ttft_p50", "ttft_p99", "e2e_p50", "e2e_p99")
    with bench_server(mode) as url:
        for sample, suffix, c, n_run, stagger in runs:
            out = tmp / f"shadow-latency{suffix or '-default'}"
            added: dict[str, dict[str, list[float]]] = {hop: {k: [] for k in keys} for hop in ("proxy", "bare", "relay")}
            direct_p50: list[float] = []
            with proxy(url, out, sample) as (purl, _), reference("bare_proxy.py", url) as burl, reference("tcp_relay.py", url) as rurl:
                hops = {"proxy": purl, "bare": burl, "relay": rurl}
                for u in (*hops.values(), url):  # warm: connections, caches
                    _load_run(u, min(256, n_run), c, stagger)
                for _ in range(reps):
                    d = _load_run(url, n_run, c, stagger)
                    for hop, hop_url in hops.items():
                        r = _load_run(hop_url, n_run, c, stagger)
                        if hop == "proxy":
                            _settled(purl)  # its mirrors and writer finish before a reference hop shares its core
                        if d["errors"] or r["errors"]:
                            raise RuntimeError(f"errors: direct {d['errors']}, {hop} {r['errors']}")
                        for key in ("ttft", "e2e"):
                            for q, name in ((0.5, "p50"), (0.99, "p99")):
                                added[hop][f"{key}_{name}"].append(_pct(r[f"{key}_ms"], q) - _pct(d[f"{key}_ms"], q))
                    direct_p50.append(_pct(d["ttft_ms"], 0.5))
            shutil.rmtree(out, ignore_errors=True)
            note = (
                f"proxied minus direct, c={c}, N={n_run} per run, median of {reps} alternating runs, --sample {sample}; "
                f"{pacing} (direct TTFT p50 {med(direct_p50):.1f} ms); {_load()}"
            )
            for key in ("ttft", "e2e"):
                for pq in ("p50", "p99"):
                    k = f"{key}_{pq}"
                    figure(
                        f"shadow_added_latency{'' if key == 'ttft' else '_e2e'}_ms_{pq}{suffix}",
                        med(added["proxy"][k]),
                        "ms",
                        (note if pq == "p50" else "")
                        + f"  same runs, bare aiohttp pass-through {med(added['bare'][k]):.2f} ms, byte relay {med(added['relay'][k]):.2f} ms",
                    )
            for key in ("ttft", "e2e"):
                for pq in ("p50", "p99"):
                    k = f"{key}_{pq}"
                    over = [p - b for p, b in zip(added["proxy"][k], added["bare"][k], strict=True)]
                    figure(
                        f"shadow_added_{key}_vs_bare_ms_{pq}{suffix}",
                        med(over),
                        "ms",
                        f"the proxy's addition minus the bare aiohttp hop's, run by run; spread {min(over):.2f} to {max(over):.2f} ms "
                        f"over {reps} alternations (goal: p50 within 0.5 ms, p99 within 2 ms)",
                    )


def _settled(purl: str) -> None:
    """Wait until every mirrored pair is stored: the writer's work for a run is counted in that run (a figure past it is wrong)."""
    root = purl.removesuffix("/v1")
    for _ in range(1200):
        with urllib.request.urlopen(root + "/qc/health", timeout=10) as r:
            health = json.loads(r.read())
        if health["inflight"] == 0 and health["writer_backlog"] == 0:
            return
        time.sleep(0.05)
    raise RuntimeError(f"the shadow proxy did not settle within 60 s: {health}")


def throughput(figure: Figure, tmp: Path, bench_server: Any, n: int, reps: int) -> None:
    rps, cpu_ms, loop_ms, direct_rps, cpu_ms_01 = [], [], [], [], []
    with bench_server(INSTANT) as url:
        out = tmp / "shadow-throughput"
        with proxy(url, out, 1.0, "--max-inflight", "4096") as (purl, pid):
            _load_run(purl, 512)
            for _ in range(reps):
                direct_rps.append(n / _load_run(url, n)["wall_s"])
                _settled(purl)
                c0, l0 = _both_cpu_s(pid), _loop_cpu_s(pid[0])
                r = _load_run(purl, n)
                _settled(purl)
                cpu_ms.append((_both_cpu_s(pid) - c0) / n * 1000)
                loop_ms.append((_loop_cpu_s(pid[0]) - l0) / n * 1000)
                rps.append(r["ok"] / r["wall_s"])
        stored = json.loads((out / "shadow.json").read_text())["stored"] if (out / "shadow.json").is_file() else None
        shutil.rmtree(out, ignore_errors=True)
        out = tmp / "shadow-throughput-01"
        with proxy(url, out, 0.1, "--max-inflight", "4096") as (purl, pid):
            _load_run(purl, 512)
            for _ in range(reps):
                _settled(purl)
                c0 = _both_cpu_s(pid)
                _load_run(purl, n)
                _settled(purl)
                cpu_ms_01.append((_both_cpu_s(pid) - c0) / n * 1000)
        shutil.rmtree(out, ignore_errors=True)
    med = statistics.median
    figure(
        "shadow_requests_per_s",
        med(rps),
        "req/s",
        f"--sample 1.0 (every request mirrored and stored: {stored} pairs), instant server, 20 chunks, c=64, N={n}, median of {reps}; "
        f"the same load generator direct: {med(direct_rps):.0f} req/s; {_load()}",
    )
    figure(
        "shadow_proxy_cpu_ms_per_request",
        med(cpu_ms),
        "ms",
        f"the proxy's two processes' CPU (every thread) per request, --sample 1.0; the listening loop's thread {med(loop_ms):.2f} ms, "
        f"the mirror process's {med(cpu_ms) - med(loop_ms):.2f} ms",
    )
    figure("shadow_proxy_cpu_ms_per_request_sample01", med(cpu_ms_01), "ms", f"the same at --sample 0.1; {_load()}")
    figure(
        "shadow_requests_per_core_s",
        1000 / med(cpu_ms),
        "req/s",
        "1000 / CPU ms per request: what one core sustains when the proxy is the bottleneck",
    )


def memory(figure: Figure, tmp: Path, bench_server: Any, n: int, rotate: int, quick: bool) -> None:
    """RSS of each of the proxy's two processes at 20 points, sampled once the mirror side has stored what it was handed.

    Settled first, so a sample never counts a backlog that happened to be in
    flight at that moment (its size depends on what else ran on the machine).
    The growth is the slope over the second half of the run: the first half
    holds the warm-up (connection pools filling, caches and the allocator
    reaching their working size), which is not growth with the number of
    requests.
    """
    samples: list[tuple[int, float, float]] = []
    with bench_server(INSTANT) as url:
        out = tmp / "shadow-memory"
        with proxy(url, out, 1.0, "--max-inflight", "4096", "--rotate-every", str(rotate)) as (purl, pid):
            step = max(1, n // 20)
            done = 0
            while done < n:
                _load_run(purl, step)
                done += step
                _settled(purl)
                samples.append((done, _rss_mb(pid[0]), _rss_mb(pid[1])))
                for f in sorted(out.iterdir())[:-2]:  # closed folders are not the proxy's memory; keep the disk bounded
                    shutil.rmtree(f, ignore_errors=True)
        shutil.rmtree(out, ignore_errors=True)
    half = samples[len(samples) // 2 - 1 :]

    def slope(col: int) -> float:
        return statistics.linear_regression([s[0] for s in half], [s[col] for s in half]).slope * 100_000

    (n0, l0, m0), (n1, l1, m1) = samples[0], samples[-1]
    note = (
        f"RSS of both processes after {n0:,} requests {l0 + m0:.0f} MB (listening {l0:.0f}, mirror {m0:.0f}), "
        f"after {n1:,}: {l1 + m1:.0f} MB (listening {l1:.0f}, mirror {m1:.0f}); --sample 1.0, --rotate-every {rotate}"
    )
    if quick:
        note += "; quick mode: the 1,000,000-request figure needs the full run"
    figure(f"shadow_peak_rss_{n}_requests_mb", max(s[1] + s[2] for s in samples), "MB", note)
    figure(
        "shadow_rss_growth_mb_per_100k_requests",
        slope(1) + slope(2),
        "MB",
        f"least-squares slope of both processes' RSS from {half[0][0]:,} to {n1:,} requests (listening {slope(1):.2f}, "
        f"mirror {slope(2):.2f}); {_load()}",
    )


def sink(figure: Figure, tmp: Path, bench_server: Any, n: int, reps: int, rate: float = 1500.0) -> None:
    """The sink with more mirrored traffic than its mirror process keeps up with: what the gateway waits, and the pairs per CPU second.

    The gateway's requests arrive on time (open loop, `rate` per second, at
    most 256 open), as a gateway's mirror sends them whatever the sink does;
    a closed loop of callers would measure its own queue instead (64 callers
    waiting on each other's answers wait 64 / throughput, whatever the sink).
    """
    answer_p50, answer_p99, bare_p99, vs_bare, cpu_ms, loop_ms, drops, stored_share = [], [], [], [], [], [], [], []
    with bench_server(INSTANT) as url:
        out = tmp / "shadow-sink"
        with proxy(url, out, 1.0, "--sink", "--max-inflight", "4096") as (surl, pids), reference("bare_proxy.py", "-") as burl:
            _load_run(surl, 512, stream=False)
            _load_run(burl, 512, stream=False)
            _settled(surl)
            for _ in range(reps):
                b = _load_run(burl, n, 256, stream=False, rate=rate)  # the same load on an aiohttp server that only answers
                bare_p99.append(_pct(b["e2e_ms"], 0.99))
                stored0 = _metric(surl, "qc_shadow_stored_total")
                dropped0 = _metric(surl, "qc_shadow_dropped_total")
                c0, l0 = _both_cpu_s(pids), _loop_cpu_s(pids[0])
                r = _load_run(surl, n, 256, stream=False, rate=rate)
                _settled(surl)
                stored = _metric(surl, "qc_shadow_stored_total") - stored0
                if r["errors"]:
                    raise RuntimeError(f"the sink failed {r['errors']} answers")
                answer_p50.append(_pct(r["e2e_ms"], 0.5))
                answer_p99.append(_pct(r["e2e_ms"], 0.99))
                vs_bare.append(answer_p99[-1] - bare_p99[-1])
                cpu_ms.append((_both_cpu_s(pids) - c0) / max(1.0, stored) * 1000)
                loop_ms.append((_loop_cpu_s(pids[0]) - l0) / n * 1000)
                drops.append(_metric(surl, "qc_shadow_dropped_total") - dropped0)
                stored_share.append(stored / n)
        shutil.rmtree(out, ignore_errors=True)
    med = statistics.median
    figure(
        "shadow_sink_answer_ms_p99_saturated",
        med(answer_p99),
        "ms",
        f"what the gateway waits for the sink's empty answer: {rate:.0f} mirrored requests/s sent on time (open loop), "
        f"--sample 1.0, both sink processes on one core, N={n}, median of {reps}; p50 {med(answer_p50):.2f} ms; "
        f"{med(stored_share):.0%} of them stored, {med(drops):.0f} dropped per run (hand-off full or max in flight); {_load()} "
        f"(goal: 1 ms)",
    )
    figure(
        "shadow_sink_answer_vs_bare_ms_p99",
        med(vs_bare),
        "ms",
        f"the sink's p99 answer minus a bare aiohttp server's that only answers 204 (bench/bare_proxy.py -), the same load on "
        f"the same core, run by run; spread {min(vs_bare):.2f} to {max(vs_bare):.2f} ms; the bare server's own p99 "
        f"{med(bare_p99):.2f} ms",
    )
    figure(
        "shadow_sink_mirrored_per_core_s",
        1000 / med(cpu_ms),
        "req/s",
        f"1000 / CPU ms per stored pair of the sink's two processes ({med(cpu_ms):.2f} ms: both targets asked, both answers "
        f"parsed, the case redacted and stored); the listening loop's share {med(loop_ms):.3f} ms per request (goal: 1,000)",
    )


def timing_skew(figure: Figure, tmp: Path, bench_server: Any, n: int) -> None:
    """The same server as baseline and candidate: the stored sides' TPOT and TTFT p95 should agree, whatever the load.

    The listening process times the baseline as it forwards, the mirror
    process the candidate; a ratio away from 1 is what the proxy's own load
    does to the latency guardrails (`max_tpot_p95_regression` fails at 1.10).
    The callers ask for usage in their streams, so TPOT is defined, and the
    sides are summarised by `serving.side_latency`, as the gate reads them.
    """
    from qualitycheck.core._store import RunStore
    from qualitycheck.serving._latency import side_latency

    for sample, c, name in ((0.1, 64, "c64_sample01"), (1.0, 64, "c64_sample1"), (1.0, 8, "c8_sample1")):
        with bench_server(REAL) as url:
            out = tmp / f"shadow-skew-{name}"
            with proxy(url, out, sample) as (purl, _):
                _load_run(purl, int(n / sample) if sample < 1 else n, c, 0.088, usage=True)
                _settled(purl)
            with RunStore.open(out) as store:
                sides = side_latency(store.responses())
            shutil.rmtree(out, ignore_errors=True)
        base, cand = sides["baseline"], sides["candidate"]
        tpot = cand["tpot_ms"]["p95"] / base["tpot_ms"]["p95"]
        ttft = cand["ttft_ms"]["p95"] / base["ttft_ms"]["p95"]
        figure(
            f"shadow_same_server_tpot_p95_ratio_{name}",
            tpot,
            "x",
            f"candidate / baseline TPOT p95 of {base['requests']} stored pairs, one server as both, --sample {sample:g}, c={c}, "
            f"real-server pacing; TTFT p95 {ttft:.3f}x; {_load()} (1.00 is right; 1.10 fails max_tpot_p95_regression)",
        )


def _metric(url: str, name: str) -> float:
    """The sum of a /qc/metrics family's samples (all labels)."""
    with urllib.request.urlopen(url.removesuffix("/v1") + "/qc/metrics", timeout=10) as r:
        text = r.read().decode()
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name) and not line.startswith("#"))


def run(figure: Figure, skipped: Figure, tmp: Path, bench_server: Any, quick: bool) -> None:
    added_latency(figure, tmp, bench_server, 2000 if quick else 5000, 3 if quick else 5)
    added_latency_llm(figure, tmp, bench_server, 640 if quick else 1280, 3 if quick else 5)
    throughput(figure, tmp, bench_server, 5000 if quick else 20000, 3 if quick else 5)
    sink(figure, tmp, bench_server, 5000 if quick else 20000, 3 if quick else 5)
    timing_skew(figure, tmp, bench_server, 2000 if quick else 5000)
    memory(figure, tmp, bench_server, 100_000 if quick else 1_000_000, 20_000 if quick else 100_000, quick)
