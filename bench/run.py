"""qualitycheck's benchmarks: one `name: value unit` line per figure.

Every client figure is measured side by side in one invocation against the
same local server (bench/server.py), the server pinned to one core and the
client under test to the other, so the figures compare like with like on
this machine. Runs alternate between the clients and the median is kept,
because the machine may be shared.

    python bench/run.py            # full figures (several minutes)
    python bench/run.py --quick    # fewer repetitions and cases; < 10 minutes
    python bench/run.py --peers    # also lm-eval / promptfoo / inspect-ai when installed

Figures are recorded in docs/PERFORMANCE.md. Every process a section starts
ends with the bench, also when the bench is SIGKILLed (bench/_procs.py).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
PY = sys.executable
sys.path.insert(0, str(ROOT))

from bench import _procs  # noqa: E402  (bench/ is importable once the root is on the path)

SERVER_CPU, CLIENT_CPU = 1, 0
REAL = {"ttft": 0.05, "itl": 0.002, "chunks": 20}
INSTANT = {"ttft": 0.0, "itl": 0.0, "chunks": 20}


def figure(name: str, value: Any, unit: str = "", note: str = "") -> None:
    if isinstance(value, float):
        value = f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"
    line = f"{name}: {value}" + (f" {unit}" if unit else "") + (f"  # {note}" if note else "")
    print(line, flush=True)


def skipped(name: str, reason: str) -> None:
    print(f"{name}: skipped  # {reason}", flush=True)


def _pin(cpu: int) -> list[str]:
    if shutil.which("taskset") and (os.cpu_count() or 1) >= 2:
        return ["taskset", "-c", str(cpu)]
    return []


# ------------------------------------------------------------ processes
@contextmanager
def bench_server(mode: dict[str, float], record: bool = False) -> Iterator[str]:
    """bench/server.py in a subprocess on its own core; yields the /v1 base URL."""
    cmd = [
        *_pin(SERVER_CPU),
        PY,
        str(BENCH / "server.py"),
        "--ttft",
        str(mode["ttft"]),
        "--itl",
        str(mode["itl"]),
        "--chunks",
        str(int(mode["chunks"])),
    ] + (["--record"] if record else [])
    proc = _procs.popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        if not line.startswith("PORT "):
            raise RuntimeError(f"bench server did not start: {line!r}")
        yield f"http://127.0.0.1:{int(line.split()[1])}/v1"
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def server_stats(url: str) -> list[tuple[str, float, list[float]]]:
    """Per request (id, received, [chunk send times]) on the system-wide monotonic clock; clears them."""
    with urllib.request.urlopen(url.removesuffix("/v1") + "/stats", timeout=30) as resp:
        return json.loads(resp.read())


class Measured:
    """Outcome of one client process: wall and CPU seconds, peak RSS and its JSON output."""

    def __init__(self, wall_s: float, cpu_s: float, rss_mb: float, out: dict[str, Any], rc: int, err: str):
        self.wall_s, self.cpu_s, self.rss_mb, self.out, self.rc, self.err = wall_s, cpu_s, rss_mb, out, rc, err


def run_process(cmd: list[str], *, timeout: float = 900, env: dict[str, str] | None = None) -> Measured:
    """Run a client pinned to its core; wall from spawn to exit, CPU and RSS from wait4."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        proc = _procs.popen([*_pin(CLIENT_CPU), *cmd], stdout=out, stderr=err, env=env, cwd=ROOT)
        deadline = t0 + timeout
        while True:
            pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                proc.kill()
                pid, status, ru = os.wait4(proc.pid, 0)
                break
            time.sleep(0.01)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        text = out.read()
        last = text.strip().splitlines()[-1] if text.strip() else ""
        try:
            data = json.loads(last) if last.startswith("{") else {}
        except json.JSONDecodeError:
            data = {}
        return Measured(wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024, data, proc.returncode, err.read()[-2000:])


def bench_suite(path: Path, n: int) -> Path:
    with path.open("w") as f:
        for i in range(n):
            f.write(
                json.dumps(
                    {
                        "id": f"c{i}",
                        "category": "bench",
                        "params": {"max_tokens": 64},
                        "messages": [{"role": "user", "content": f"Say something r{i}"}],
                    }
                )
                + "\n"
            )
    return path


def qc_run_cmd(url: str, suite: Path, out: Path, concurrency_per_target: int) -> list[str]:
    """`qualitycheck run`, baseline and candidate on the same server: 2 requests per case."""
    return [
        PY,
        "-m",
        "qualitycheck",
        "run",
        "--baseline",
        url,
        "--candidate",
        url,
        "--model",
        "bench",
        "--suite",
        str(suite),
        "--out",
        str(out),
        "--concurrency",
        str(concurrency_per_target),
        "--no-preflight",
        "--retries",
        "0",
    ]


def _cli_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("QC_VERBOSE", None)
    return env


# ------------------------------------------------------------ figures
def _generation_span(folder: Path) -> tuple[float, float]:
    """(first request sent, last answer received), epoch seconds, from the run's own records."""
    from qualitycheck.core._store import RunStore

    first, last = float("inf"), 0.0
    with RunStore.open(folder) as store:
        for r in store.responses():
            first = min(first, r.started_at)
            last = max(last, r.started_at + (r.e2e_s or 0.0))
    return first, last


def overhead(tmp: Path, n: int, reps: int) -> None:
    """qualitycheck run vs the bare aiohttp client, N requests at concurrency 64, real-server mode."""
    suite = bench_suite(tmp / "overhead.jsonl", n // 2)
    qc, bare, gen, spans, before, after = [], [], [], [], [], []
    with bench_server(REAL) as url:
        run_process([PY, str(BENCH / "bare_client.py"), url, "64", "64"])  # warm caches, connections, page cache
        for r in range(reps):
            out = tmp / f"overhead-run-{r}"
            spawned = time.time()
            m = run_process(qc_run_cmd(url, suite, out, 32), env=_cli_env())
            ended = spawned + m.wall_s
            if m.rc not in (0, 1):
                raise RuntimeError(f"qualitycheck run failed (exit {m.rc}): {m.err}")
            first, last = _generation_span(out)
            qc.append(m)
            spans.append(last - first)
            before.append(first - spawned)
            after.append(ended - last)
            shutil.rmtree(out, ignore_errors=True)
            bare.append(run_process([PY, str(BENCH / "bare_client.py"), url, str(n), "64"]))
            gen.append(run_process([PY, str(BENCH / "qc_driver.py"), url, str(n), "64"], env=_cli_env()))
    med = statistics.median
    bare_loop = med([m.out["wall_s"] for m in bare])
    note = f"N={n} requests, c=64, server 50 ms TTFT + 2 ms x 20 chunks, median of {reps}"
    figure(
        "harness_overhead_ratio",
        med(spans) / bare_loop,
        "x",
        f"`qualitycheck run` first request to last answer / bare aiohttp client request loop; {note}",
    )
    figure("qualitycheck_run_generation_s", med(spans), "s", "baseline+candidate, 32 in flight each (64 total)")
    figure("bare_aiohttp_loop_s", bare_loop, "s")
    figure(
        "harness_driver_ratio",
        med([m.out["wall_s"] for m in gen]) / bare_loop,
        "x",
        "runner+client+store driven in-process (one target, c=64) / bare client",
    )
    qc_wall, bare_wall = med([m.wall_s for m in qc]), med([m.wall_s for m in bare])
    figure(
        "harness_process_ratio",
        qc_wall / bare_wall,
        "x",
        f"whole processes: qualitycheck run {qc_wall:.2f} s (start-up {med(before):.2f} s before the first request, "
        f"{med(after):.2f} s after the last answer: scoring, stats, summary, report) / bare client {bare_wall:.2f} s",
    )
    figure("qualitycheck_run_cpu_ms_per_request", med([m.cpu_s for m in qc]) / n * 1000, "ms", "whole process CPU / N")
    figure("qualitycheck_run_peak_rss_mb", med([m.rss_mb for m in qc]), "MB")
    figure("bare_aiohttp_peak_rss_mb", med([m.rss_mb for m in bare]), "MB")


def client_cpu(n: int, reps: int) -> None:
    """Client CPU per streamed request and requests/s against an instant server (request loop only)."""
    qc, bare = [], []
    with bench_server(INSTANT) as url:
        run_process([PY, str(BENCH / "bare_client.py"), url, "64", "64"])
        for _ in range(reps):
            qc.append(run_process([PY, str(BENCH / "qc_driver.py"), url, str(n), "64"], env=_cli_env()).out)
            bare.append(run_process([PY, str(BENCH / "bare_client.py"), url, str(n), "64"]).out)
    for name, runs in (("qualitycheck", qc), ("bare_aiohttp", bare)):
        cpu = statistics.median(r["cpu_s"] for r in runs) / n * 1000
        rps = statistics.median(n / r["wall_s"] for r in runs)
        figure(f"{name}_client_cpu_ms_per_request", cpu, "ms", f"instant server, N={n}, c=64, streamed, 20 chunks")
        figure(f"{name}_requests_per_s", rps, "req/s", "one process, one core")


def _errors(
    timings: dict[str, list[float]], server: list[tuple[str, float, list[float]]], skip_first: int = 0
) -> tuple[list[float], list[float], list[float]]:
    """(TTFT errors, ITL errors, server TTFTs) in ms: client-measured minus what the server did.

    `skip_first` leaves out the first requests (ids r0..): they also time opening the connections.
    """
    srv = {rid: (t_recv, sent) for rid, t_recv, sent in server}
    ttft_err, itl_err, srv_ttft = [], [], []
    for rid, times in timings.items():
        if rid not in srv or not times or int(rid[1:]) < skip_first:
            continue
        t_recv, sent = srv[rid]
        if len(sent) != len(times):
            continue
        s_ttft = sent[0] - t_recv
        srv_ttft.append(s_ttft * 1000)
        ttft_err.append((times[0] - s_ttft) * 1000)
        for i in range(1, len(times)):
            itl_err.append(((times[i] - times[i - 1]) - (sent[i] - sent[i - 1])) * 1000)
    return ttft_err, itl_err, srv_ttft


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def measurement_error(n1: int, n64: int) -> None:
    """How far the client's TTFT/ITL are from the server's actual send times, at c=1 and c=64."""
    with bench_server(REAL, record=True) as url:
        run_process([PY, str(BENCH / "bare_client.py"), url, "64", "64"])
        for c, n in ((1, n1), (64, n64)):
            for name, script in (("qualitycheck", "qc_driver.py"), ("bare_aiohttp", "bare_client.py")):
                server_stats(url)  # clear
                m = run_process([PY, str(BENCH / script), url, str(n), str(c), "--timings"], env=_cli_env())
                stats = server_stats(url)
                cold, _, _ = _errors({k: v for k, v in m.out.get("timings", {}).items() if int(k[1:]) < c}, stats)
                ttft, itl, srv_ttft = _errors(m.out.get("timings", {}), stats, skip_first=c)
                if not ttft:
                    skipped(f"{name}_ttft_error_ms_c{c}", f"no matched requests (exit {m.rc}: {m.err[-200:]})")
                    continue
                figure(
                    f"{name}_ttft_error_ms_c{c}",
                    statistics.median(ttft),
                    "ms",
                    f"median client-minus-server, p99 {_pct(ttft, 0.99):.2f} ms; N={len(ttft)} after the first {c} "
                    f"(those open connections: median {statistics.median(cold) if cold else float('nan'):.1f} ms); "
                    f"server TTFT p50 {statistics.median(srv_ttft):.1f} ms (injected 50)",
                )
                figure(
                    f"{name}_itl_error_ms_c{c}",
                    statistics.median([abs(x) for x in itl]),
                    "ms",
                    f"median |client gap - server gap|, p99 {_pct([abs(x) for x in itl], 0.99):.2f} ms; injected gap 2 ms",
                )


def peak_rss(tmp: Path, sizes: list[int], quick: bool) -> None:
    """Peak RSS of whole `qualitycheck run` processes at two suite sizes: flat means streaming to the store.

    The slope between the two sizes (KB per case) is what grows with a run;
    the rest is the fixed cost of the process (Python, numpy, scipy, sqlite).
    """
    whole: dict[int, float] = {}
    with bench_server(INSTANT) as url:
        for n in sizes:
            suite = bench_suite(tmp / f"rss-{n}.jsonl", n)
            out = tmp / f"rss-run-{n}"
            m = run_process(qc_run_cmd(url, suite, out, 64), env=_cli_env(), timeout=3600)
            if m.rc not in (0, 1):
                skipped(f"peak_rss_{n}_cases_mb", f"run failed (exit {m.rc}): {m.err[-300:]}")
                continue
            note = f"{2 * n} requests, wall {m.wall_s:.0f} s"
            if quick and n == max(sizes):
                note += "; quick mode: 100,000-case figure needs the full run"
            figure(f"peak_rss_{n}_cases_mb", m.rss_mb, "MB", note + "; whole `qualitycheck run` incl. scoring, stats, report")
            whole[n] = m.rss_mb
            shutil.rmtree(out, ignore_errors=True)
            suite.unlink()
            d = run_process([PY, str(BENCH / "qc_driver.py"), url, str(2 * n), "64"], env=_cli_env(), timeout=3600)
            figure(
                f"peak_rss_generation_{2 * n}_requests_mb",
                d.rss_mb,
                "MB",
                "runner+client+store only (qc_driver): the request loop streams to the store",
            )
    if len(whole) >= 2:
        lo, hi = min(whole), max(whole)
        figure(
            "peak_rss_growth_kb_per_case",
            (whole[hi] - whole[lo]) * 1024 / (hi - lo),
            "KB",
            f"whole-run peak RSS slope between {lo:,} and {hi:,} cases (2 responses each); the rest is fixed cost",
        )


def _compile_bytecode() -> str:
    """Write the package's bytecode before anything is timed, as `pip install` does for an installed package.

    Most figures time whole `qualitycheck` processes, start-up included. On
    a machine that sets PYTHONDONTWRITEBYTECODE no process ever writes its
    bytecode, so each one would compile every module it imports from source,
    a cost no installed tool pays; reading bytecode is not affected by the
    variable.
    """
    import compileall

    ok = compileall.compile_dir(str(ROOT / "qualitycheck"), quiet=1)
    writes = "PYTHONDONTWRITEBYTECODE set" if os.environ.get("PYTHONDONTWRITEBYTECODE") else "bytecode writes on"
    return f"package bytecode compiled first ({writes})" if ok else "package bytecode: compileall failed, start-ups include compiling"


def main() -> int:
    ap = argparse.ArgumentParser(description="qualitycheck benchmarks; prints one `name: value unit` line per figure")
    ap.add_argument("--quick", action="store_true", help="fewer repetitions and cases (under ten minutes)")
    ap.add_argument("--peers", action="store_true", help="also drive lm-eval, promptfoo and inspect-ai when installed")
    ap.add_argument(
        "--only",
        action="append",
        help="run only these sections (overhead, cpu, error, rss, sandbox, judge, report, gate, replay, shadow, peers, "
        "engines: the overhead on real vLLM and llama-server, only when named)",
    )
    a = ap.parse_args()
    from bench import figures_scoring

    compiled = _compile_bytecode()

    uname = platform.uname()
    print(
        f"# machine: {uname.system} {uname.release} {uname.machine}, {os.cpu_count()} cores, "
        f"python {platform.python_version()}, {'quick' if a.quick else 'full'} mode; {compiled}",
        flush=True,
    )
    sections = set(
        a.only
        or ["overhead", "cpu", "error", "rss", "sandbox", "judge", "report", "gate", "replay", "shadow"] + (["peers"] if a.peers else [])
    )
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="qc-bench-") as td:
        tmp = Path(td)
        if "overhead" in sections:
            overhead(tmp, 2000, 3 if a.quick else 5)
        if "cpu" in sections:
            client_cpu(2000, 3 if a.quick else 5)
        if "error" in sections:
            measurement_error(50 if a.quick else 200, 1000 if a.quick else 2000)
        if "rss" in sections:
            peak_rss(tmp, [2000, 20000] if a.quick else [10000, 100000], a.quick)
        if "sandbox" in sections:
            figures_scoring.sandbox_rate(figure, skipped, a.quick)
        if "judge" in sections:
            figures_scoring.judge_savings(figure, skipped, tmp, a.quick)
        if "report" in sections:
            figures_scoring.report_build(figure, skipped, tmp, 10000)
        if "gate" in sections:
            figures_scoring.gate_power(figure, skipped, 200 if a.quick else 1000)
        if "replay" in sections:
            from bench import figures_traffic

            figures_traffic.replay_rate(figure, skipped, tmp, a.quick)
        if "shadow" in sections:
            from bench import figures_shadow

            figures_shadow.run(figure, skipped, tmp, bench_server, a.quick)
        if "engines" in sections:
            from bench import figures_engines

            helpers = {"run_process": run_process, "qc_run_cmd": qc_run_cmd, "generation_span": _generation_span, "cli_env": _cli_env}
            helpers |= {"bare_client": BENCH / "bare_client.py", "server_cpu": SERVER_CPU, "python": PY}
            figures_engines.run(figure, skipped, tmp, helpers, a.quick)
        if "peers" in sections:
            from bench import peers

            peers.run_peers(figure, skipped, tmp, bench_server, run_process, REAL, 2000)
    figure("bench_wall_s", time.perf_counter() - t_start, "s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
