"""The reference: the fastest plain streaming client we can write (aiohttp).

It does only what any measuring client must: send the request, read the SSE
lines, parse each `data:` JSON, note when each content chunk arrived. No
retries, no store, no records. `harness_overhead_ratio` divides
qualitycheck's wall time by this one's.

Run: `python bench/bare_client.py URL N CONCURRENCY [--timings] [--model M]
[--max-tokens T] [--temperature X]`; prints a JSON line {wall_s, cpu_s, ok,
timings: {id: [ttft, t1, t2, ...]}}. `--model`, `--max-tokens`,
`--temperature` and `--close` are for real engines (bench/figures_engines.py):
the served model, greedy answers of a bounded length so both clients ask for
the same work, and a connection per request, because llama-server closes
kept-alive connections that aiohttp then fails to write to (this client has
no retries; qualitycheck's retry such a failure).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time

import aiohttp


async def run(
    url: str,
    n: int,
    concurrency: int,
    keep_timings: bool,
    model: str = "bench",
    max_tokens: int = 64,
    temperature: float | None = None,
    close: bool = False,
) -> dict:
    conn = aiohttp.TCPConnector(limit=concurrency, force_close=close)
    timings: dict[str, list[float]] = {}
    ok = 0
    queue = iter(range(n))

    async with aiohttp.ClientSession(connector=conn) as session:

        async def worker() -> None:
            nonlocal ok
            for i in queue:
                rid = f"r{i}"
                body = {
                    "model": model,
                    "messages": [{"role": "user", "content": f"Say something {rid}"}],
                    "stream": True,
                    "max_tokens": max_tokens,
                }
                if temperature is not None:
                    body["temperature"] = temperature
                t0 = time.perf_counter()
                times: list[float] = []
                async with session.post(url + "/chat/completions", json=body) as resp:
                    async for line in resp.content:
                        if not line.startswith(b"data:"):
                            continue
                        payload = line[5:].strip()
                        if payload == b"[DONE]":
                            ok += 1
                            break
                        now = time.perf_counter()
                        data = json.loads(payload.decode())  # str parses faster than bytes
                        for ch in data.get("choices") or ():
                            if (ch.get("delta") or {}).get("content"):
                                times.append(now - t0)
                if keep_timings:
                    timings[rid] = times

        t0, c0 = time.perf_counter(), time.process_time()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"wall_s": wall, "cpu_s": cpu, "ok": ok, "timings": timings}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("url", help="base URL ending in /v1")
    ap.add_argument("n", type=int)
    ap.add_argument("concurrency", type=int)
    ap.add_argument("--timings", action="store_true", help="include per-request chunk times")
    ap.add_argument("--model", default="bench")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--temperature", type=float)
    ap.add_argument("--close", action="store_true", help="a new connection per request (llama-server drops kept-alive ones)")
    a = ap.parse_args()
    out = asyncio.run(run(a.url, a.n, a.concurrency, a.timings, a.model, a.max_tokens, a.temperature, a.close))
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
