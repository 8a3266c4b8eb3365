"""The shadow benchmark's load generator: streaming chat requests at a fixed concurrency, timed per request.

It measures what a caller sees: time to the first content chunk and to the
end of the answer, per request, the same way whether it talks to the server
directly or through the proxy, so the two runs can be set side by side.

Run: `python bench/shadow_load.py URL N CONCURRENCY [--no-stream] [--usage] [--stagger S] [--rate R]`;
prints a JSON line {wall_s, cpu_s, ok, errors, ttft_ms: [...], e2e_ms: [...]}.

`--stagger S` starts client i of c after i/c x S seconds: callers that do not
all send in the same millisecond. Without it the c clients start together,
and when every answer takes as long as the next (a paced server), they stay
in step for the whole run, so every request arrives in a burst of c.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Iterator

import aiohttp


async def run(url: str, n: int, concurrency: int, stream: bool, stagger: float = 0.0, rate: float = 0.0, usage: bool = False) -> dict:
    conn = aiohttp.TCPConnector(limit=concurrency)
    ttft: list[float] = []
    e2e: list[float] = []
    ok = errors = 0
    queue = iter(range(n))

    async with aiohttp.ClientSession(connector=conn) as session:

        async def worker(k: int) -> None:
            if stagger:
                await asyncio.sleep(stagger * k / concurrency)
            await send_from(queue)

        async def send_from(indices: Iterator[int]) -> None:
            nonlocal ok, errors
            for i in indices:
                body = {
                    "model": "bench",
                    "messages": [{"role": "user", "content": f"Say something r{i}"}],
                    "stream": stream,
                    "temperature": 0,
                    "max_tokens": 64,
                }
                if usage and stream:  # token counts in the stream: what TPOT needs
                    body["stream_options"] = {"include_usage": True}
                t0 = time.perf_counter()
                first = None
                try:
                    async with session.post(url + "/chat/completions", json=body) as resp:
                        if resp.status not in (200, 204):  # 204: a shadow sink's empty answer
                            errors += 1
                            await resp.read()
                            continue
                        if stream:
                            async for line in resp.content:
                                if first is None and line.startswith(b"data:") and b'"content"' in line:
                                    first = time.perf_counter()
                                if line.startswith(b"data: [DONE]"):
                                    break
                        else:
                            await resp.read()
                            first = time.perf_counter()
                except aiohttp.ClientError:
                    errors += 1
                    continue
                end = time.perf_counter()
                ok += 1
                ttft.append(((first or end) - t0) * 1000)
                e2e.append((end - t0) * 1000)

        t0, c0 = time.perf_counter(), time.process_time()
        if rate:  # open loop: request i leaves at i / rate whatever the answers do, at most `concurrency` open at once
            gate = asyncio.Semaphore(concurrency)

            async def one(i: int) -> None:
                async with gate:
                    await send_from(iter([i]))

            tasks = []
            for i in range(n):
                delay = t0 + i / rate - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                tasks.append(asyncio.ensure_future(one(i)))
            await asyncio.gather(*tasks)
        else:
            await asyncio.gather(*(worker(k) for k in range(concurrency)))
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"wall_s": wall, "cpu_s": cpu, "ok": ok, "errors": errors, "ttft_ms": ttft, "e2e_ms": e2e}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("url", help="base URL ending in /v1")
    ap.add_argument("n", type=int)
    ap.add_argument("concurrency", type=int)
    ap.add_argument("--no-stream", action="store_true")
    ap.add_argument("--usage", action="store_true", help="ask for usage in the stream (stream_options.include_usage)")
    ap.add_argument("--stagger", type=float, default=0.0, help="seconds over which the clients' first requests are spread")
    ap.add_argument("--rate", type=float, default=0.0, help="open loop: requests per second, sent on time whatever the answers do")
    a = ap.parse_args()
    run_ = asyncio.run
    try:
        import uvloop

        run_ = uvloop.run
    except ImportError:
        pass
    out = run_(run(a.url, a.n, a.concurrency, not a.no_stream, a.stagger, a.rate, a.usage))
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
